// Building a Tokenizer from a SentencePiece ModelProto (.model file): the pieces (string, score,
// type), the trainer's model type, unknown/bos/eos ids and byte_fallback, and the normalizer's
// whitespace flags. Only BPE models with the identity normalization rule are accepted; anything
// else is refused by name.
#include <fmt/format.h>

#include "amk/tokenizer.h"
#include "model/strict_json.h"  // quote_name
#include "tokenizer/pipeline.h"
#include "tokenizer/protobuf_reader.h"
#include "tokenizer/sentencepiece_bpe.h"
#include "tokenizer/utf8.h"

namespace amk {

namespace {

using namespace tokenizer_detail;
using Field = ProtobufReader::Field;

// ModelProto field numbers (sentencepiece_model.proto).
enum : uint32_t { kPieces = 1, kTrainerSpec = 2, kNormalizerSpec = 3 };
// SentencePiece: piece 1, score 2, type 3.  TrainerSpec: model_type 3,
// treat_whitespace_as_suffix 24, byte_fallback 35,
// unk_id 40, bos_id 41, eos_id 42.  NormalizerSpec: name 1, precompiled_charsmap 2,
// add_dummy_prefix 3, remove_extra_whitespaces 4, escape_whitespaces 5.

constexpr uint64_t kMaxModelBytes = uint64_t{256} << 20;

struct SentencePieceModel {
  std::vector<SentencePieceEntry> pieces;
  int64_t model_type = 1;  // 1 unigram (the proto's default), 2 BPE
  bool byte_fallback = false;
  bool whitespace_as_suffix = false;
  int64_t unk_id = 0, bos_id = 1, eos_id = 2;
  std::string normalizer_name;
  bool has_charsmap = false;
  bool add_dummy_prefix = true, remove_extra_whitespaces = true, escape_whitespaces = true;
};

int64_t as_int32(const Field& f) { return static_cast<int32_t>(static_cast<uint32_t>(f.varint)); }

SentencePieceEntry parse_piece(std::string_view message, size_t index) {
  SentencePieceEntry e;
  ProtobufReader r(message);
  Field f;
  while (r.next(f)) {
    if (f.number == 1 && f.type == ProtobufReader::LengthDelimited) {
      e.piece.assign(f.bytes);
    } else if (f.number == 2 && f.type == ProtobufReader::Fixed32) {
      e.score = ProtobufReader::as_float(f);
    } else if (f.number == 3 && f.type == ProtobufReader::Varint) {
      switch (f.varint) {
        case 1: e.kind = SentencePieceEntry::Kind::Normal; break;
        case 2: e.kind = SentencePieceEntry::Kind::Unknown; break;
        case 3: e.kind = SentencePieceEntry::Kind::Control; break;
        case 4: e.kind = SentencePieceEntry::Kind::UserDefined; break;
        case 5: e.kind = SentencePieceEntry::Kind::Unused; break;
        case 6: e.kind = SentencePieceEntry::Kind::Byte; break;
        default: throw TokenizerError(fmt::format("piece {} has unknown type {}", index, f.varint));
      }
    }
  }
  if (!is_valid_utf8(e.piece)) throw TokenizerError(fmt::format("piece {} is not valid UTF-8", index));
  if (e.piece.empty()) throw TokenizerError(fmt::format("piece {} is empty", index));
  return e;
}

SentencePieceModel parse_model(std::string_view bytes) {
  SentencePieceModel m;
  ProtobufReader r(bytes);
  Field f;
  while (r.next(f)) {
    if (f.type != ProtobufReader::LengthDelimited) continue;
    if (f.number == kPieces) {
      if (m.pieces.size() >= kMaxVocabSize) throw TokenizerError("more pieces than the vocabulary limit");
      m.pieces.push_back(parse_piece(f.bytes, m.pieces.size()));
    } else if (f.number == kTrainerSpec) {
      ProtobufReader t(f.bytes);
      Field g;
      while (t.next(g)) {
        if (g.type != ProtobufReader::Varint) continue;
        switch (g.number) {
          case 3: m.model_type = as_int32(g); break;
          case 24: m.whitespace_as_suffix = g.varint != 0; break;
          case 35: m.byte_fallback = g.varint != 0; break;
          case 40: m.unk_id = as_int32(g); break;
          case 41: m.bos_id = as_int32(g); break;
          case 42: m.eos_id = as_int32(g); break;
          default: break;
        }
      }
    } else if (f.number == kNormalizerSpec) {
      ProtobufReader n(f.bytes);
      Field g;
      while (n.next(g)) {
        if (g.number == 1 && g.type == ProtobufReader::LengthDelimited) m.normalizer_name.assign(g.bytes);
        if (g.number == 2 && g.type == ProtobufReader::LengthDelimited) m.has_charsmap = !g.bytes.empty();
        if (g.type != ProtobufReader::Varint) continue;
        if (g.number == 3) m.add_dummy_prefix = g.varint != 0;
        if (g.number == 4) m.remove_extra_whitespaces = g.varint != 0;
        if (g.number == 5) m.escape_whitespaces = g.varint != 0;
      }
    }
  }
  return m;
}

std::optional<int32_t> id_if_valid(int64_t id, size_t n) {
  return id >= 0 && static_cast<size_t>(id) < n ? std::optional<int32_t>(static_cast<int32_t>(id)) : std::nullopt;
}

}  // namespace

Tokenizer Tokenizer::from_sentencepiece(std::span<const std::byte> model_bytes, std::string_view name) {
  const std::string file(name);
  if (model_bytes.size() > kMaxModelBytes)
    throw TokenizerError(fmt::format("{}: {} bytes is over the {} MiB limit for a SentencePiece model",
                                     file, model_bytes.size(), kMaxModelBytes >> 20));
  SentencePieceModel m;
  try {
    m = parse_model(std::string_view(reinterpret_cast<const char*>(model_bytes.data()), model_bytes.size()));
  } catch (const TokenizerError& e) {
    throw TokenizerError(fmt::format("{}: not a readable SentencePiece model: {}", file, e.what()));
  }
  if (m.pieces.empty()) throw TokenizerError(file + ": not a SentencePiece model (no pieces)");
  if (m.model_type != 2)
    throw TokenizerError(fmt::format("{}: SentencePiece model type {} is not supported (BPE, type 2, only)",
                                     file, m.model_type));
  if (m.has_charsmap || (!m.normalizer_name.empty() && m.normalizer_name != "identity"))
    throw TokenizerError(fmt::format("{}: normalization rule {} is not supported (identity only)", file,
                                     model_detail::quote_name(m.normalizer_name)));

  if (m.whitespace_as_suffix)
    throw TokenizerError(file + ": treat_whitespace_as_suffix is not supported (the space marker is a prefix here)");

  auto p = std::make_shared<Pipeline>();
  const std::optional<int32_t> unk = id_if_valid(m.unk_id, m.pieces.size());
  p->normalizer = std::make_unique<SentencePieceNormalizer>(m.add_dummy_prefix, m.remove_extra_whitespaces,
                                                            m.escape_whitespaces);
  p->model = std::make_unique<SentencePieceBpe>(m.pieces, unk, m.byte_fallback, /*match_user_defined=*/true);
  p->decoder = make_sentencepiece_decoder(m.add_dummy_prefix);
  std::vector<std::pair<std::string, int32_t>> vocab;
  vocab.reserve(m.pieces.size());
  for (size_t i = 0; i < m.pieces.size(); ++i) vocab.emplace_back(m.pieces[i].piece, static_cast<int32_t>(i));
  index_vocabulary(*p, vocab);
  // Control pieces (<s>, </s>, [INST] ...) never come out of text and decode to nothing.
  for (size_t i = 0; i < m.pieces.size(); ++i)
    if (m.pieces[i].kind == SentencePieceEntry::Kind::Control) p->special[i] = true;
  if (const auto bos = id_if_valid(m.bos_id, m.pieces.size())) p->prefix_ids = {*bos};
  p->description = m.byte_fallback ? "SentencePiece BPE with byte fallback (.model)" : "SentencePiece BPE (.model)";
  return Tokenizer(std::move(p));
}

}  // namespace amk
