#!/usr/bin/env python3
"""The WEAK LEGACY PyTorch peer of `amk bench` (run it with --peer-script; the default peer is
bench/peers/torch_gptfast.py, see bench/peers/README.md): separate q/k/v and gate/up linears and
an FP32 einsum over the whole cache every step, which costs it ~480 us on llama-3.2-1b against
the gpt-fast-style step. Kept for comparison with earlier results.

The same checkpoint decoded one token per step in plain torch.

A minimal Llama / Qwen2 / Qwen3 decode step (RMSNorm, RoPE with llama3 / linear scaling, GQA,
SwiGLU, Qwen2's q/k/v biases, Qwen3's per-head q/k norm), BF16 weights, static KV-cache tensors,
torch.compile(fullgraph) of the step and ONE CUDA graph per step: the graph holds the step, the
argmax and the feedback of that token and position into the static inputs, so replaying it N
times decodes N greedy tokens with no host work but the replay call. (It was meant as the
strongest plain-PyTorch baseline; torch_gptfast.py, with the same CLI and JSON, is faster.)

Usage: torch_llama.py --model-dir DIR [--tokens 256] [--warmup 32] [--json OUT.json]
                      [--no-compile] [--compile-mode default] [--no-graph]
Prints and writes {ms_per_token, tokens, torch_version, device, compiled, ...}.
"""

import argparse
import json
import math
import statistics
import sys
import time

import torch
import torch.nn.functional as F

from hf_checkpoint import load_config, load_state_dict, rope_inv_freq


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model-dir", required=True, help="config.json + safetensors folder")
    p.add_argument("--tokens", type=int, default=256, help="timed greedy steps")
    p.add_argument("--warmup", type=int, default=32, help="untimed steps first")
    p.add_argument("--json", help="write the result here too")
    p.add_argument("--no-compile", action="store_true", help="eager step (still one CUDA graph)")
    p.add_argument("--compile-mode", default="default",
                   help="torch.compile mode: default or max-autotune-no-cudagraphs (slow to tune)")
    p.add_argument("--no-graph", action="store_true", help="launch the step's kernels each time")
    p.add_argument("--check-tokens", type=int, default=0,
                   help="first print N eager greedy tokens from token 1 at position 0, to compare "
                        "with `amk run DIR --prompt-ids 1 -n N` (same model, same ids)")
    p.add_argument("--context", type=int, default=0,
                   help="KV cache length (default: the steps the run makes, rounded up to 64)")
    return p.parse_args()


# ---- the checkpoint ---------------------------------------------------------------------------

# load_config, load_state_dict and rope_inv_freq: hf_checkpoint.py (shared with torch_gptfast.py)


