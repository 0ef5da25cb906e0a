#!/usr/bin/env python3
"""Per-segment medians from a stamps probe's profile TSV (AMK_PROFILE_STAMPS 12, columns
s5..s11; s11 is every task's stamp before its release).

    fine_stamps_report.py PROFILE.tsv [--kind gemv|attention] [--layers A:B] [--full-blocks N]

--kind gemv (bench/attempts/fine-stamps-probe.patch), a GEMV tile's segments per op (thread 0):
  resolve     wait_begin -> s5 (resolve(), ring_tile())
  plan+gate   s5 -> op_begin (strip plan, x cache test, the gate: poll + barrier)
  x           op_begin -> s6 (early addends issued, x loads, norm)
  xbar        s6 -> body_begin (x barrier)
  full        body_begin -> s7 (first chunk's full wait)   batch0  s7 -> s8 (first batch)
  body_rest   s8 -> body_end             pbar    body_end -> s9 (partials barrier)
  rows        s9 -> s10 (sums, addends, stage)  endbar  s10 -> s11   signal  s11 -> op_end

--kind attention (bench/attempts/attention-stamps-probe.patch, which carries the GEMV stamps
too), a fused attention task's segments, for tasks whose label names a split-KV block
kv0..kv(N-1) ("keys": at the bench's mean position those hold keys; N = --full-blocks, 3) and
the later ones ("empty": their window is past the step's position). Thread 0 unless said:
  issue      op_begin (gate passed) -> s5  (ROPE_KV rows' cp.async issued)
  rows       s5 -> s6    (rows' wait, RoPE angles, barrier)
  prologue   s6 -> body_begin (head norm, rotation, append, barriers)
  to_bar     body_begin -> s8 (the LAST warp's arrival at the first block's barrier)
  bar        s8 -> s7    (that barrier's release to thread 0)
  scores     s7 -> s9    softmax  s9 -> s10   values  s10 -> body_end (and any later blocks)
  output     body_end -> s11      signal   s11 -> op_end
"""
import argparse, collections, csv, re, statistics

SEGMENTS = {
    "gemv": [("resolve", "wait_begin_ns", "s5"), ("plan+gate", "s5", "op_begin_ns"),
             ("x", "op_begin_ns", "s6"), ("xbar", "s6", "body_begin_ns"),
             ("full", "body_begin_ns", "s7"), ("batch0", "s7", "s8"),
             ("body_rest", "s8", "body_end_ns"), ("pbar", "body_end_ns", "s9"),
             ("rows", "s9", "s10"), ("endbar", "s10", "s11"), ("signal", "s11", "op_end_ns")],
    "attention": [("issue", "op_begin_ns", "s5"), ("rows", "s5", "s6"),
                  ("prologue", "s6", "body_begin_ns"), ("to_bar", "body_begin_ns", "s8"),
                  ("bar", "s8", "s7"), ("scores", "s7", "s9"), ("softmax", "s9", "s10"),
                  ("values", "s10", "body_end_ns"), ("output", "body_end_ns", "s11"),
                  ("signal", "s11", "op_end_ns")],
}


def group_of(kind, label, full_blocks):
    """The row's group (an op, or keys / empty), or None when the kind does not cover it."""
    if kind == "gemv":
        m = re.match(r"L\d+\.(\w+)", label)
        return m.group(1) if m and m.group(1) != "attention" else None
    m = re.match(r"L\d+\.attention\S*?(?:\[kv(\d+)\])?$", label)
    if not m:
        return None
    return "keys" if m.group(1) is None or int(m.group(1)) < full_blocks else "empty"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("tsv")
    ap.add_argument("--kind", choices=sorted(SEGMENTS), default="gemv")
    ap.add_argument("--layers", default="2:-2")
    ap.add_argument("--full-blocks", type=int, default=3)
    a = ap.parse_args()
    seg = SEGMENTS[a.kind]
    rows = list(csv.DictReader(open(a.tsv), delimiter="\t"))
    nl = 1 + max(int(m.group(1)) for r in rows if (m := re.match(r"L(\d+)\.", r["label"])))
    lo, hi = (int(x) for x in a.layers.split(":"))
    hi = hi if hi > 0 else nl + hi
    by = collections.defaultdict(lambda: collections.defaultdict(list))
    for r in rows:
        m = re.match(r"L(\d+)\.", r["label"])
        group = group_of(a.kind, r["label"], a.full_blocks)
        if not m or group is None or not lo <= int(m.group(1)) < hi:
            continue
        for name, f, t in seg:
            if r.get(f, "-") not in ("-", None) and r.get(t, "-") not in ("-", None):
                by[group][name].append((int(r[t]) - int(r[f])) / 1e3)
    print(f"{'':18}" + "".join(f"{n:>11}" for n, _, _ in seg) + "   (µs, medians)")
    for group, segs in by.items():
        cells = [f"{statistics.median(segs[n]):11.2f}" if segs[n] else f"{'-':>11}"
                 for n, _, _ in seg]
        print(f"{group:18}" + "".join(cells))


if __name__ == "__main__":
    main()
