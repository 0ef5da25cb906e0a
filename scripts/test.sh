#!/usr/bin/env bash
# Builds everything and runs every test. GPU tests skip with a message where there is no GPU.
# The tests' independent oracles (HF tokenizers, sentencepiece, jinja2, gguf, numpy) live in a
# virtualenv and the real model and tokenizer files in a cache folder, both made once here.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/build.sh
AMK_PYTHON="$(./scripts/pyenv.sh)"
AMK_ASSETS_DIR="$(./scripts/fetch_assets.sh)"
export AMK_PYTHON AMK_ASSETS_DIR
ctest --test-dir build --output-on-failure -j"$(nproc)"
