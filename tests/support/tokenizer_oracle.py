"""The independent side of tests/test_tokenizer.cpp: what HF `tokenizers`, `sentencepiece` and the
`gguf` package say about the test's texts. Reads one JSON string per line, writes one JSON object
per line: {"ids": [...], "ids_special": [...], "decoded": "...", "decoded_skip": "..."} (or null
for a text the oracle cannot speak for).

  tokenizer_oracle.py hf TOKENIZER_JSON IN OUT        tokenizers.Tokenizer.from_file
  tokenizer_oracle.py sp MODEL IN OUT                 sentencepiece
  tokenizer_oracle.py gguf-vocab GGUF OUT_JSON        the tokenizer.ggml.* metadata as JSON
  tokenizer_oracle.py hf-from-gguf VOCAB_JSON IN OUT  tokenizers built from that vocabulary
  tokenizer_oracle.py sp-vocab MODEL OUT_JSON         a .model's pieces as a GGUF "llama" vocabulary
  tokenizer_oracle.py sp-to-json MODEL SCHEME OUT     a .model as a tokenizer.json (BPE with byte
                                                      fallback; SCHEME legacy or metaspace)
  tokenizer_oracle.py sp-toy OUT                      a small SentencePiece BPE model with what the
                                                      Mistral ones lack: unused pieces (merged, then
                                                      split back), user-defined pieces, no unk use
"""
import json
import sys


