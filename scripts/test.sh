#!/usr/bin/env bash
# Builds everything and runs every test. GPU tests skip with a message where there is no GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/build.sh
ctest --test-dir build --output-on-failure -j"$(nproc)"
