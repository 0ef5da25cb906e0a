#!/usr/bin/env python3
"""Where the megakernel's warps wait, from scripts/gpu_stalls.sh's export (runs HERE, no ncu).

    scripts/stalls_report.py STALLS.tgz|DIR [--top N] [--file SUBSTRING] [--tasks N]

Reads the Nsight Compute source page (source.csv: one row per SASS instruction under its source
line, with sampled stall reasons and executed instruction counts) and the raw page (raw.csv) and
prints:
  - the stall reasons over the whole launch (share of warp samples);
  - the source lines with the most samples, with their top reasons;
  - per source file: share of samples and executed warp-instructions (per task, with --tasks: the
    number of tasks the profiled launch ran, e.g. steps x tasks per step).
--file restricts the line table to files whose path contains SUBSTRING (e.g. attention.cuh).
"""
import argparse
import collections
import csv
import io
import os
import sys
import tarfile


def read_member(src, name):
    if os.path.isdir(src):
        with open(os.path.join(src, name), newline="") as f:
            return f.read()
    with tarfile.open(src) as t:
        for m in t.getmembers():
            if os.path.basename(m.name) == name:
                return t.extractfile(m).read().decode()
    raise FileNotFoundError(f"{name} not in {src}")


def parse_source(text):
    """(file, line, source text) -> Counter of stall reasons, '_samples', '_exec'."""
    per_line = collections.defaultdict(collections.Counter)
    path = None
    idx = None
    current = None
    for row in csv.reader(io.StringIO(text)):
        if not row:
            continue
        if row[0] == "File Path":
            path = row[1]
            continue
        if row[0] == "Line No":
            idx = {h: i for i, h in enumerate(row)}
            continue
        if row[0] == "Function Name" or idx is None:
            continue
        if row[0] != "":  # a source line; its SASS rows follow
            current = (path, int(row[0]), row[1].strip())
            continue
        if len(row) < 4 or row[2] in ("...", "-") or current is None:
            continue
        c = per_line[current]
        for h, i in idx.items():
            if h.startswith("stall_") and "Not Issued" not in h and row[i] not in ("", "-"):
                c[h[len("stall_"):]] += int(row[i])
        for key, col in (("_samples", "Warp Stall Sampling (All Samples)"),
                         ("_exec", "Instructions Executed")):
            v = row[idx[col]] if col in idx else "-"
            if v not in ("", "-"):
                c[key] += int(v)
    return per_line


def reasons_of(raw_text):
    rows = list(csv.reader(io.StringIO(raw_text)))
    if len(rows) < 3:
        return {}
    d = dict(zip(rows[0], rows[2]))
    prefix = "smsp__pcsamp_warps_issue_stalled_"
    out = {}
    for k, v in d.items():
        if k.startswith(prefix) and "not_issued" not in k and v:
            try:
                out[k[len(prefix):]] = float(v.replace(",", ""))
            except ValueError:
                pass
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("source", help="stalls-PRESET.tgz from gpu_stalls.sh, or its extracted folder")
    ap.add_argument("--top", type=int, default=30)
    ap.add_argument("--file", default="")
    ap.add_argument("--tasks", type=int, default=0)
    a = ap.parse_args()
    try:
        per_line = parse_source(read_member(a.source, "source.csv"))
    except (OSError, tarfile.TarError, KeyError) as e:
        sys.exit(f"stalls_report: cannot read {a.source}: {e}")
    if not per_line:
        sys.exit(f"stalls_report: {a.source} has no source rows (did ncu export the source page?)")
    try:
        reasons = reasons_of(read_member(a.source, "raw.csv"))
    except (OSError, tarfile.TarError, FileNotFoundError):
        reasons = {}
    if reasons:
        total = sum(reasons.values()) or 1.0
        print("stall reasons over the launch (share of warp samples)")
        for k, v in sorted(reasons.items(), key=lambda kv: -kv[1])[:10]:
            print(f"  {k:22s} {100 * v / total:5.1f} %")
    samples = sum(c["_samples"] for c in per_line.values()) or 1
    print(f"\ntop source lines by warp samples{' in *' + a.file + '*' if a.file else ''}")
    lines = [(k, c) for k, c in per_line.items() if a.file in k[0]]
    for (path, no, text), c in sorted(lines, key=lambda kc: -kc[1]["_samples"])[:a.top]:
        top = ", ".join(f"{r} {100 * n / max(1, c['_samples']):.0f}%"
                        for r, n in c.most_common(5) if not r.startswith("_"))[:60]
        print(f"  {100 * c['_samples'] / samples:5.1f} %  {os.path.basename(path)}:{no:<5d} "
              f"{text[:50]:50s} | {top}")
    by_file = collections.Counter()
    exec_file = collections.Counter()
    for (path, _, _), c in per_line.items():
        by_file[os.path.basename(path)] += c["_samples"]
        exec_file[os.path.basename(path)] += c["_exec"]
    print("\nper file: share of samples, executed warp-instructions" +
          (f" (per task of {a.tasks})" if a.tasks else ""))
    for f, n in by_file.most_common(15):
        e = exec_file[f] / a.tasks if a.tasks else exec_file[f]
        print(f"  {100 * n / samples:5.1f} %  {e:14.1f}  {f}")


if __name__ == "__main__":
    main()
