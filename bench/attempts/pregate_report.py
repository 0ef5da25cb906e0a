#!/usr/bin/env python3
"""Where a fused attention task's time before its gate goes, from the profile TSV of
bench/attempts/pregate-stamps-probe.patch (AMK_PROFILE_STAMPS 10). Medians (10th-90th
percentiles) over the ROPE_KV_ATTENTION_TILE tasks of the layers asked for, in µs from the
task's wait_begin (thread 0 at its record's barrier):

  checks    s5: the last helper warp (1..) past rope_kv_check (operands, the RoPE table, the head
            norm's weights)
  position  s6: the last helper past the step position's read and the window
  angles    s7: the last helper past RoPE's double sincos
  prestage  s8: the last helper past issuing the first block's copies
  poll      s9: warp 0's poll satisfied (thread 0)
  op        op_begin: the gate passed (the consumer barrier after both)

    pregate_report.py PROFILE.tsv [--layers A:B] [--labels L5,L6,L7,L8]

pregate2-stamps-probe.patch stamps s5..s8 elsewhere: read it with
--labels entry,checks,table,position (s5 the last helper entering the op, s6 past the operand
checks, s7 past the RoPE table's read, s8 past the step position's read).
"""
import argparse, csv, re, statistics

ap = argparse.ArgumentParser()
ap.add_argument("tsv")
ap.add_argument("--layers", default="2:-2", help="python slice of the layer indices (default 2:-2)")
ap.add_argument("--labels", default="checks,position,angles,prestage",
                help="names of stamps s5..s8 (default: pregate-stamps-probe.patch's)")
args = ap.parse_args()
rows = list(csv.DictReader(open(args.tsv), delimiter="\t"))
layer_of = lambda r: int(m.group(1)) if (m := re.match(r"L(\d+)\.", r["label"])) else -1
layers = sorted({layer_of(r) for r in rows if layer_of(r) >= 0})
a, b = (int(x) if x else None for x in args.layers.split(":"))
keep = set(layers[slice(a, b)])
labels = args.labels.split(",")
if len(labels) != 4:
    ap.error("--labels needs four names, for s5..s8")
cols = [(name, f"s{5 + i}") for i, name in enumerate(labels)] + [("poll", "s9"), ("op", "op_begin_ns")]
vals = {name: [] for name, _ in cols}
for r in rows:
    if r["op"] != "24" or layer_of(r) not in keep:
        continue
    w = int(r["wait_begin_ns"])
    for name, col in cols:
        if r.get(col, "-") not in ("-", "", None):
            vals[name].append((int(r[col]) - w) / 1000.0)
print(f"{args.tsv}: {len(vals['op'])} attention tasks, layers {min(keep)}..{max(keep)}")
for name, _ in cols:
    v = sorted(vals[name])
    if not v:
        print(f"  {name:9s} -")
        continue
    q = lambda p: v[int(p * (len(v) - 1))]
    print(f"  {name:9s} {statistics.median(v):7.2f}  ({q(0.1):.2f} .. {q(0.9):.2f})")
