#!/usr/bin/env bash
# Installs what AMK builds with, from Debian's packages. Idempotent: does nothing when all are
# present. `--fuzz` adds clang and its libFuzzer runtime (the fuzzers are not part of CI).
set -euo pipefail

packages=(cmake ninja-build g++ nlohmann-json3-dev libcli11-dev libfmt-dev libgtest-dev
          libbenchmark-dev libpcre2-dev libutf8proc-dev libcpp-httplib-dev pkgconf python3-venv curl)
if [[ "${1:-}" == "--fuzz" ]]; then packages+=(clang libclang-rt-14-dev); fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]} == 0)); then exit 0; fi

echo "setup: installing ${missing[*]}"
sudo_cmd=()
if [[ $(id -u) -ne 0 ]]; then sudo_cmd=(sudo); fi
"${sudo_cmd[@]}" apt-get update -qq
DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq "${missing[@]}" >/dev/null
