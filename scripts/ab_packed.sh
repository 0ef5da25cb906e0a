#!/usr/bin/env bash
# Runs ON THE GPU MACHINE: unpacks variants packed by scripts/pack_variant.sh and races them with
# scripts/gpu_ab.sh (interleaved, each timing checked against the CPU reference first).
#
#   scripts/ab_packed.sh --lib DIR PACK NAME... [-- GPU_AB_ARGS...]
#
#   --lib DIR  the shared libraries the binaries need (scripts/gpu_pack.sh's .gpu/lib)
#   PACK       the folder holding NAME.amk.xz (and NAME.tests.xz)
#   NAME...    the variants, the first one the reference of the ratios
#   GPU_AB_ARGS  go to gpu_ab.sh before the binaries, e.g. --rounds 2 --check 0,1,65,300
#              --preset llama-3.2-1b; bench arguments after a second `--`
#
# Each variant lands in /tmp/amk-variants/NAME/ (amk, amk_gpu_tests if packed, lib/ linked), so
# a later call on the same machine can run its GPU suite: AMK_SOURCE_DIR=$PWD
# /tmp/amk-variants/NAME/amk_gpu_tests.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2

lib=""
while (($#)); do
  case "$1" in
    --lib) lib="${2:?--lib needs a directory}"; shift 2 ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    *) break ;;
  esac
done
(($# >= 2)) && [[ -n "$lib" ]] || { sed -n '2,16p' "$0" >&2; exit 2; }
lib=$(cd "$lib" 2>/dev/null && pwd) || { echo "ab_packed: no directory '$lib'" >&2; exit 2; }
pack=$1; shift
names=()
while (($#)) && [[ "$1" != -- ]]; do names+=("$1"); shift; done
[[ "${1:-}" == -- ]] && shift
ab_args=() bench_args=()
while (($#)) && [[ "$1" != -- ]]; do ab_args+=("$1"); shift; done
[[ "${1:-}" == -- ]] && { shift; bench_args=(-- "$@"); }

root=/tmp/amk-variants
bins=()
for n in "${names[@]}"; do
  [[ -f "$pack/$n.amk.xz" ]] || { echo "ab_packed: no '$pack/$n.amk.xz'" >&2; exit 2; }
  mkdir -p "$root/$n"
  xz -dc "$pack/$n.amk.xz" >"$root/$n/amk" && chmod +x "$root/$n/amk" || exit 1
  if [[ -f "$pack/$n.tests.xz" ]]; then
    xz -dc "$pack/$n.tests.xz" >"$root/$n/amk_gpu_tests" && chmod +x "$root/$n/amk_gpu_tests"
  fi
  ln -sfn "$lib" "$root/$n/lib"
  bins+=("$root/$n/amk")
done
exec scripts/gpu_ab.sh "${ab_args[@]}" "${bins[@]}" "${bench_args[@]}"
