#!/usr/bin/env bash
# Fits the timing simulator's constants and scores them held out (docs/SIMULATOR.md): for each
# group (model) of the manifest, fit on the other groups and score on it; then one fit on all of
# them, the candidate for data/targets/<gpu>.sim.json. Runs anywhere the `amk` binary runs (no
# GPU needed): it lowers the programs again from the presets and configs the manifest names.
#
#   scripts/sim_calibrate.sh --amk PATH/amk --manifest DIR/cases.tsv [--gpu h100] [--out DIR]
#                            [--max-evals N] [--profile-weight W] [--relative-weight W] [--free a,b,c]
#                            [--start JSON]
#
# Output under --out (default ./sim-calibrate-out): fit-without-GROUP.json, score-GROUP.json,
# GPU.sim.json (the fit on all cases) and summary.txt (the held-out table).
set -uo pipefail

amk="" manifest="" gpu=h100 out="$PWD/sim-calibrate-out" fitopt=()
while (($#)); do
  case "$1" in
    --amk) amk="${2:?}"; shift 2 ;;
    --manifest) manifest="${2:?}"; shift 2 ;;
    --gpu) gpu="${2:?}"; shift 2 ;;
    --out) out="${2:?}"; shift 2 ;;
    --max-evals|--profile-weight|--relative-weight|--free|--start) fitopt+=("$1" "${2:?}"); shift 2 ;;
    -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
    *) echo "unknown option '$1'"; exit 2 ;;
  esac
done
[[ -n "$amk" && -n "$manifest" ]] || { sed -n '2,13p' "$0"; exit 2; }
[[ -x "$amk" ]] || { echo "not an executable: $amk"; exit 2; }
[[ -f "$manifest" ]] || { echo "no manifest: $manifest"; exit 2; }
mkdir -p "$out"
groups=$(grep -v '^[[:space:]]*#' "$manifest" | awk 'NF {print $1}' | sort -u)
[[ -n "$groups" ]] || { echo "the manifest names no case"; exit 2; }
summary="$out/summary.txt"
: >"$summary"
status=0
for g in $groups; do
  echo "== held out: $g (fit on the others)"
  if ! "$amk" sim-fit --manifest "$manifest" --gpu "$gpu" --exclude-group "$g" \
        --out "$out/fit-without-$g.json" "${fitopt[@]}" >"$out/fit-without-$g.log" 2>&1; then
    tail -n 5 "$out/fit-without-$g.log"; status=1; continue
  fi
  grep -E '^(objective|fit )' "$out/fit-without-$g.log"
  "$amk" sim-score --manifest "$manifest" --gpu "$gpu" --group "$g" \
    --constants "$out/fit-without-$g.json" --json "$out/score-$g.json" | tee "$out/score-$g.txt"
  tail -n 1 "$out/score-$g.txt" | sed "s/^score /$g /" >>"$summary"
done
echo "== the fit on every group"
if "$amk" sim-fit --manifest "$manifest" --gpu "$gpu" --out "$out/$gpu.sim.json" "${fitopt[@]}" \
     >"$out/fit-all.log" 2>&1; then
  grep -E '^(objective|fit )' "$out/fit-all.log"
else
  tail -n 5 "$out/fit-all.log"; status=1
fi
# Pooled over the rotations: every held-out prediction against its measurement.
python3 - "$out" $groups <<'PY' | tee -a "$summary"
import json, sys, os
out, groups = sys.argv[1], sys.argv[2:]
pred, meas = [], []
for g in groups:
    p = os.path.join(out, f"score-{g}.json")
    if not os.path.exists(p): continue
    for c in json.load(open(p))["cases"]:
        pred.append(c["predicted_us"]); meas.append(c["measured_us"])
def ranks(v):
    order = sorted(range(len(v)), key=lambda i: v[i]); r = [0.0] * len(v); i = 0
    while i < len(v):
        j = i
        while j + 1 < len(v) and v[order[j + 1]] == v[order[i]]: j += 1
        for k in range(i, j + 1): r[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return r
if len(pred) >= 2:
    a, b = ranks(pred), ranks(meas); n = len(a); ma, mb = sum(a) / n, sum(b) / n
    cov = sum((x - ma) * (y - mb) for x, y in zip(a, b))
    va = sum((x - ma) ** 2 for x in a); vb = sum((y - mb) ** 2 for y in b)
    rho = cov / (va * vb) ** 0.5 if va and vb else float("nan")
    errs = sorted(abs(p / m - 1) for p, m in zip(pred, meas))
    med = errs[n // 2] if n % 2 else (errs[n // 2 - 1] + errs[n // 2]) / 2
    print(f"pooled held-out: n {n}  Spearman {rho:.3f}  median |error| {100 * med:.1f} %")
PY
echo
echo "held-out scores (fit on the other groups):"
cat "$summary"
echo "candidate constants: $out/$gpu.sim.json (copy to data/targets/$gpu.sim.json and rebuild)"
exit $status
