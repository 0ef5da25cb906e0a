#!/usr/bin/env bash
# Runs ON THE GPU MACHINE: the same checkpoints timed by several `amk` binaries, interleaved
# (A B C A B C ...) so that clock and thermal drift fall on every binary alike. The measured way
# to keep or revert a change to the megakernel: build the old and the new binary here, carry
# both, compare in one run. Every timing is checked against the CPU reference first (a FAIL or
# NaN shows in the table, never a bare time).
#
#   scripts/gpu_ab.sh [--rounds N] [--check P,Q] --preset NAME [--preset NAME ...] BIN...
#                     [-- BENCH_ARGS...]
#
# BENCH_ARGS go to every `amk bench` (a 512-token context unless they name --context; the
# checked positions come from --check). BIN: paths of amk binaries (the first one also generates the presets, once a machine, under
# /tmp/amk-presets, where gpu_check.sh leaves them too); each
# finds its shared libraries in lib/ beside it (scripts/gpu_pack.sh's layout).
# BIN@KEY=VALUE,...: that binary with the preset's derived default at the run's context (written
# by its own `amk sim --gpu auto --write-config` on this machine) and these overrides
# (scripts/config_variant.py), e.g. .gpu/amk@smem_bytes_per_block=0,
# .gpu/amk@sm_assignment=critical_path or
# .gpu/amk@tiling.q_proj.N_tile=32,tiling.k_proj.N_tile=32,tiling.v_proj.N_tile=32: a knob's
# default measured against the same binary, interleaved.
# The CPU reference's logits are computed once a checkpoint, context and position and kept
# (`amk bench --reference-cache`: the plain lowering's, amk eval's oracle;
# scripts/reference_cache.sh: AMK_REFERENCE_SEED in, $OUT/references.tgz out), so later runs check
# against them in no time (llama-3.1-8b: ~115 s a position otherwise); --no-reference-cache:
# each run checks against its own program, for binaries older than the option.
# Writes $OUT/ab.tsv (preset, binary, round, µs/token, % of floor, check) and $OUT/ab-logs.tgz (ab-logs-2.tgz, ... after an earlier call)
# (every run's log: the device tool brings back 8 files a call) and prints the median per
# (preset, binary) with its ratio to the first binary.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
source scripts/reference_cache.sh
rounds=2 check=0,65 presets=() bins=() extra=() refs=(--reference-cache "$reference_cache_dir")
while (($#)); do
  case "$1" in
    --rounds) rounds="${2:?}"; shift 2 ;;
    --check) check="${2:?}"; shift 2 ;;  # positions checked against the CPU reference
    --preset) presets+=("${2:?}"); shift 2 ;;
    --no-reference-cache) refs=(); shift ;;
    --) shift; extra=("$@"); break ;;
    -h|--help) sed -n '2,27p' "$0"; exit 0 ;;
    *) bins+=("$1"); shift ;;
  esac
