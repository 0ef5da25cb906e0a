#!/usr/bin/env bash
# Runs ON THE GPU MACHINE: one preset, several ScheduleConfig variants, one `amk bench` each (the
# correctness check first, as always), and a table of µs/token and % of floor per variant. The
# measured way to pick a knob's default (bench/RESULTS.md records what it found).
#
#   scripts/gpu_sweep.sh --prebuilt DIR --preset NAME [--base CFG] [--peer] [--no-reference-cache] VARIANT...
#
# VARIANT: "derived" (no --config: the model's derived default), "base", or comma-separated
# KEY=VALUE overrides of the base config's integer keys (--base derived: of the derived default,
# read back from `amk compile --max-context 512` of the checkpoint, so pass `-- --context 512`;
# "derived" must then be the first variant), e.g.
# stream_bytes_in_flight=65536,stream_chunk_bytes=16384 or tiling.attention.kv_block=128. The
# checkpoint is generated once a machine into /tmp/amk-presets/NAME (where gpu_check.sh leaves it
# too) and reused. Logs, JSON and each variant's config (cfg-NAME-I.json) go to $OUT (or
# ./gpu-sweep-out); "%i" in the arguments after "--" becomes the variant's index (e.g. --
# --profile-tsv "$OUT/prof-NAME-%i.tsv"). The reference's logits are computed once and kept
# (`amk bench --reference-cache`, scripts/reference_cache.sh: AMK_REFERENCE_SEED in,
# $OUT/references.tgz out); --no-reference-cache for a binary older than that option.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2

prebuilt="" preset="" base=bench/configs/decode.json peer=() variants=() extra=()
source scripts/reference_cache.sh
refs=(--reference-cache "$reference_cache_dir") presets="${AMK_PRESETS_DIR:-/tmp/amk-presets}"
while (($#)); do
  case "$1" in
    --prebuilt) prebuilt="${2:?}"; shift 2 ;;
    --preset) preset="${2:?}"; shift 2 ;;
    --base) base="${2:?}"; shift 2 ;;
    --peer) peer=(--peer); shift ;;
    --no-reference-cache) refs=(); shift ;;
    --) shift; extra=("$@"); break ;;
    -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
    *) variants+=("$1"); shift ;;
  esac
done
[[ -n "$prebuilt" && -n "$preset" && ${#variants[@]} -gt 0 ]] || { sed -n '2,18p' "$0"; exit 2; }
amk="$(cd "$prebuilt" && pwd)/amk"
out="${OUT:-$PWD/gpu-sweep-out}"
mkdir -p "$out"
((${#refs[@]})) && reference_cache_seed
cfgdir=$(mktemp -d /tmp/amk-sweep-cfg.XXXXXX)
rows=()
for i in "${!variants[@]}"; do
  v=${variants[$i]}
  cfg="$cfgdir/v$i.json"
  if [[ $base == derived ]]; then
    if [[ $v != derived && ! -f "$cfgdir/derived.json" ]]; then
      [[ -f "$presets/$preset/config.json" ]] ||
        { echo "--base derived: run the 'derived' variant first (it writes the checkpoint)"; exit 2; }
      "$amk" compile "$presets/$preset" --max-context 512 -o "$cfgdir/derived-program.json" >/dev/null &&
        python3 -c 'import json,sys; json.dump(json.load(open(sys.argv[1]))["config"], open(sys.argv[2], "w"), indent=1)' \
          "$cfgdir/derived-program.json" "$cfgdir/derived.json" ||
        { echo "--base derived: cannot read the derived config back"; exit 2; }
    fi
    vbase="$cfgdir/derived.json"
  else
    vbase="$base"
  fi
  if [[ $v == derived ]]; then echo '{}' >"$cfg"
  else python3 scripts/config_variant.py "$vbase" "$cfg" "$v" || { echo "bad variant '$v'"; exit 2; }
  fi
  echo "== $preset [$v]"
  cp "$cfg" "$out/cfg-$preset-$i.json" 2>/dev/null  # the variant's config, beside its JSON
  args=("${extra[@]/\%i/$i}")  # %i in the extra arguments: the variant's index
  p=()
  ((i == 0)) && p=("${peer[@]}")
  cfgopt=(--config "$cfg"); [[ $v == derived ]] && cfgopt=()
  timeout 300 "$amk" bench --preset "$preset" --preset-dir "$presets/$preset" "${cfgopt[@]}" "${refs[@]}" \
    --json "$out/sweep-$preset-$i.json" --results "$out/results.tsv" --tag "sweep $v" "${p[@]}" \
    "${args[@]}" >"$cfgdir/log$i" 2>&1
  rc=$?
  tail -n 4 "$cfgdir/log$i"
  row=$(python3 - "$out/sweep-$preset-$i.json" "$v" "$rc" <<'EOF'
import json, sys
path, v, rc = sys.argv[1:4]
try:
    r = json.load(open(path))
except Exception:
    print(f"{v}|rc {rc}|-|-|-|-"); sys.exit()
us = r.get("median_us_per_token")
peer = r.get("peer_us_per_token")
fmt = lambda x, f: (f % x) if isinstance(x, (int, float)) else "-"
print(f"{v}|{r.get('check','?')}|{fmt(us,'%.1f')}|{fmt(r.get('pct_of_floor'),'%.1f')}|{fmt(r.get('floor_us'),'%.1f')}|{fmt(peer,'%.1f')}")
EOF
)
  rows+=("$row")
done
cat "$cfgdir"/log* >"$out/sweep-$preset.log" 2>/dev/null
((${#refs[@]})) && reference_cache_save "$out"
echo
printf '%-60s %-6s %10s %8s %9s %10s\n' variant check "µs/token" "% floor" "floor µs" "peer µs"
for r in "${rows[@]}"; do
  IFS='|' read -r a b c d e f <<<"$r"
  printf '%-60s %-6s %10s %8s %9s %10s\n' "$a" "$b" "$c" "$d" "$e" "$f"
done
