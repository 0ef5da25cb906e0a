#!/usr/bin/env bash
# Warm vs cold start of the schedule search (issue 13, PROGRAM.md §8B): does the corpus prior
# make a campaign on a new model shape reach the cold search's best in fewer experiments?
#
#   scripts/warm_vs_cold.sh [--amk BIN] [--device sim|cuda] [--gpu h100] [--seeds 5] [--iters 40]
#                           [--corpus-presets "qwen3-0.6b llama-3.2-1b smollm2-135m"]
#                           [--target-preset qwen2.5-0.5b] [--work DIR]
#
# 1. Builds a corpus: one autoresearch campaign (--cold, seed 0) on each corpus preset.
# 2. On the target preset, for each seed: a cold campaign and a warm one (--prior-corpus with
#    every corpus campaign's corpus.jsonl), each of --iters experiments.
# 3. For each seed, the cold campaign's best latency is the bar; each campaign's "experiments
#    to reach it" is the first experiment whose PASS latency is within 0.5 % of that bar.
# Prints a table per seed and the medians of both (a campaign that never reaches the bar counts
# as iters + 1). Latencies are [predicted] with --device sim, measured with --device cuda.
set -euo pipefail

amk=build/amk device=sim gpu=h100 seeds=5 iters=40 work=warm-vs-cold
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
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    *) echo "warm_vs_cold.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
[[ -x "$amk" ]] || { echo "warm_vs_cold.sh: no amk binary at $amk (--amk BIN)" >&2; exit 2; }
mkdir -p "$work/models"

model_dir() {  # a random BF16 checkpoint of the preset, made once
  local dir="$work/models/$1"
  [[ -f "$dir/config.json" ]] || "$amk" make-model --preset "$1" --dtype bf16 --seed 0 -o "$dir" >&2
  echo "$dir"
}

priors=()
for p in $corpus_presets; do
  dir=$(model_dir "$p")
  wd="$work/corpus-$p"
  "$amk" autoresearch "$dir" --gpu "$gpu" --device "$device" --iters "$iters" --cold --seed 0 \
    --workdir "$wd" >"$wd.log" 2>&1 || { echo "corpus campaign on $p failed (see $wd.log)" >&2; exit 1; }
  priors+=(--prior-corpus "$wd/corpus.jsonl")
done

target=$(model_dir "$target_preset")
for s in $(seq 1 "$seeds"); do
  for mode in cold warm; do
    wd="$work/$mode-seed$s"
    rm -rf "$wd"
    extra=(--cold)
    [[ $mode == warm ]] && extra=("${priors[@]}")
    "$amk" autoresearch "$target" --gpu "$gpu" --device "$device" --iters "$iters" --seed "$s" \
      --workdir "$wd" "${extra[@]}" >"$wd.log" 2>&1 || { echo "$mode seed $s failed (see $wd.log)" >&2; exit 1; }
  done
done

python3 - "$work" "$seeds" "$iters" <<'PY'
import csv, statistics, sys
work, seeds, iters = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
def rows(path):
    with open(path) as f:
        return [r for r in csv.DictReader(f, delimiter="\t")]
def best(rs):
    lat = [float(r["latency_us"]) for r in rs if r["correctness"] == "PASS" and r["latency_us"]]
    return min(lat) if lat else None
def reach(rs, bar):
    for r in rs:
        if r["correctness"] == "PASS" and r["latency_us"] and float(r["latency_us"]) <= bar * 1.005:
            return int(r["experiment"])
    return iters + 1
cold_n, warm_n = [], []
print(f"{'seed':>4}  {'cold best us':>12}  {'warm best us':>12}  {'cold reaches':>12}  {'warm reaches':>12}")
for s in range(1, seeds + 1):
    c, w = rows(f"{work}/cold-seed{s}/results.tsv"), rows(f"{work}/warm-seed{s}/results.tsv")
    bar = best(c)
    if bar is None:
        print(f"{s:>4}  cold campaign had no PASS"); continue
    cn, wn = reach(c, bar), reach(w, bar)
    cold_n.append(cn); warm_n.append(wn)
    print(f"{s:>4}  {bar:>12.2f}  {best(w) or float('nan'):>12.2f}  {cn:>12}  {wn:>12}")
if cold_n:
    print(f"median experiments to reach the cold best: cold {statistics.median(cold_n)}, "
          f"warm {statistics.median(warm_n)} (over {len(cold_n)} seeds)")
PY
