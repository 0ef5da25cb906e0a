#!/usr/bin/env bash
# Warm vs cold start of the schedule search (issue 13, PROGRAM.md §8B): does the corpus prior
# make a campaign on a new model shape reach the cold search's best in fewer experiments?
#
#   scripts/warm_vs_cold.sh [--amk BIN] [--device sim|cuda] [--gpu h100] [--seeds 5] [--iters 40]
#                           [--first-seed 1] [--corpus-presets "qwen3-0.6b llama-3.2-1b smollm2-135m"]
#                           [--prior FILE]... [--target-preset qwen2.5-0.5b] [--work DIR]
#                           [--summary-only] [-- AUTORESEARCH_ARGS...]
#
# 1. Builds a corpus: one autoresearch campaign (--cold, seed 0) on each corpus preset; or,
#    with --prior, reads earlier campaigns' corpus.jsonl files instead (the GPU campaigns').
# 2. On the target preset, for each seed: a cold campaign and a warm one (--prior-corpus with
#    every corpus campaign's corpus.jsonl), each of --iters experiments.
# 3. For each seed, the cold campaign's best latency is the bar; each campaign's "experiments
#    to reach it" is the first experiment whose PASS latency is within 0.5 % of that bar.
# Prints a table per seed and the medians of both (a campaign that never reaches the bar counts
# as iters + 1). Latencies are [predicted] with --device sim, measured with --device cuda.
# Seeds --first-seed .. --seeds run (split a GPU run over calls; --summary-only tabulates the
# campaigns already in --work). AUTORESEARCH_ARGS go to every campaign (--tokens 128, say).
set -euo pipefail

amk=build/amk device=sim gpu=h100 seeds=5 iters=40 work=warm-vs-cold first_seed=1 summary_only=0
priors=() extra_args=()
corpus_presets="qwen3-0.6b llama-3.2-1b smollm2-135m"
target_preset="qwen2.5-0.5b"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --amk) amk="$2"; shift 2 ;;
    --device) device="$2"; shift 2 ;;
    --gpu) gpu="$2"; shift 2 ;;
    --seeds) seeds="$2"; shift 2 ;;
    --iters) iters="$2"; shift 2 ;;
    --corpus-presets) corpus_presets="$2"; shift 2 ;;
    --target-preset) target_preset="$2"; shift 2 ;;
    --work) work="$2"; shift 2 ;;
    --first-seed) first_seed="$2"; shift 2 ;;
    --prior) [[ -f "$2" ]] || { echo "warm_vs_cold.sh: no corpus file $2" >&2; exit 2; }
             priors+=(--prior-corpus "$2"); shift 2 ;;
    --summary-only) summary_only=1; shift ;;
    --) shift; extra_args=("$@"); break ;;
    -h|--help) sed -n '2,21p' "$0"; exit 0 ;;
    *) echo "warm_vs_cold.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
((summary_only)) || [[ -x "$amk" ]] || { echo "warm_vs_cold.sh: no amk binary at $amk (--amk BIN)" >&2; exit 2; }
mkdir -p "$work/models"

model_dir() {  # a random BF16 checkpoint of the preset, made once
  local dir="$work/models/$1"
  [[ -f "$dir/config.json" ]] || "$amk" make-model --preset "$1" --dtype bf16 --seed 0 -o "$dir" >&2
  echo "$dir"
}

if ((!summary_only)); then
  if ((${#priors[@]} == 0)); then  # no --prior: the corpus campaigns
    for p in $corpus_presets; do
      dir=$(model_dir "$p")
      wd="$work/corpus-$p"
      "$amk" autoresearch "$dir" --gpu "$gpu" --device "$device" --iters "$iters" --cold --seed 0 \
        --workdir "$wd" >"$wd.log" 2>&1 || { echo "corpus campaign on $p failed (see $wd.log)" >&2; exit 1; }
      priors+=(--prior-corpus "$wd/corpus.jsonl")
    done
  fi
  target=$(model_dir "$target_preset")
  for s in $(seq "$first_seed" "$seeds"); do
    for mode in cold warm; do
      wd="$work/$mode-seed$s"  # an unfinished campaign there resumes
      extra=(--cold)
      [[ $mode == warm ]] && extra=("${priors[@]}")
      "$amk" autoresearch "$target" --gpu "$gpu" --device "$device" --iters "$iters" --seed "$s" \
        --workdir "$wd" "${extra[@]}" "${extra_args[@]}" >"$wd.log" 2>&1 ||
        { echo "$mode seed $s failed (see $wd.log)" >&2; exit 1; }
    done
  done
fi

python3 - "$work" "$seeds" "$iters" <<'PY'
import csv, os, statistics, sys
work, seeds, iters = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
def rows(path):
    with open(path) as f:
        return [r for r in csv.DictReader(f, delimiter="\t")]
def passing(rs):
    return [(int(r["experiment"]), float(r["latency_us"])) for r in rs
            if r["correctness"] == "PASS" and r["latency_us"]]
def best(rs):
    lat = [l for _, l in passing(rs)]
    return min(lat) if lat else None
def reach(rs, bar):
    for e, l in passing(rs):
        if l <= bar * 1.005:
            return e
    return iters + 1
def curve(rs):  # best latency so far after each experiment (None before the first PASS)
    out, b, by = [], None, dict(passing(rs))
    for e in range(1, iters + 1):
        if e in by: b = by[e] if b is None else min(b, by[e])
        out.append(b)
    return out
cold_n, warm_n, curves = [], [], {"cold": [], "warm": []}
print(f"{'seed':>4}  {'cold best us':>12}  {'warm best us':>12}  {'cold reaches':>12}  {'warm reaches':>12}")
for s in range(1, seeds + 1):
    cp, wp = f"{work}/cold-seed{s}/results.tsv", f"{work}/warm-seed{s}/results.tsv"
    if not (os.path.exists(cp) and os.path.exists(wp)):
        print(f"{s:>4}  (not run)"); continue
    c, w = rows(cp), rows(wp)
    bar = best(c)
    if bar is None:
        print(f"{s:>4}  cold campaign had no PASS"); continue
    cn, wn = reach(c, bar), reach(w, bar)
    cold_n.append(cn); warm_n.append(wn)
    curves["cold"].append(curve(c)); curves["warm"].append(curve(w))
    print(f"{s:>4}  {bar:>12.2f}  {best(w) or float('nan'):>12.2f}  {cn:>12}  {wn:>12}")
if cold_n:
    print(f"median experiments to reach the cold best: cold {statistics.median(cold_n)}, "
          f"warm {statistics.median(warm_n)} (over {len(cold_n)} seeds)")
    print("median best-so-far us after experiment n (the curves):")
    print(f"{'n':>4}  {'cold':>9}  {'warm':>9}")
    for n in range(iters):
        row = []
        for mode in ("cold", "warm"):
            v = [c[n] for c in curves[mode] if c[n] is not None]
            row.append(f"{statistics.median(v):9.1f}" if v else f"{'-':>9}")
        print(f"{n + 1:>4}  {row[0]}  {row[1]}")
PY
