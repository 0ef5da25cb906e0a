#!/usr/bin/env bash
# Runs ON THE GPU MACHINE: the timing simulator's calibration data (docs/SIMULATOR.md). For each
# model, the incumbent (the derived default config), single-knob variants around it and the
# searched config of bench/configs/MODEL.json ("kept"), one
# `amk bench` each (the correctness check first, as always) with a per-task profile; then a
# manifest of the cases for scripts/sim_calibrate.sh (run it here or on the CPU machine).
#
#   scripts/sim_collect.sh --prebuilt DIR [--models "llama-3.2-1b qwen3-0.6b smollm2-135m"]
#                          [--variants N] [--tokens N] [--no-profile] [--dry-run]
#                          [--skip N] [--budget SECONDS] [--pack] [--no-reference-cache]
#
# --skip N leaves out each model's first N variants (a collection cut short, resumed).
# --budget SECONDS starts no run after that many seconds (the rest is left for a resumed call:
# the script prints the --skip to give it), so the call ends inside a device call's limit.
# --pack leaves one file, $OUT/sim-collect.tgz, instead of the tree (the device tool brings back
# at most 8 files a call).
# --dry-run (no GPU needed) writes the configs and prints the simulator's prediction of each.
# The CPU reference's logits are computed once a model and kept (`amk bench --reference-cache`,
# scripts/reference_cache.sh: AMK_REFERENCE_SEED in, $OUT/references.tgz out);
# --no-reference-cache for a binary older than that option.
#
# Output under $OUT (or ./sim-collect-out): configs/MODEL-VARIANT.json, bench/MODEL-VARIANT.json,
# prof/MODEL-VARIANT.tsv, results.tsv and cases.tsv (the manifest, paths relative to it).
# About 9 s a run on an H100 (smollm2, qwen3), ~30 s for the 1B (its CPU check), plus the
# checkpoint, generated once a machine into /tmp/amk-presets/MODEL (shared with gpu_check.sh).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2

source scripts/reference_cache.sh
prebuilt="" models="llama-3.2-1b qwen3-0.6b smollm2-135m" max_variants=99 profile=1 gpu=auto
tokens=256 dry=0 skip=0 budget=0 pack=0 refs=(--reference-cache "$reference_cache_dir")
presets="${AMK_PRESETS_DIR:-/tmp/amk-presets}"
context=512  # the context the incumbent is derived for and every bench lowers
while (($#)); do
  case "$1" in
    --prebuilt) prebuilt="${2:?}"; shift 2 ;;
    --models) models="${2:?}"; shift 2 ;;
    --variants) max_variants="${2:?}"; shift 2 ;;
    --gpu) gpu="${2:?}"; shift 2 ;;
    --tokens) tokens="${2:?}"; shift 2 ;;
    --no-profile) profile=0; shift ;;
    --dry-run) dry=1; shift ;;
    --skip) skip="${2:?}"; shift 2 ;;
    --budget) budget="${2:?}"; shift 2 ;;
    --pack) pack=1; shift ;;
    --no-reference-cache) refs=(); shift ;;
    -h|--help) sed -n '2,25p' "$0"; exit 0 ;;
    *) echo "unknown option '$1'"; exit 2 ;;
  esac
done
[[ -n "$prebuilt" ]] || { sed -n '2,25p' "$0"; exit 2; }
for n in "$skip" "$budget"; do
  [[ $n =~ ^[0-9]+$ ]] || { echo "--skip and --budget take a whole number, not '$n'"; exit 2; }
