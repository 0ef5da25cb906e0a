#!/usr/bin/env bash
# Makes (once) the Python virtualenv that holds the tests' independent oracles: HF tokenizers,
# sentencepiece, jinja2, the gguf package, numpy, openai, prometheus_client. Prints the path of its
# python. Idempotent: a venv whose stamp matches the pinned list is reused as it is.
set -euo pipefail
cache="${AMK_CACHE_DIR:-$HOME/.cache/amk}"
venv="$cache/venv"
pins=(tokenizers==0.23.3 sentencepiece==0.2.3 jinja2==3.1.6 gguf==0.19.0 numpy==2.4.6
      openai prometheus_client)
stamp="${pins[*]}"
if [[ -x "$venv/bin/python" && "$(cat "$venv/.amk-stamp" 2>/dev/null)" == "$stamp" ]]; then
  echo "$venv/bin/python"; exit 0
fi
mkdir -p "$cache"
python3 -m venv "$venv" >&2
"$venv/bin/pip" install -q --disable-pip-version-check "${pins[@]}" >&2
echo "$stamp" >"$venv/.amk-stamp"
echo "$venv/bin/python"
