#!/usr/bin/env bash
# Runs HERE (the build machine, no GPU needed): builds `amk` and `amk_gpu_tests` for Hopper
# (sm_90a, Release) into build-gpu/ and copies them into .gpu/, which .git/info/exclude keeps out
# of git so it travels to the GPU machine only when a device run carries it. The GPU machine has
# no network and no apt, so it cannot install the Debian build dependencies: build here, run
# there with `scripts/gpu_check.sh --prebuilt .gpu`.
#
# Usage: scripts/gpu_pack.sh [-jN] [--build-dir DIR]
#   --build-dir DIR: use (and incrementally rebuild) an existing Release CUDA build directory
#   instead of build-gpu/ (e.g. a developer's build/ configured with AMK_ENABLE_CUDA=ON).
set -euo pipefail
cd "$(dirname "$0")/.."

jobs="-j$(nproc)"
build_dir=build-gpu
while (($#)); do
  case "$1" in
    -j*) jobs="$1"; shift ;;
    --build-dir) build_dir="${2:?--build-dir needs a directory}"; shift 2 ;;
    *) echo "gpu_pack: unknown argument '$1'" >&2; exit 2 ;;
  esac
done

command -v nvcc >/dev/null || [[ -x /usr/local/cuda/bin/nvcc ]] ||
  { echo "gpu_pack: nvcc not found: the CUDA toolkit is needed to build the GPU binaries" >&2; exit 1; }
if [[ "$build_dir" == build-gpu ]]; then
  ./scripts/setup.sh

  cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a \
    -DAMK_BUILD_BENCH=OFF >build-gpu-configure.log 2>&1 ||
    { cat build-gpu-configure.log; exit 1; }
  rm -f build-gpu-configure.log
  grep -q '^CMAKE_CUDA_COMPILER:.*nvcc' build-gpu/CMakeCache.txt ||
    { echo "gpu_pack: CMake did not enable CUDA in build-gpu (the binaries would be stubs)" >&2; exit 1; }
fi
grep -q '^CMAKE_CUDA_COMPILER:.*nvcc' "$build_dir/CMakeCache.txt" ||
  { echo "gpu_pack: $build_dir is not a CUDA build (the binaries would be stubs)" >&2; exit 1; }
cmake --build "$build_dir" "$jobs" --target amk amk_gpu_tests

# Keep .gpu/ out of git (and so out of the device's working tree unless carried).
exclude=.git/info/exclude
if [[ -d .git ]] && ! grep -qx '/.gpu/' "$exclude" 2>/dev/null; then
  mkdir -p "$(dirname "$exclude")"
  echo '/.gpu/' >>"$exclude"
fi

mkdir -p .gpu
cp "$build_dir/amk" "$build_dir/amk_gpu_tests" .gpu/
strip --strip-debug .gpu/amk .gpu/amk_gpu_tests 2>/dev/null || true

# The GPU machine has the driver (libcuda) and a C++ runtime, nothing from Debian's -dev packages:
# anything else dynamically linked would fail there.
# Shared libraries beyond libc/libstdc++/the driver (cpp-httplib and what it needs: Debian has
# no static archive of it) travel in .gpu/lib; `amk` finds them there through its
# $ORIGIN/lib search path (CMakeLists.txt). Anything still missing is an error.
status=0
base='^(linux-vdso|/lib64/ld-linux|libc\.so|libm\.so|libstdc\+\+|libgcc_s|libdl|libpthread|librt|libcuda\.so)'
rm -rf .gpu/lib
for bin in .gpu/amk .gpu/amk_gpu_tests; do
  while read -r name path; do
    [[ -z "$name" ]] && continue
    if [[ "$bin" == .gpu/amk && -f "$path" ]]; then
      mkdir -p .gpu/lib && cp -L "$path" ".gpu/lib/$name"
    else
      echo "gpu_pack: ERROR: $bin needs $name, which the GPU machine may lack" >&2
      status=1
    fi
  done < <(ldd "$bin" | awk '$2 == "=>" {print $1, $3}' | grep -vE "$base" || true)
done
[[ -d .gpu/lib ]] && echo "gpu_pack: bundled in .gpu/lib: $(ls .gpu/lib | tr '\n' ' ')"

echo "gpu_pack: built for sm_90a (Release) into .gpu/:"
ls -l .gpu/amk .gpu/amk_gpu_tests | awk '{printf "  %-22s %6.1f MiB\n", $9, $5 / 1048576}'
du -sh .gpu | awk '{print "  total " $1 " (a device run carries at most 64 MiB)"}'
echo "gpu_pack: next, on the GPU machine (carry .gpu): scripts/gpu_check.sh --prebuilt .gpu"
exit "$status"
