#!/usr/bin/env bash
# Runs ON THE GPU MACHINE, from the repository root: where the megakernel's warps wait. Nsight
# Compute samples every warp's program counter and stall reason during one timed launch of
# `amk bench` on each preset; the samples are exported per SASS instruction with its source
# line (the build has -lineinfo), so scripts/stalls_report.py can sum them by op and by reason
# here, without ncu.
#
#   scripts/gpu_stalls.sh --prebuilt DIR [--config FILE] [--long] PRESET...
#
# --long profiles a launch at positions 448-511 of a 1024-token context (attention over ~480
# keys) instead of one at positions 64-127.
# Writes $OUT/stalls-PRESET.tgz (raw metrics CSV, the source page CSV, the details page) per
# preset. The clocks are left alone (--clock-control none: METHOD.md).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
prebuilt="" config="" long=0
presets=()
while (($#)); do
  case "$1" in
    --prebuilt) prebuilt="${2:?--prebuilt needs a directory}"; shift 2 ;;
    --config) config="${2:?--config needs a file}"; shift 2 ;;
    --long) long=1; shift ;;
    -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
    *) presets+=("$1"); shift ;;
  esac
done
[[ -n "$prebuilt" && -x "$prebuilt/amk" ]] || { echo "gpu_stalls: --prebuilt DIR with DIR/amk" >&2; exit 2; }
((${#presets[@]})) || { echo "gpu_stalls: name at least one preset" >&2; exit 2; }
command -v ncu >/dev/null || { echo "gpu_stalls: ncu not found" >&2; exit 1; }
out="${OUT:-$PWD/gpu-stalls-out}"
mkdir -p "$out"
work=$(mktemp -d /tmp/amk-stalls.XXXXXX)
rc=0
for preset in "${presets[@]}"; do
  d="$work/$preset"
  mkdir -p "$d"
  # The check's launch (position 0) and the first warm-up launch are skipped: the profiled
  # launch is the second warm-up one, 64 steps of a warm step.
  skip=2 context=512 warmup=128
  ((long)) && skip=8 context=1024 warmup=512
  timeout 300 ncu --clock-control none --kernel-name regex:amk_megakernel --launch-skip $skip \
    --launch-count 1 --section WarpStateStats --section SourceCounters --section LaunchStats \
    --import-source no -f -o "$d/rep" \
    "$prebuilt/amk" bench --preset "$preset" --preset-dir "$work/model-$preset" \
    ${config:+--config "$config"} --context $context --check-positions 0 --warmup $warmup --tokens 64 \
    --results /dev/null >"$d/ncu.log" 2>&1 || { echo "gpu_stalls: $preset failed"; tail -20 "$d/ncu.log"; rc=1; }
  if [[ -f "$d/rep.ncu-rep" ]]; then
    ncu -i "$d/rep.ncu-rep" --page raw --csv >"$d/raw.csv" 2>&1
    ncu -i "$d/rep.ncu-rep" --page details --csv >"$d/details.csv" 2>&1
    ncu -i "$d/rep.ncu-rep" --page source --csv --print-source cuda,sass >"$d/source.csv" 2>"$d/source.err" ||
      ncu -i "$d/rep.ncu-rep" --page source --csv >"$d/source.csv" 2>>"$d/source.err"
    rm -f "$d/rep.ncu-rep"
  fi
  tail -8 "$d/ncu.log"
  tar czf "$out/stalls-$preset.tgz" -C "$d" .
  rm -rf "${work:?}/model-$preset"
done
rm -rf "$work"
exit $rc
