#!/usr/bin/env bash
# Runs HERE (the build machine): one variant of `amk` for an A/B on the GPU machine. Applies the
# patches in order to the working tree, builds, prints the kernel's resource report (spills,
# instructions), packs the stripped binary xz-compressed as DIR/NAME.amk.xz (~3.4 MB instead of
# ~15: a device call carries 64 MiB, so five or six variants travel at once) and reverts the
# patches, whatever happened. No patch: the tree as it is (the baseline).
#
#   scripts/pack_variant.sh [--build-dir build] [--tests] --out DIR NAME [PATCH...]
#
#   --tests   also pack amk_gpu_tests as DIR/NAME.tests.xz (the GPU suite on the variant)
#
# On the GPU machine, scripts/ab_packed.sh unpacks them and runs scripts/gpu_ab.sh. A patch that
# changes include/amk/abi.h rebuilds nearly everything (~10 minutes on 2 cores); one that
# changes only the megakernel's device code, about one.
set -euo pipefail
cd "$(dirname "$0")/.."

build_dir=build out="" tests=0
while (($#)); do
  case "$1" in
    --build-dir) build_dir="${2:?--build-dir needs a directory}"; shift 2 ;;
    --out) out="${2:?--out needs a directory}"; shift 2 ;;
    --tests) tests=1; shift ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
    -*) echo "pack_variant: unknown option '$1'" >&2; exit 2 ;;
    *) break ;;
  esac
done
(($# >= 1)) && [[ -n "$out" ]] || { sed -n '2,14p' "$0" >&2; exit 2; }
name=$1; shift
[[ "$name" =~ ^[A-Za-z0-9._-]+$ ]] || { echo "pack_variant: bad variant name '$name'" >&2; exit 2; }
for p in "$@"; do
  [[ -f "$p" ]] || { echo "pack_variant: no patch '$p'" >&2; exit 2; }
done
[[ -f "$build_dir/build.ninja" ]] || { echo "pack_variant: '$build_dir' is not a configured build" >&2; exit 2; }
mkdir -p "$out"

applied=()
revert() {
  local i
  for ((i = ${#applied[@]} - 1; i >= 0; --i)); do
    git apply -R "${applied[$i]}" || echo "pack_variant: could not revert ${applied[$i]}" >&2
  done
}
trap revert EXIT
for p in "$@"; do
  git apply "$p" || { echo "pack_variant: '$p' does not apply" >&2; exit 1; }
  applied+=("$p")
done

targets=(amk)
((tests)) && targets+=(amk_gpu_tests)
log=$(mktemp)
if ! ninja -C "$build_dir" "${targets[@]}" >"$log" 2>&1; then
  tail -30 "$log"; rm -f "$log"
  echo "pack_variant: the build of '$name' failed" >&2
  exit 1
fi
rm -f "$log"
SASS_TOP=0 scripts/sass.sh --object "$build_dir/CMakeFiles/amk_cuda.dir/src/vm/cuda/megakernel.cu.o" \
  2>/dev/null | grep -E '^kernel|amk_megakernel' || true
tmp=$(mktemp)
strip --strip-debug -o "$tmp" "$build_dir/amk"
xz -T0 -6 -c "$tmp" >"$out/$name.amk.xz"
if ((tests)); then
  strip --strip-debug -o "$tmp" "$build_dir/amk_gpu_tests"
  xz -T0 -6 -c "$tmp" >"$out/$name.tests.xz"
fi
rm -f "$tmp"
echo "pack_variant: $out/$name.amk.xz$( ((tests)) && echo " and $name.tests.xz")"