done
amk="$(cd "$prebuilt" && pwd)/amk"
out="${OUT:-$PWD/sim-collect-out}"
mkdir -p "$out/configs" "$out/bench" "$out/prof"
manifest="$out/cases.tsv"
((${#refs[@]})) && ((!dry)) && reference_cache_seed
[[ -f "$manifest" ]] || printf '# GROUP\tNAME\tMODEL\tCONFIG\tBENCH\tPROFILE\n' >"$manifest"

# The variants: one knob moved from the incumbent, each a step a search would take.
variants=(
  derived
  pipelining_depth=0
  pipelining_depth=1
  pipelining_depth=8
  stream_bytes_in_flight=32768
  stream_bytes_in_flight=131072
  stream_prefetch_bytes_in_flight=16384
  stream_prefetch_bytes_in_flight=65536
  stream_chunk_bytes=16384
  tile:gate_proj*2
  tile:gate_proj*4
  tile:gate_proj/2
  tile:down_proj*2
  tile:down_proj/2
  tile:o_proj*2
  tile:o_proj/2
  tile:q_proj,k_proj,v_proj*2
  tile:q_proj,k_proj,v_proj/2
  tile:lm_head/2
  tile:lm_head*2
  tiling.attention.kv_block=128
  tiling.attention.kv_block=32
  attention:unsplit
  sm_assignment=load_balance
  sm_assignment=critical_path
  threads_per_block=flip
  unfuse:rmsnorm+gemv
  kept
)
for model in $models; do
  base="$out/configs/$model-derived.json"
  # The incumbent: the config amk bench derives without --config (512-token context).
  "$amk" sim "$model" --gpu "${gpu/auto/h100}" --max-context "$context" --write-config "$base" >/dev/null ||
    { echo "cannot derive the config of $model"; exit 1; }
  n=0
  for v in "${variants[@]}"; do
    ((n >= max_variants)) && break
    [[ $v == kept && ! -f bench/configs/$model.json ]] && continue
    n=$((n + 1))
    ((n <= skip)) && continue
    name=$(echo "$v" | sed 's/\*/-x/; s:/:-div:' | tr ':,=+' '-_-_')
    cfg="$out/configs/$model-$name.json"
    python3 - "$base" "$cfg" "$v" "bench/configs/$model.json" <<'PY' || { echo "bad variant $v"; exit 2; }
import json, sys
base, dst, v, kept = sys.argv[1:5]
c = json.load(open(base))
if v == "kept":
    c = json.load(open(kept))
elif v == "threads_per_block=flip":
    c["threads_per_block"] = 256 if c.get("threads_per_block", 256) == 192 else 192
elif v == "attention:unsplit":  # one task a KV head over the whole window, no combine
    c.setdefault("tiling", {})["attention"] = {"kv_heads": 1}
elif v.startswith("unfuse:"):
    c["fusion_grouping"] = [g for g in c["fusion_grouping"] if "+".join(g) != v[7:]]
elif v.startswith("tile:"):
    spec = v[5:]
    op = "*" if "*" in spec else "/"
    names, factor = spec.split(op)
    for k in names.split(","):
        t = c.setdefault("tiling", {}).setdefault(k, {})
        cur = t.get("N_tile") or c["tiling"].get("gemv", {}).get("N_tile", 256)
        t["N_tile"] = max(1, cur * int(factor) if op == "*" else cur // int(factor))
elif v != "derived":
    k, val = v.split("=", 1)
    *path, leaf = k.split(".")
    d = c
    for part in path:
        d = d.setdefault(part, {})
    d[leaf] = int(val) if val.lstrip("-").isdigit() else val
json.dump(c, open(dst, "w"), indent=1)
PY
    if ((dry)); then  # no GPU: check that the variant lowers, and print the simulator's prediction
      printf '%-14s %-40s ' "$model" "$v"
      "$amk" sim "$model" --gpu "${gpu/auto/h100}" --max-context "$context" --config "$cfg" 2>&1 |
        grep -E '^predicted|error|rejected' | head -1
      continue
    fi
    bench="$out/bench/$model-$name.json"
    prof="$out/prof/$model-$name.tsv"
    popt=()
    ((profile)) && popt=(--profile --profile-tsv "$prof")
    if ((budget > 0 && SECONDS >= budget)); then
      echo "budget of $budget s spent: resume $model with --models \"$model ...\" --skip $((n - 1))"
      break 2
    fi
    echo "== $model [$v]"
    timeout 240 "$amk" bench --preset "$model" --preset-dir "$presets/$model" --gpu "$gpu" \
      --config "$cfg" --context "$context" --check-positions 0 --tokens "$tokens" --json "$bench" --results "$out/results.tsv" \
      --tag "sim-collect $v" "${refs[@]}" "${popt[@]}" >"$out/bench/$model-$name.log" 2>&1
    rc=$?
    tail -n 2 "$out/bench/$model-$name.log"
    if ((rc == 0)) && [[ -f "$bench" ]]; then
      p="-"
      ((profile)) && [[ -s "$prof" ]] && p="prof/$model-$name.tsv"
      printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$model" "$name" "$model" "configs/$model-$name.json" \
        "bench/$model-$name.json" "$p" >>"$manifest"
    else
      echo "   (rc $rc: left out of the manifest)"
    fi
  done
done
echo "manifest: $manifest ($(grep -vc '^#' "$manifest") cases)"
((${#refs[@]})) && ((!dry)) && reference_cache_save "$out"
if ((pack)); then
  (cd "$out" && tar czf sim-collect.tgz cases.tsv configs bench prof $([[ -f results.tsv ]] && echo results.tsv) &&
    rm -rf configs bench prof results.tsv) && echo "packed: $out/sim-collect.tgz"
fi
