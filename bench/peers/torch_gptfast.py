#!/usr/bin/env python3
"""The strong PyTorch peer of `amk bench` (its default): a gpt-fast-style batch-1 greedy decode step.

The same Hugging Face checkpoint folder `amk bench` decodes (config.json + safetensors; Llama,
Mistral-shaped, Qwen2 with q/k/v biases, Qwen3 with per-head q/k norm; tied or untied lm_head;
llama3 / linear RoPE scaling), BF16 weights, and the tricks that make plain PyTorch fast at batch 1:

  * q/k/v weights concatenated into ONE matrix and gate/up into another: one F.linear each;
  * a static BF16 KV cache per layer laid out [1, kv_heads, T, head_dim]; the step writes row
    `pos` with index_copy_ and attends with F.scaled_dot_product_attention(enable_gqa=True) over
    the whole cache under a static mask (positions <= pos), so every shape stays static;
  * torch.compile(fullgraph=True) of the step (inductor; its own CUDA graphs off) and ONE CUDA
    graph per decode step that also writes the argmax into the next step's token buffer and
    advances the position, so replaying it N times decodes N greedy tokens with no host work;
  * optionally inductor's coordinate-descent tuning (--coordinate-descent), which also turns the
    batch-1 matmuls into tuned Triton reductions.

Before timing, a self-check replays the graph once (token 1 at position 0) and compares its
logits with an eager FP32 computation of the same step (FP32 upcasts of the same BF16 weights):
max |graphed - fp32| / max |fp32| goes into the JSON; only a non-finite logit fails the run.

Usage: torch_gptfast.py --model-dir DIR [--tokens 256] [--warmup 32] [--json OUT.json]
                        [--device cuda|cpu] [--context T] [--prefill-to POS]
                        [--no-compile] [--compile-mode MODE] [--compile-options JSON]
                        [--coordinate-descent] [--no-graph] [--check-tokens N]
`--device cpu` runs the same step eagerly (no compile, no graph): a smoke test on a tiny model.
Prints and writes {ms_per_token, timing_method, self_check_max_rel_err, tokens, ...}.
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

NAME = "torch_gptfast.py"
SUPPORTED_MODEL_TYPES = ("llama", "mistral", "qwen2", "qwen3")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model-dir", required=True, help="config.json + safetensors folder")
    p.add_argument("--tokens", type=int, default=256, help="timed greedy steps")
    p.add_argument("--warmup", type=int, default=32, help="untimed steps first")
    p.add_argument("--json", help="write the result here too")
    p.add_argument("--device", default="cuda", choices=("cuda", "cpu"),
                   help="cuda (compiled + graphed) or cpu (eager smoke test)")
    p.add_argument("--no-compile", action="store_true", help="eager step (still one CUDA graph)")
    p.add_argument("--compile-mode", default="default",
                   help="torch.compile mode whose inductor options are used: default, "
                        "max-autotune-no-cudagraphs, max-autotune (inductor's own CUDA graphs "
                        "are always off: this script captures its own)")
    p.add_argument("--compile-options", default="",
                   help="extra inductor options as a JSON object, merged over the mode's")
    p.add_argument("--coordinate-descent", action="store_true",
                   help="torch._inductor.config.coordinate_descent_tuning = True")
    p.add_argument("--no-graph", action="store_true", help="launch the step's kernels each time")
    p.add_argument("--no-self-check", action="store_true",
                   help="skip the graphed-vs-eager-FP32 logits comparison")
    p.add_argument("--check-tokens", type=int, default=0,
                   help="first print N eager greedy tokens from token 1 at position 0, to compare "
                        "with `amk run DIR --prompt-ids 1 -n N` (same model, same ids)")
    p.add_argument("--context", type=int, default=0,
                   help="KV cache length T (default: the positions the run reaches, rounded up "
                        "to 64)")
    p.add_argument("--prefill-to", type=int, default=0, metavar="POS",
                   help="start the timed decode at position POS (the cache rows before it stay "
                        "zero: only the time matters)")
    return p.parse_args(argv)


# ---- the checkpoint ---------------------------------------------------------------------------

# load_config, load_state_dict and rope_inv_freq: hf_checkpoint.py (shared with torch_llama.py)


def unsupported_reason(cfg):
    """Why this config is outside what the step computes, or None."""
    model_type = cfg.get("model_type", "llama")
    if model_type not in SUPPORTED_MODEL_TYPES:
        return f"model_type '{model_type}' is not supported"
    if cfg.get("hidden_act", "silu") not in ("silu", "swish"):
        return f"hidden_act '{cfg.get('hidden_act')}' is not supported"
    if model_type in ("qwen2", "qwen3") and cfg.get("use_sliding_window"):
        return "Qwen sliding-window layers are not supported"
    return None


def _same(t):
    return t


def _fp32(t):
    return None if t is None else t.float()


class Decoder:
    """Fused weights and static state of one decoder; decode() is one in-place greedy step."""

    def __init__(self, cfg, state, context, device):
        dt = torch.bfloat16
        self.model_type = cfg.get("model_type", "llama")
        self.n_layers = int(cfg["num_hidden_layers"])
        self.n_heads = int(cfg["num_attention_heads"])
        self.n_kv = int(cfg.get("num_key_value_heads") or self.n_heads)
        self.hidden = int(cfg["hidden_size"])
        self.head_dim = int(cfg.get("head_dim") or self.hidden // self.n_heads)
        self.eps = float(cfg.get("rms_norm_eps", 1e-6))
        self.context = context
        # Mistral's sliding window applies to every layer; None (or past the cache) is no window.
        window = cfg.get("sliding_window") if self.model_type == "mistral" else None
        self.window = int(window) if window and int(window) < context else None

        def take(name):  # pops, so the loaded copy is freed as the fused one is made
            return state.pop(name).to(device=device, dtype=dt)

        def take_maybe(name):
            return take(name) if name in state else None

        self.embed = take("model.embed_tokens.weight").contiguous()
        self.norm = take("model.norm.weight").contiguous()
        tied = cfg.get("tie_word_embeddings", False) or "lm_head.weight" not in state
        self.lm_head = self.embed if tied else take("lm_head.weight").contiguous()
        self.q_out = self.n_heads * self.head_dim
        self.kv_out = self.n_kv * self.head_dim
        self.layers = []
        for i in range(self.n_layers):
            p = f"model.layers.{i}."
            a, m = p + "self_attn.", p + "mlp."
            wq, wk, wv = take(a + "q_proj.weight"), take(a + "k_proj.weight"), take(a + "v_proj.weight")
            bq, bk, bv = (take_maybe(a + n + "_proj.bias") for n in "qkv")
            wqkv = torch.cat([wq, wk, wv], dim=0).contiguous()
            del wq, wk, wv
            bqkv = None
            if bq is not None or bk is not None or bv is not None:
                parts = [b if b is not None else torch.zeros(n, dtype=dt, device=device)
                         for b, n in ((bq, self.q_out), (bk, self.kv_out), (bv, self.kv_out))]
                bqkv = torch.cat(parts).contiguous()
            wg, wu = take(m + "gate_proj.weight"), take(m + "up_proj.weight")
            self.ffn = wg.shape[0]
            wgu = torch.cat([wg, wu], dim=0).contiguous()
            del wg, wu
            bg, bu = take_maybe(m + "gate_proj.bias"), take_maybe(m + "up_proj.bias")
            bgu = None
            if bg is not None or bu is not None:
                parts = [b if b is not None else torch.zeros(self.ffn, dtype=dt, device=device)
                         for b in (bg, bu)]
                bgu = torch.cat(parts).contiguous()
            self.layers.append({
                "in_norm": take(p + "input_layernorm.weight"),
                "post_norm": take(p + "post_attention_layernorm.weight"),
                "wqkv": wqkv, "bqkv": bqkv,
                "wo": take(a + "o_proj.weight"), "bo": take_maybe(a + "o_proj.bias"),
                "q_norm": take_maybe(a + "q_norm.weight"),
                "k_norm": take_maybe(a + "k_norm.weight"),
                "wgu": wgu, "bgu": bgu,
                "wdown": take(m + "down_proj.weight"), "bdown": take_maybe(m + "down_proj.bias"),
            })
        self.inv_freq = rope_inv_freq(cfg, self.head_dim).to(device)
        self.k_cache, self.v_cache = self.new_cache(context, dt, device)

    def new_cache(self, length, dtype, device):
        shape = (1, self.n_kv, length, self.head_dim)
        return ([torch.zeros(shape, dtype=dtype, device=device) for _ in range(self.n_layers)],
                [torch.zeros(shape, dtype=dtype, device=device) for _ in range(self.n_layers)])

    def zero_cache(self):
        for c in self.k_cache + self.v_cache:
            c.zero_()

    def rms_norm(self, x, weight):
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return weight * x32.to(x.dtype)

    @staticmethod
    def rope(x, cos, sin):
        rot = cos.shape[-1]
        xr, xp = x[..., :rot], x[..., rot:]
        half = rot // 2
        rotated = torch.cat((-xr[..., half:], xr[..., :half]), dim=-1)
        out = (xr.float() * cos + rotated.float() * sin).to(x.dtype)
        return torch.cat((out, xp), dim=-1) if xp.shape[-1] else out

    def forward(self, token, pos, k_cache, v_cache, fp32=False):
        """Logits [1, vocab] of `token` at `pos` (int64 [1] each); writes cache row `pos`.

        fp32=False: BF16 activations and weights (the timed step). fp32=True: every weight is
        upcast where it is used and the activations stay FP32 (the self-check's reference);
        k_cache / v_cache must then be FP32 too.
        """
        W = _fp32 if fp32 else _same
        act = torch.float32 if fp32 else torch.bfloat16
        nh, nkv, d = self.n_heads, self.n_kv, self.head_dim
        x = self.embed[token].to(act)  # [1, hidden]
        freqs = pos.float()[:, None] * self.inv_freq[None, :]  # [1, rot/2]
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos(), emb.sin()
        length = k_cache[0].shape[2]
        positions = torch.arange(length, device=pos.device)
        visible = positions <= pos  # static shape [T]: rows after `pos` are masked out
        if self.window is not None:
            visible = visible & (positions > pos - self.window)
        mask = visible.view(1, 1, 1, length)
        for i, L in enumerate(self.layers):
            h = self.rms_norm(x, W(L["in_norm"]))
            qkv = F.linear(h, W(L["wqkv"]), W(L["bqkv"]))  # one GEMV for q, k and v
            q, k, v = qkv.split([self.q_out, self.kv_out, self.kv_out], dim=-1)
            q, k, v = q.reshape(nh, d), k.reshape(nkv, d), v.reshape(nkv, d)
            if L["q_norm"] is not None:
                q = self.rms_norm(q, W(L["q_norm"]))
                k = self.rms_norm(k, W(L["k_norm"]))
            q = self.rope(q, cos, sin)
            k = self.rope(k, cos, sin)
            kc, vc = k_cache[i], v_cache[i]
            kc.index_copy_(2, pos, k.view(1, nkv, 1, d))
            vc.index_copy_(2, pos, v.view(1, nkv, 1, d))
            y = F.scaled_dot_product_attention(q.view(1, nh, 1, d), kc, vc, attn_mask=mask,
                                               enable_gqa=True)  # [1, nh, 1, d]
            x = x + F.linear(y.reshape(1, nh * d), W(L["wo"]), W(L["bo"]))
            h = self.rms_norm(x, W(L["post_norm"]))
            gate, up = F.linear(h, W(L["wgu"]), W(L["bgu"])).split([self.ffn, self.ffn], dim=-1)
            x = x + F.linear(F.silu(gate) * up, W(L["wdown"]), W(L["bdown"]))
        return F.linear(self.rms_norm(x, W(self.norm)), W(self.lm_head))

    def decode(self, token, pos):
        """One greedy step in place: token <- argmax, pos <- pos + 1. Returns the logits."""
        logits = self.forward(token, pos, self.k_cache, self.v_cache)
        token.copy_(logits.argmax(dim=-1))
        pos.add_(1)
        return logits

    def reference_logits(self, token_id, position):
        """Eager FP32 logits of `token_id` at `position` over a fresh FP32 cache (rows before
        `position` zero, as in the self-check's BF16 run)."""
        dev = self.embed.device
        k_cache, v_cache = self.new_cache(position + 1, torch.float32, dev)
        token = torch.full((1,), token_id, dtype=torch.int64, device=dev)
        pos = torch.full((1,), position, dtype=torch.int64, device=dev)
        return self.forward(token, pos, k_cache, v_cache, fp32=True)


# ---- compiling, capturing, timing -------------------------------------------------------------

def inductor_options(args):
    """The mode's inductor options, --compile-options over them, inductor's CUDA graphs off (the
    whole step is captured by this script, once). Raises on an unknown mode or bad JSON."""
    import torch._inductor

    options = dict(torch._inductor.list_mode_options(args.compile_mode))
    if args.compile_options:
        extra = json.loads(args.compile_options)
        if not isinstance(extra, dict):
            raise ValueError("--compile-options must be a JSON object")
        options.update(extra)
    if args.coordinate_descent:
        options["coordinate_descent_tuning"] = True
    options["triton.cudagraphs"] = False
    return options


def compile_step(fn, args, options):
    """torch.compile(fullgraph) of the step with those options."""
    import torch._inductor.config as inductor_config

    if args.coordinate_descent:
        inductor_config.coordinate_descent_tuning = True
    return torch.compile(fn, fullgraph=True, dynamic=False, options=options)


class Runner:
    """Static token / position tensors and run(): one greedy step in place, graphed on CUDA."""

    def __init__(self, model, step_fn, device, use_graph):
        self.token = torch.ones(1, dtype=torch.int64, device=device)
        self.pos = torch.zeros(1, dtype=torch.int64, device=device)
        self.logits = None
        self.graph = None

        def eager():
            self.logits = step_fn(self.token, self.pos)

        self.eager = eager
        if device == "cpu":
            return
        # Warm up on a side stream (compilation, autotuning, allocator pools), as capture needs.
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                eager()
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        if use_graph:
            self.graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(self.graph):
                eager()  # self.logits is now the graph's static output buffer

    def run(self):
        if self.graph is not None:
            self.graph.replay()
        else:
            self.eager()

    def reset(self, token_id, position):
        self.token.fill_(token_id)
        self.pos.fill_(position)


def sync(device):
    if device == "cuda":
        torch.cuda.synchronize()


def self_check(model, runner, device):
    """max |graphed - eager FP32| / max |eager FP32| of token 1's logits at position 0."""
    model.zero_cache()
    runner.reset(1, 0)
    runner.run()
    sync(device)
    got = runner.logits.float().reshape(-1).clone()
    want = model.reference_logits(1, 0).float().reshape(-1)
    err = (got - want).abs().max().item()
    scale = want.abs().max().item()
    rel = err / scale if scale > 0 else err
    finite = bool(torch.isfinite(got).all().item()) and math.isfinite(rel)
    return {"self_check_max_rel_err": rel if finite else None,  # JSON has no NaN
            "self_check_argmax_match": int(got.argmax().item()) == int(want.argmax().item()),
            "self_check_finite": finite}


def time_steps(runner, device, n):
    """Per-step times in ms (CUDA events around each replay, or perf_counter on the CPU) and the
    wall time of all n steps."""
    if device == "cuda":
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
        wall0 = time.perf_counter()
        for i in range(n):
            starts[i].record()
            runner.run()
            ends[i].record()
        torch.cuda.synchronize()
        wall_ms = (time.perf_counter() - wall0) * 1e3
        return [s.elapsed_time(e) for s, e in zip(starts, ends)], wall_ms, "cuda_events_per_step"
    per_step = []
    wall0 = time.perf_counter()
    for _ in range(n):
        t0 = time.perf_counter()
        runner.run()
        per_step.append((time.perf_counter() - t0) * 1e3)
    wall_ms = (time.perf_counter() - wall0) * 1e3
    return per_step, wall_ms, "wall_clock_per_step"


def main(argv=None):
    args = parse_args(argv)
    device = args.device
    if device == "cuda" and not torch.cuda.is_available():
        print(f"{NAME}: no CUDA device visible to torch", file=sys.stderr)
        return 2
    if args.tokens < 1 or args.warmup < 0 or args.prefill_to < 0:
        print(f"{NAME}: --tokens must be >= 1, --warmup and --prefill-to >= 0", file=sys.stderr)
        return 2
    # One grad mode for the whole run: torch.compile guards on it, so warm-up and timing agree.
    torch.set_grad_enabled(False)
    cfg = load_config(args.model_dir)
    reason = unsupported_reason(cfg)
    if reason:
        print(f"{NAME}: {reason}", file=sys.stderr)
        return 2
    # Positions written: the self-check and the 3 compile warm-up steps from 0, --check-tokens
    # from 0, then warm-up + timed steps from --prefill-to. The default adds a few spare rows.
    needed = max(args.prefill_to + args.warmup + args.tokens, args.check_tokens, 3)
    context = args.context or (needed + 8 + 63) // 64 * 64
    if context < needed:
        print(f"{NAME}: --context {context} is shorter than the {needed} positions the run uses",
              file=sys.stderr)
        return 2
    t0 = time.time()
    try:
        model = Decoder(cfg, load_state_dict(args.model_dir, device), context, device)
    except (KeyError, ValueError) as e:
        print(f"{NAME}: cannot build the model: {type(e).__name__}: {e}", file=sys.stderr)
        return 2
    load_s = time.time() - t0

    check_tokens = []
    if args.check_tokens:
        tok = torch.ones(1, dtype=torch.int64, device=device)
        pos = torch.zeros(1, dtype=torch.int64, device=device)
        for _ in range(args.check_tokens):
            model.decode(tok, pos)
            check_tokens.append(int(tok.item()))
        print("peer tokens: " + ",".join(map(str, check_tokens)))
        model.zero_cache()

    compiled, options = False, None
    step_fn = model.decode
    use_graph = device == "cuda" and not args.no_graph
    if device == "cuda" and not args.no_compile:
        try:
            options = inductor_options(args)
        except (RuntimeError, ValueError) as e:
            print(f"{NAME}: bad --compile-mode or --compile-options: {e}", file=sys.stderr)
            return 2
        try:
            step_fn = compile_step(model.decode, args, options)
            compiled = True
        except Exception as e:  # a bad mode or an old torch: eager is still a valid peer
            print(f"{NAME}: torch.compile unavailable ({type(e).__name__}: {e}); running eager",
                  file=sys.stderr)
    t0 = time.time()
    try:
        runner = Runner(model, step_fn, device, use_graph)
    except Exception as e:
        if not compiled:
            raise
        print(f"{NAME}: compiled step failed ({type(e).__name__}: {e}); eager fallback",
              file=sys.stderr)
        compiled, options, step_fn = False, None, model.decode
        model.zero_cache()
        runner = Runner(model, step_fn, device, use_graph)
    build_s = time.time() - t0

    checked = {"self_check_max_rel_err": None, "self_check_argmax_match": None,
               "self_check_finite": None}
    if not args.no_self_check:
        checked = self_check(model, runner, device)
        err = checked["self_check_max_rel_err"]
        print(f"self-check: max rel err {'NaN' if err is None else f'{err:.3g}'} against eager "
              f"FP32 (argmax match: {checked['self_check_argmax_match']})")

    # Warm-up, then each timed step between its own pair of events; the median is the figure.
    model.zero_cache()
    runner.reset(1, args.prefill_to)
    for _ in range(args.warmup):
        runner.run()
    sync(device)
    per_step, wall_ms, timing_method = time_steps(runner, device, args.tokens)

    result = {
        "peer": "torch_gptfast",
        "ms_per_token": statistics.median(per_step),
        "mean_ms_per_token": statistics.fmean(per_step),
        "wall_ms_per_token": wall_ms / args.tokens,
        "timing_method": timing_method + "_median",
        "tokens": args.tokens,
        "warmup": args.warmup,
        "prefill_to": args.prefill_to,
        "context": context,
        "torch_version": torch.__version__,
        "device": torch.cuda.get_device_name() if device == "cuda" else "cpu",
        "compiled": compiled,
        "compile_mode": args.compile_mode if compiled else None,
        "compile_options": options,
        "coordinate_descent": bool(compiled and options.get("coordinate_descent_tuning")),
        "cuda_graph": runner.graph is not None,
        "attention": "sdpa(enable_gqa=True) over the static [1, kv_heads, T, head_dim] cache, "
                     "masked to positions <= pos",
        "fused_qkv": True,
        "fused_gate_up": True,
        "model_type": model.model_type,
        "load_s": load_s,
        "compile_and_capture_s": build_s,
        "last_token": int(runner.token.item()),
        "check_tokens": check_tokens,
        **checked,
    }
    print(f"torch peer: {result['ms_per_token'] * 1e3:.1f} us/token (median of {args.tokens} "
          f"steps, {timing_method}; wall {result['wall_ms_per_token'] * 1e3:.1f} us/token), "
          f"compiled={compiled}, graph={result['cuda_graph']}, torch {torch.__version__} on "
          f"{result['device']}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
            f.write("\n")
    if not args.no_self_check and not checked["self_check_finite"]:
        print(f"{NAME}: the graphed step's logits are not finite", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