class Model:
    """The weights and static state of one decoder; step() is a pure function of tensors."""

    def __init__(self, cfg, state, context):
        dt = torch.bfloat16
        self.model_type = cfg.get("model_type", "llama")
        self.n_layers = int(cfg["num_hidden_layers"])
        self.n_heads = int(cfg["num_attention_heads"])
        self.n_kv = int(cfg.get("num_key_value_heads") or self.n_heads)
        self.hidden = int(cfg["hidden_size"])
        self.head_dim = int(cfg.get("head_dim") or self.hidden // self.n_heads)
        self.eps = float(cfg.get("rms_norm_eps", 1e-6))
        self.context = context

        def w(name):
            return state[name].to(dt).contiguous()

        def maybe(name):
            return w(name) if name in state else None

        self.embed = w("model.embed_tokens.weight")
        self.norm = w("model.norm.weight")
        tied = cfg.get("tie_word_embeddings", False) or "lm_head.weight" not in state
        self.lm_head = self.embed if tied else w("lm_head.weight")
        self.layers = []
        for i in range(self.n_layers):
            p = f"model.layers.{i}."
            self.layers.append({
                "in_norm": w(p + "input_layernorm.weight"),
                "post_norm": w(p + "post_attention_layernorm.weight"),
                "q": w(p + "self_attn.q_proj.weight"), "q_b": maybe(p + "self_attn.q_proj.bias"),
                "k": w(p + "self_attn.k_proj.weight"), "k_b": maybe(p + "self_attn.k_proj.bias"),
                "v": w(p + "self_attn.v_proj.weight"), "v_b": maybe(p + "self_attn.v_proj.bias"),
                "o": w(p + "self_attn.o_proj.weight"), "o_b": maybe(p + "self_attn.o_proj.bias"),
                "q_norm": maybe(p + "self_attn.q_norm.weight"),
                "k_norm": maybe(p + "self_attn.k_norm.weight"),
                "gate": w(p + "mlp.gate_proj.weight"),
                "up": w(p + "mlp.up_proj.weight"),
                "down": w(p + "mlp.down_proj.weight"),
            })
        dev = self.embed.device
        try:
            self.inv_freq = rope_inv_freq(cfg, self.head_dim).to(dev)
        except ValueError as e:
            raise SystemExit(f"torch_llama.py: {e}")
        shape = (self.n_layers, context, self.n_kv, self.head_dim)
        self.k_cache = torch.zeros(shape, dtype=dt, device=dev)
        self.v_cache = torch.zeros(shape, dtype=dt, device=dev)
        self.positions = torch.arange(context, device=dev)

    def rms_norm(self, x, weight):
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return weight * x32.to(x.dtype)

    def rope(self, x, cos, sin):
        rot = cos.shape[-1]
        xr, xp = x[..., :rot], x[..., rot:]
        half = rot // 2
        rotated = torch.cat((-xr[..., half:], xr[..., :half]), dim=-1)
        out = (xr.float() * cos + rotated.float() * sin).to(x.dtype)
        return torch.cat((out, xp), dim=-1) if xp.shape[-1] else out

    def step(self, token, pos):
        """token, pos: int64 [1] on the device. Returns the greedy next token, int64 [1]."""
        x = self.embed[token]  # [1, hidden]
        freqs = pos.float()[:, None] * self.inv_freq[None, :]  # [1, rot/2]
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos(), emb.sin()
        # Positions after `pos` hold stale or zero rows: mask them out of every softmax.
        masked = (self.positions > pos)[None, None, :]  # [1, 1, context]
        group = self.n_heads // self.n_kv
        scale = 1.0 / math.sqrt(self.head_dim)
        for i, L in enumerate(self.layers):
            h = self.rms_norm(x, L["in_norm"])
            q = F.linear(h, L["q"], L["q_b"]).view(self.n_heads, self.head_dim)
            k = F.linear(h, L["k"], L["k_b"]).view(self.n_kv, self.head_dim)
            v = F.linear(h, L["v"], L["v_b"]).view(self.n_kv, self.head_dim)
            if L["q_norm"] is not None:
                q = self.rms_norm(q, L["q_norm"])
                k = self.rms_norm(k, L["k_norm"])
            q = self.rope(q, cos, sin)
            k = self.rope(k, cos, sin)
            self.k_cache[i].index_copy_(0, pos, k[None])
            self.v_cache[i].index_copy_(0, pos, v[None])
            qg = q.view(self.n_kv, group, self.head_dim).float()
            scores = torch.einsum("kgd,tkd->kgt", qg, self.k_cache[i].float()) * scale
            probs = torch.softmax(scores.masked_fill(masked, float("-inf")), dim=-1)
            attn = torch.einsum("kgt,tkd->kgd", probs, self.v_cache[i].float())
            attn = attn.reshape(1, self.n_heads * self.head_dim).to(x.dtype)
            x = x + F.linear(attn, L["o"], L["o_b"])
            h = self.rms_norm(x, L["post_norm"])
            x = x + F.linear(F.silu(F.linear(h, L["gate"])) * F.linear(h, L["up"]), L["down"])
        logits = F.linear(self.rms_norm(x, self.norm), self.lm_head).float()
        return logits.argmax(dim=-1)


# ---- running and timing -----------------------------------------------------------------------

def build_runner(model, step_fn, use_graph):
    """Static token/position tensors and a `run()` that decodes one greedy step in place."""
    dev = model.embed.device
    token = torch.ones(1, dtype=torch.int64, device=dev)
    pos = torch.zeros(1, dtype=torch.int64, device=dev)

    def eager():
        nxt = step_fn(token, pos)
        token.copy_(nxt)
        pos.add_(1)

    # Warm up on a side stream (compilation, autotuning, allocator pools), as graph capture needs.
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            eager()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    if not use_graph:
        return token, pos, eager
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        eager()
    return token, pos, graph.replay


def main():
    args = parse_args()
    if not torch.cuda.is_available():
        print("torch_llama.py: no CUDA device visible to torch", file=sys.stderr)
        return 2
    # One grad mode for the whole run: torch.compile guards on it, so warm-up and timing must agree.
    torch.set_grad_enabled(False)
    cfg = load_config(args.model_dir)
    if cfg.get("model_type", "llama") not in ("llama", "mistral", "qwen2", "qwen3"):
        print(f"torch_llama.py: model_type '{cfg.get('model_type')}' is not supported",
              file=sys.stderr)
        return 2
    context = args.context or (max(args.warmup + args.tokens + 8, args.check_tokens) + 63) // 64 * 64
    t0 = time.time()
    state = load_state_dict(args.model_dir, "cuda")
    model = Model(cfg, state, context)
    del state
    load_s = time.time() - t0

    check_tokens = []
    if args.check_tokens:
        tok = torch.ones(1, dtype=torch.int64, device=model.embed.device)
        for i in range(args.check_tokens):
            tok = model.step(tok, torch.full((1,), i, dtype=torch.int64, device=tok.device))
            check_tokens.append(int(tok.item()))
        print("peer tokens: " + ",".join(map(str, check_tokens)))

    compiled = False
    step_fn = model.step
    if not args.no_compile:
        try:
            step_fn = torch.compile(model.step, mode=args.compile_mode, fullgraph=True,
                                    dynamic=False)
            compiled = True
        except Exception as e:  # an old torch without the mode: eager is still a valid peer
            print(f"torch_llama.py: torch.compile unavailable ({e}); running eager", file=sys.stderr)
    t0 = time.time()
    use_graph = not args.no_graph
    try:
        token, pos, run = build_runner(model, step_fn, use_graph)
    except Exception as e:
        if not compiled:
            raise
        print(f"torch_llama.py: compiled step failed ({type(e).__name__}: {e}); eager fallback",
              file=sys.stderr)
        compiled, step_fn = False, model.step
        token, pos, run = build_runner(model, step_fn, use_graph)
    build_s = time.time() - t0

    # Warm-up, then each timed step between its own pair of events; the median is the figure.
    pos.zero_()
    token.fill_(1)
    for _ in range(args.warmup):
        run()
    torch.cuda.synchronize()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(args.tokens)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(args.tokens)]
    wall0 = time.perf_counter()
    for i in range(args.tokens):
        starts[i].record()
        run()
        ends[i].record()
    torch.cuda.synchronize()
    wall_ms = (time.perf_counter() - wall0) * 1e3
    per_step = [s.elapsed_time(e) for s, e in zip(starts, ends)]

    result = {
        "ms_per_token": statistics.median(per_step),
        "mean_ms_per_token": statistics.fmean(per_step),
        "wall_ms_per_token": wall_ms / args.tokens,
        "tokens": args.tokens,
        "warmup": args.warmup,
        "context": context,
        "torch_version": torch.__version__,
        "device": torch.cuda.get_device_name(),
        "compiled": compiled,
        "compile_mode": args.compile_mode if compiled else None,
        "cuda_graph": use_graph,
        "model_type": cfg.get("model_type", "llama"),
        "load_s": load_s,
        "compile_and_capture_s": build_s,
        "last_token": int(token.item()),
        "check_tokens": check_tokens,
    }
    print(f"torch peer: {result['ms_per_token'] * 1e3:.1f} us/token (median of {args.tokens} "
          f"steps; wall {result['wall_ms_per_token'] * 1e3:.1f} us/token), compiled={compiled}, "
          f"graph={use_graph}, torch {torch.__version__} on {result['device']}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
            f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