def read_texts(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def write_results(path, results):
    with open(path, "w", encoding="utf-8") as f:
        for r in results:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")


def run_hf(tok, texts):
    out = []
    for t in texts:
        ids = tok.encode(t, add_special_tokens=False).ids
        out.append({
            "ids": ids,
            "ids_special": tok.encode(t, add_special_tokens=True).ids,
            "decoded": tok.decode(ids, skip_special_tokens=False),
            "decoded_skip": tok.decode(ids, skip_special_tokens=True),
        })
    return out


def gguf_vocab(path):
    from gguf import GGUFReader
    r = GGUFReader(path)

    def field(name):
        f = r.fields.get(name)
        if f is None:
            return None
        if f.types and f.types[0].name == "ARRAY":
            return [f.contents(i) for i in range(len(f.data))]
        return f.contents()

    out = {
        "model": field("tokenizer.ggml.model"),
        "pre": field("tokenizer.ggml.pre"),
        "tokens": field("tokenizer.ggml.tokens"),
        "scores": field("tokenizer.ggml.scores") or [],
        "token_types": field("tokenizer.ggml.token_type") or [],
        "merges": field("tokenizer.ggml.merges") or [],
        "bos_id": field("tokenizer.ggml.bos_token_id"),
        "eos_id": field("tokenizer.ggml.eos_token_id"),
        "add_bos": bool(field("tokenizer.ggml.add_bos_token")),
    }
    return out


def hf_from_gguf(vocab):
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
    if vocab["model"] != "gpt2" or vocab["pre"] != "smollm":
        raise SystemExit("hf-from-gguf knows gpt2 vocabularies with the smollm pre-tokenizer only")
    tokens = vocab["tokens"]
    bpe = models.BPE(vocab={t: i for i, t in enumerate(tokens)},
                     merges=[tuple(m.split(" ")) for m in vocab["merges"]])
    tok = Tokenizer(bpe)
    # SmolLM2's own tokenizer.json: digits one by one, then GPT-2's byte-level split.
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    tok.decoder = decoders.ByteLevel()
    types = vocab["token_types"]
    tok.add_special_tokens([AddedToken(tokens[i], special=True, normalized=False)
                            for i in range(len(tokens)) if types and types[i] == 3])
    tok.add_tokens([AddedToken(tokens[i], special=False, normalized=False)
                    for i in range(len(tokens)) if types and types[i] == 4])
    return tok


def sp_processor(path):
    import sentencepiece as spm
    return spm.SentencePieceProcessor(model_file=path)


def sp_kinds(sp):
    def kind(i):
        if sp.is_unknown(i):
            return 2
        if sp.is_control(i):
            return 3
        if sp.is_unused(i):
            return 5
        if sp.is_byte(i):
            return 6
        return 1
    return [kind(i) for i in range(sp.get_piece_size())]


def run_sp(sp, texts, skip_with_controls):
    controls = [sp.id_to_piece(i) for i in range(sp.get_piece_size()) if sp.is_control(i)]
    out = []
    for t in texts:
        if skip_with_controls and any(c in t for c in controls):
            out.append(None)  # llama.cpp matches control tokens in text; sentencepiece does not
            continue
        ids = sp.encode(t)
        out.append({"ids": ids, "ids_special": sp.encode(t, add_bos=True), "decoded": sp.decode(ids),
                    "decoded_skip": sp.decode(ids)})
    return out


def sp_to_tokenizer_json(sp, scheme):
    """The conversion transformers applies to a SentencePiece BPE model, written out by hand so
    the test needs only `tokenizers`: merges are every split of a piece into two pieces, ordered by
    the piece's score."""
    n = sp.get_piece_size()
    kinds = sp_kinds(sp)
    vocab = {sp.id_to_piece(i): i for i in range(n)}
    scores = {sp.id_to_piece(i): sp.get_score(i) for i in range(n)}
    merges = []
    for piece, i in vocab.items():
        if kinds[i] != 1:
            continue
        local = [(piece[:k], piece[k:]) for k in range(1, len(piece))
                 if piece[:k] in vocab and piece[k:] in vocab]
        local.sort(key=lambda m: (vocab[m[0]], vocab[m[1]]))
        merges.extend((l, r, scores[piece]) for l, r in local)
    merges.sort(key=lambda m: -m[2])
    added = [{"id": i, "content": sp.id_to_piece(i), "single_word": False, "lstrip": False,
              "rstrip": False, "normalized": False, "special": True}
             for i in range(n) if kinds[i] in (2, 3)]
    doc = {
        "version": "1.0",
        "added_tokens": added,
        "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>", "fuse_unk": True,
                  "byte_fallback": True, "ignore_merges": False, "vocab": vocab,
                  "merges": [[l, r] for l, r, _ in merges]},
        "post_processor": {"type": "TemplateProcessing",
                           "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                                      {"Sequence": {"id": "A", "type_id": 0}}],
                           "pair": [], "special_tokens": {"<s>": {"id": "<s>", "ids": [vocab["<s>"]],
                                                                  "tokens": ["<s>"]}}},
    }
    if scheme == "legacy":
        doc["normalizer"] = {"type": "Sequence", "normalizers": [
            {"type": "Prepend", "prepend": "▁"},
            {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]}
        doc["pre_tokenizer"] = None
        doc["decoder"] = {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
            {"type": "ByteFallback"}, {"type": "Fuse"},
            {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}
    else:
        doc["normalizer"] = None
        doc["pre_tokenizer"] = {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first",
                                "split": False}
        doc["decoder"] = {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first",
                          "split": False}
    return doc


def proto_varint(n):
    out = b""
    while True:
        b, n = n & 0x7F, n >> 7
        if n == 0:
            return out + bytes([b])
        out += bytes([b | 0x80])


def proto_field(number, wire, payload):
    key = proto_varint(number << 3 | wire)
    if wire == 2:
        return key + proto_varint(len(payload)) + payload
    if wire == 5:
        return key + payload
    return key + proto_varint(payload)


def toy_sentencepiece_model():
    """ModelProto bytes, written field by field (the protobuf package is not needed): 3 control /
    unknown pieces, 256 byte pieces, user-defined "[U]" and "<tool>", and normal pieces where the
    best-scored merges ("ba", "▁▁") are unused, so sentencepiece merges them and splits them back."""
    import struct
    pieces = [("<unk>", 0.0, 2), ("<s>", 0.0, 3), ("</s>", 0.0, 3)]
    pieces += [(f"<0x{b:02X}>", 0.0, 6) for b in range(256)]
    pieces += [("[U]", 0.0, 4), ("<tool>", 0.0, 4)]
    normal = ["▁", "a", "b", "c", "l", "o", "e", "h", "t", "▁a", "ab", "aba", "lo", "▁lo", "he", "the",
              "▁the", "ca", "cab", "▁▁▁", "▁c"]
    pieces += [(p, -1.0 - 0.1 * i, 1) for i, p in enumerate(normal)]
    pieces += [("ba", -0.05, 5), ("▁▁", -0.01, 5), ("bab", -0.5, 5)]
    body = b"".join(proto_field(1, 2, proto_field(1, 2, p.encode()) +
                                proto_field(2, 5, struct.pack("<f", score)) + proto_field(3, 0, kind))
                    for p, score, kind in pieces)
    trainer = (proto_field(3, 0, 2) + proto_field(35, 0, 1) + proto_field(40, 0, 0) +
               proto_field(41, 0, 1) + proto_field(42, 0, 2))
    normalizer = proto_field(1, 2, b"identity") + proto_field(3, 0, 1) + proto_field(4, 0, 1)
    return body + proto_field(2, 2, trainer) + proto_field(3, 2, normalizer)


def main():
    mode = sys.argv[1]
    if mode == "hf":
        from tokenizers import Tokenizer
        write_results(sys.argv[4], run_hf(Tokenizer.from_file(sys.argv[2]), read_texts(sys.argv[3])))
    elif mode == "sp":
        write_results(sys.argv[4], run_sp(sp_processor(sys.argv[2]), read_texts(sys.argv[3]), False))
    elif mode == "sp-skip-controls":
        write_results(sys.argv[4], run_sp(sp_processor(sys.argv[2]), read_texts(sys.argv[3]), True))
    elif mode == "gguf-vocab":
        with open(sys.argv[3], "w", encoding="utf-8") as f:
            json.dump(gguf_vocab(sys.argv[2]), f, ensure_ascii=False)
    elif mode == "hf-from-gguf":
        with open(sys.argv[2], encoding="utf-8") as f:
            tok = hf_from_gguf(json.load(f))
        write_results(sys.argv[4], run_hf(tok, read_texts(sys.argv[3])))
    elif mode == "sp-vocab":
        sp = sp_processor(sys.argv[2])
        n = sp.get_piece_size()
        vocab = {"model": "llama", "pre": "default", "tokens": [sp.id_to_piece(i) for i in range(n)],
                 "scores": [sp.get_score(i) for i in range(n)], "token_types": sp_kinds(sp),
                 "merges": [], "bos_id": sp.bos_id(), "eos_id": sp.eos_id(), "add_bos": True}
        with open(sys.argv[3], "w", encoding="utf-8") as f:
            json.dump(vocab, f, ensure_ascii=False)
    elif mode == "sp-to-json":
        with open(sys.argv[4], "w", encoding="utf-8") as f:
            json.dump(sp_to_tokenizer_json(sp_processor(sys.argv[2]), sys.argv[3]), f, ensure_ascii=False)
    elif mode == "sp-toy":
        with open(sys.argv[2], "wb") as f:
            f.write(toy_sentencepiece_model())
    else:
        raise SystemExit(f"unknown mode {mode}")


if __name__ == "__main__":
    main()
