#!/usr/bin/env python3
"""Per-op medians of a GEMV tile's segments from a fine-stamps probe's profile TSV
(bench/attempts/fine-stamps-probe.patch: AMK_PROFILE_STAMPS 12, columns s5..s11).

    fine_stamps_report.py PROFILE.tsv [--layers A:B]

Segments (thread 0 of the CTA, GEMV family over the ring):
  resolve     wait_begin -> s5 (resolve(), ring_tile())
  plan+gate   s5 -> op_begin (strip plan, x cache test, the gate: poll + barrier)
  x           op_begin -> s6 (early addends issued, x loads, norm)
  xbar        s6 -> body_begin (x barrier)
  full        body_begin -> s7 (first chunk's full wait)   batch0  s7 -> s8 (first batch)
  body_rest   s8 -> body_end             pbar    body_end -> s9 (partials barrier)
  rows        s9 -> s10 (sums, addends, stage)  endbar  s10 -> s11   signal  s11 -> op_end
"""
import argparse, collections, csv, re, statistics

SEG = [("resolve", "wait_begin_ns", "s5"), ("plan+gate", "s5", "op_begin_ns"),
       ("x", "op_begin_ns", "s6"), ("xbar", "s6", "body_begin_ns"), ("full", "body_begin_ns", "s7"),
       ("batch0", "s7", "s8"), ("body_rest", "s8", "body_end_ns"), ("pbar", "body_end_ns", "s9"),
       ("rows", "s9", "s10"), ("endbar", "s10", "s11"), ("signal", "s11", "op_end_ns")]

ap = argparse.ArgumentParser()
ap.add_argument("tsv")
ap.add_argument("--layers", default="2:-2")
a = ap.parse_args()
rows = list(csv.DictReader(open(a.tsv), delimiter="\t"))
nl = 1 + max(int(m.group(1)) for r in rows if (m := re.match(r"L(\d+)\.", r["label"])))
lo, hi = (int(x) for x in a.layers.split(":"))
hi = hi if hi > 0 else nl + hi
by = collections.defaultdict(lambda: collections.defaultdict(list))
for r in rows:
    m = re.match(r"L(\d+)\.(\w+)", r["label"])
    if not m or not lo <= int(m.group(1)) < hi:
        continue
    for name, f, t in SEG:
        if r.get(f, "-") not in ("-", None) and r.get(t, "-") not in ("-", None):
            by[m.group(2)][name].append((int(r[t]) - int(r[f])) / 1e3)
print(f"{'op':18}" + "".join(f"{n:>11}" for n, _, _ in SEG) + "   (µs, medians)")
for op, segs in by.items():
    cells = [f"{statistics.median(segs[n]):11.2f}" if segs[n] else f"{'-':>11}" for n, _, _ in SEG]
    print(f"{op:18}" + "".join(cells))
