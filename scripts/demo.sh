#!/usr/bin/env bash
# The main job on the bundled example: build, validate the program, run it on the CPU
# ReferenceVM (the GPU path arrives with the CUDA VM).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/build.sh --target amk
./build/amk validate examples/llama_block.json
./build/amk exec examples/llama_block.json
