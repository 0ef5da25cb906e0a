#!/usr/bin/env python3
"""Medians of a fused attention task's segments from the attention-stamps probe's profile TSV
(bench/attempts/attention-stamps-probe.patch: AMK_PROFILE_STAMPS 12; the attention tasks use
s5..s10 as below, s11 is every task's stamp before its release).

    attention_stamps_report.py PROFILE.tsv [--layers A:B] [--full-blocks N]

Tasks whose label names a split-KV block kv0..kv(N-1) are "keys" (default N = 3: at the bench's
mean position those blocks hold keys), the later ones "empty" (their window is past the step's
position). Segments (thread 0 unless said):
  issue      op_begin (gate passed) -> s5  (ROPE_KV rows' cp.async issued)
  rows       s5 -> s6    (rows' wait, RoPE angles, barrier)
  prologue   s6 -> body_begin (head norm, rotation, append, barriers)
  to_bar     body_begin -> s8 (the LAST warp's arrival at the first block's barrier)
  bar        s8 -> s7    (that barrier's release to thread 0)
  scores     s7 -> s9    softmax  s9 -> s10   values  s10 -> body_end
  output     body_end -> s11      signal   s11 -> op_end
"""
import argparse, collections, csv, re, statistics

SEG = [("issue", "op_begin_ns", "s5"), ("rows", "s5", "s6"), ("prologue", "s6", "body_begin_ns"),
       ("to_bar", "body_begin_ns", "s8"), ("bar", "s8", "s7"), ("scores", "s7", "s9"),
       ("softmax", "s9", "s10"), ("values", "s10", "body_end_ns"), ("output", "body_end_ns", "s11"),
       ("signal", "s11", "op_end_ns")]

ap = argparse.ArgumentParser()
ap.add_argument("tsv")
ap.add_argument("--layers", default="2:-2")
ap.add_argument("--full-blocks", type=int, default=3)
a = ap.parse_args()
rows = list(csv.DictReader(open(a.tsv), delimiter="\t"))
nl = 1 + max(int(m.group(1)) for r in rows if (m := re.match(r"L(\d+)\.", r["label"])))
lo, hi = (int(x) for x in a.layers.split(":"))
hi = hi if hi > 0 else nl + hi
by = collections.defaultdict(lambda: collections.defaultdict(list))
for r in rows:
    m = re.match(r"L(\d+)\.attention\S*?(?:\[kv(\d+)\])?$", r["label"])
    if not m or not lo <= int(m.group(1)) < hi:
        continue
    kind = "keys" if m.group(2) is None or int(m.group(2)) < a.full_blocks else "empty"
    for name, f, t in SEG:
        if r.get(f, "-") not in ("-", None) and r.get(t, "-") not in ("-", None):
            by[kind][name].append((int(r[t]) - int(r[f])) / 1e3)
print(f"{'tasks':8}" + "".join(f"{n:>10}" for n, _, _ in SEG) + "   (µs, medians)")
for kind in ("keys", "empty"):
    if kind in by:
        segs = by[kind]
        print(f"{kind:8}" + "".join(
            f"{statistics.median(segs[n]):10.2f}" if segs[n] else f"{'-':>10}" for n, _, _ in SEG))