done
((${#presets[@]} && ${#bins[@]})) || { sed -n '2,27p' "$0"; exit 2; }
out="${OUT:-$PWD/gpu-ab-out}"
mkdir -p "$out"
tsv="$out/ab.tsv"
((${#refs[@]})) && reference_cache_seed
printf 'preset\tbinary\tround\tus_per_token\tpct_of_floor\tcheck\n' >"$tsv"
# A 512-token context unless the bench arguments name one (--context 4096 --start-position ...).
context=(--context 512) tokens=512
for ((i = 0; i < ${#extra[@]}; ++i)); do
  case "${extra[$i]}" in
    --context) context=(); tokens="${extra[$((i + 1))]:-512}" ;;
    --context=*) context=(); tokens="${extra[$i]#--context=}" ;;
  esac
done
cfgdir=$(mktemp -d /tmp/amk-ab-cfg.XXXXXX)
# variant_config BIN_SPEC PRESET: prints the config file of a BIN@OVERRIDES spec (made once).
variant_config() {
  local b=${1%%@*} over=${1#*@} key
  key=$(printf '%s' "$2-$1" | cksum | tr ' ' '-')
  if [[ ! -f "$cfgdir/$key.json" ]]; then
    env LD_LIBRARY_PATH="$(dirname "$b")/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$b" sim "$2" \
      --gpu auto --max-context "$tokens" --write-config "$cfgdir/$key-derived.json" >/dev/null &&
      python3 scripts/config_variant.py "$cfgdir/$key-derived.json" "$cfgdir/$key.json" "$over" ||
      return 1
  fi
  echo "$cfgdir/$key.json"
}
for preset in "${presets[@]}"; do
  dir="${AMK_PRESETS_DIR:-/tmp/amk-presets}/$preset"  # shared with gpu_check.sh and the others
  for ((r = 0; r < rounds; ++r)); do
    for spec in "${bins[@]}"; do
      b=${spec%%@*} cfg=()
      if [[ $spec == *@* ]]; then
        f=$(variant_config "$spec" "$preset") || { echo "gpu_ab: cannot make the config of '$spec' for $preset" >&2; exit 2; }
        cfg=(--config "$f")
      fi
      chmod +x "$b" 2>/dev/null
      json=$(mktemp /tmp/amk-ab.XXXXXX.json)
      name=$(printf '%s' "$(basename "$(dirname "$b")")-$(basename "$spec")" | tr -c 'A-Za-z0-9._-' '_')
      # A long override list would pass the file system's 255-byte names: its first 120
      # characters and a checksum of the whole.
      ((${#name} > 160)) && name="${name:0:120}-$(printf '%s' "$spec" | cksum | cut -d' ' -f1)"
      log="$out/log-$preset-$name-$r.txt"
      timeout 240 env LD_LIBRARY_PATH="$(dirname "$b")/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$b" bench --preset "$preset" --preset-dir "$dir" "${context[@]}" --results /dev/null --json "$json" \
        --check-positions "$check" "${refs[@]}" "${cfg[@]}" "${extra[@]}" >"$log" 2>&1
      python3 - "$json" "$preset" "$spec" "$r" >>"$tsv" <<'PY'
import json, sys
try:
    j = json.load(open(sys.argv[1]))
    print(f"{sys.argv[2]}\t{sys.argv[3]}\t{sys.argv[4]}\t{j.get('median_us_per_token', float('nan')):.1f}\t"
          f"{j.get('pct_of_floor', float('nan')):.1f}\t{j.get('check', '?')}")
except Exception as e:
    print(f"{sys.argv[2]}\t{sys.argv[3]}\t{sys.argv[4]}\tnan\tnan\tERROR {type(e).__name__}")
PY
      # A run without a timing says why here, not only in the logs' archive.
      [[ $(tail -1 "$tsv" | cut -f6) == PASS ]] ||
        { echo "gpu_ab: $preset $spec round $r did not pass; its log ends:" >&2; tail -15 "$log" >&2; }
      rm -f "$json"
    done
  done
done
python3 - "$tsv" <<'PY'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
print(f"{'preset':14s} {'binary':40s} {'median us':>10s} {'vs first':>9s}  runs (check)")
for preset in dict.fromkeys(r["preset"] for r in rows):
    base = None
    for b in dict.fromkeys(r["binary"] for r in rows if r["preset"] == preset):
        rs = [r for r in rows if r["preset"] == preset and r["binary"] == b]
        ok = all(r["check"] == "PASS" for r in rs)
        vals = [float(r["us_per_token"]) for r in rs]
        med = statistics.median(vals) if ok else float("nan")
        base = med if base is None else base
        runs = " ".join(f"{v:.1f}" for v in vals)
        print(f"{preset:14s} {b[-40:]:40s} {med:10.1f} {med / base:9.3f}  {runs} ({'PASS' if ok else 'FAIL'})")
PY
((${#refs[@]})) && reference_cache_save "$out"
# The runs' logs in one file (ab-logs-2.tgz, ... when an earlier call left one in the same folder).
logs_tgz=ab-logs.tgz
i=2; while [[ -e $out/$logs_tgz ]]; do logs_tgz=ab-logs-$((i++)).tgz; done
(cd "$out" && ls log-*.txt >/dev/null 2>&1 && tar czf "$logs_tgz" log-*.txt && rm -f log-*.txt) || true
