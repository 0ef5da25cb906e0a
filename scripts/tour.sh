#!/usr/bin/env bash
# A tour of the lower layers: build, make the bundled tiny Llama-3.2-shaped checkpoint (random weights; real
# ones cannot be downloaded here), compile its decode step for an H100 and generate tokens on the
# CPU ReferenceVM; check the bundled fixture against transformers' outputs on the GPU's CUDA VM
# when a usable GPU is present (and benchmark the tiny model there), else on the CPU. Then the
# one-layer example program.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/build.sh --target amk
./build/amk make-model --preset tiny --seed 0 --force -o build/tiny-model
./build/amk compile build/tiny-model --gpu h100 -o build/tiny.json
./build/amk run build/tiny-model --device cpu --prompt-ids 1,2,3 -n 16
device=cpu
if ./build/amk bench --preset tiny --preset-dir build/tiny-bench --tokens 64 --results build/results.tsv; then
  device=cuda
else
  echo "demo: the CUDA VM did not run (reason above); the oracle runs on the CPU ReferenceVM"
fi
./build/amk oracle tests/data/fixtures/tiny-llama \
  --expected tests/data/fixtures/tiny-llama/expected.safetensors --device "$device"
./build/amk validate examples/llama_block.json
./build/amk exec examples/llama_block.json
