#!/usr/bin/env bash
# Runs ON THE GPU MACHINE: one `amk autoresearch --device cuda` campaign per preset, each resumed
# from its folder under CAMPAIGNS (carried in from the build machine) and packed back into
# $OUT/campaigns.tgz, so that a campaign continues across machine starts with its experiment ids
# (the device returns only a limited number of files: one archive always comes back).
#
#   scripts/gpu_campaign.sh [--prebuilt .gpu] [--campaigns DIR] [--seed S] [--device cuda|sim]
#                           PRESET:MINUTES ...
#
# MINUTES is the campaign's total (amk autoresearch --minutes: a resumed campaign counts the time
# it already ran); PRESET:+M runs M more minutes than the campaign has spent so far.
#
# The checkpoint of each preset is a random BF16 one made with `amk make-model --seed 0` under
# /tmp (the same bytes on every machine, so a resumed campaign measures the same weights).
# Back here: tar xzf .../campaigns.tgz -C DIR (e.g. .campaigns/), then carry DIR again.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
prebuilt=.gpu campaigns=.campaigns seed=1 device=cuda runs=()
while (($#)); do
  case "$1" in
    --prebuilt) prebuilt="${2:?}"; shift 2 ;;
    --campaigns) campaigns="${2:?}"; shift 2 ;;
    --seed) seed="${2:?}"; shift 2 ;;
    --device) device="${2:?}"; shift 2 ;;  # sim: the same campaign on the timing simulator
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
    *:*) runs+=("$1"); shift ;;
    *) echo "gpu_campaign: expected PRESET:MINUTES, got '$1'" >&2; exit 2 ;;
  esac
done
((${#runs[@]})) || { sed -n '2,14p' "$0"; exit 2; }
amk="$(cd "$prebuilt" 2>/dev/null && pwd)/amk"
[[ -x "$amk" ]] || { echo "gpu_campaign: no amk in '$prebuilt' (scripts/gpu_pack.sh makes it)" >&2; exit 2; }
export LD_LIBRARY_PATH="$(dirname "$amk")/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
out="${OUT:-$PWD/gpu-campaign-out}"
work=/tmp/amk-campaigns
mkdir -p "$out" "$work"
[[ -d "$campaigns" ]] && cp -r "$campaigns"/. "$work"/
status=0
for run in "${runs[@]}"; do
  preset="${run%%:*}" minutes="${run#*:}"
  model="/tmp/m-$preset"  # the folder name is the campaign's model name
  if [[ ! -f "$model/config.json" ]]; then
    "$amk" make-model --preset "$preset" --dtype bf16 --seed 0 -o "$model" --force >/dev/null ||
      { echo "gpu_campaign: make-model $preset failed" >&2; status=1; continue; }
  fi
  # The whole campaign, worker start included, must end before the call's limit: the watchdog
  # of one evaluation is the campaign's own (--watchdog), this one only stops a stuck process.
  this_call="$minutes"  # the minutes this call may run
  if [[ "$minutes" == +* ]]; then  # M more minutes than the campaign's state has spent
    this_call="${minutes#+}"
    minutes=$(python3 - "$work/$preset/state.json" "$this_call" <<'PY'
import json, sys
try:
    spent = json.load(open(sys.argv[1])).get("elapsed_s", 0) / 60
except OSError:
    spent = 0
print(round(spent + float(sys.argv[2]), 2))
PY
) || { echo "gpu_campaign: bad minutes '$run'" >&2; status=1; continue; }
  fi
  limit=$(python3 -c "print(int(float('$this_call') * 60 + 120))") ||
    { echo "gpu_campaign: bad minutes '$run'" >&2; status=1; continue; }
  timeout "$limit" "$amk" autoresearch "$model" --gpu h100 --device "$device" --tokens 128 --warmup 64 \
    --seed "$seed" --minutes "$minutes" --workdir "$work/$preset" >"$work/$preset.log" 2>&1
  rc=$?
  echo "== $preset (rc $rc)"
  tail -11 "$work/$preset.log"
  ((rc == 0)) || status=1
done
tar czf "$out/campaigns.tgz" -C "$work" .
echo "gpu_campaign: $out/campaigns.tgz ($(du -h "$out/campaigns.tgz" | cut -f1))"
exit "$status"
