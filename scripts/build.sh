#!/usr/bin/env bash
# Configures and builds AMK into ./build (Release). CUDA sources are compiled when nvcc exists.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >build-configure.log 2>&1 ||
  { cat build-configure.log; exit 1; }
rm -f build-configure.log
cmake --build build -j"$(nproc)" "$@"
