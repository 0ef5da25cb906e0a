#!/usr/bin/env bash
# Runs HERE (no GPU needed): the megakernel's resource report and SASS, read the way
# bench/RESULTS.md asks (16-byte loads, no local memory, no spills). The CUDA toolkit on the build
# machine has nvcc and ptxas but no disassembler, so this fetches NVIDIA's cuobjdump and nvdisasm
# wheels from PyPI once into the cache folder (nothing is committed) and reads the compiled object.
#
#   scripts/sass.sh [--object FILE] [--dump DIR] [--no-spills BUILDS]
#
#   --object FILE  a CUDA object or cubin (default: build/'s megakernel.cu.o; build it first)
#   --dump DIR     also write each kernel's SASS with source lines to DIR/KERNEL.sass
#   --no-spills BUILDS  fail (exit 3) when a megakernel build in this comma-separated list of
#                  consumer-thread counts (e.g. 224,256: the builds the derived configs run)
#                  spills a register. One spilled value, reloaded once a GEMV task, cost 1.2-2.5 %
#                  on the H200 (bench/RESULTS.md, forty-second session); the CTest
#                  megakernel_spills runs this on every build
#   SASS_TOP=N     (environment) list the N source lines with the most local-memory instructions
#                  per kernel (default 8)
#
# Prints, per kernel (one per consumer-thread build): registers, stack, instructions and text
# bytes; local-memory instructions, split into register spills (ptxas marks them SpillRefill) and
# local arrays; global loads by width; and the source lines of every local-memory instruction.
set -euo pipefail
cd "$(dirname "$0")/.."

object=build/CMakeFiles/amk_cuda.dir/src/vm/cuda/megakernel.cu.o
dump=""
no_spills=""
while (($#)); do
  case "$1" in
    --object) object="${2:?--object needs a file}"; shift 2 ;;
    --dump) dump="${2:?--dump needs a folder}"; shift 2 ;;
    --no-spills) no_spills="${2:?--no-spills needs builds, e.g. 224,256}"; shift 2 ;;
    *) echo "sass: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
[[ -z "$no_spills" || $no_spills =~ ^[0-9]+(,[0-9]+)*$ ]] ||
  { echo "sass: --no-spills takes consumer-thread counts like 224,256, not '$no_spills'" >&2; exit 2; }
top="${SASS_TOP:-8}"
[[ $top =~ ^[0-9]+$ ]] || { echo "sass: SASS_TOP must be a number, not '$top'" >&2; exit 2; }
[[ -f "$object" ]] || { echo "sass: no object '$object' (build the CUDA VM first)" >&2; exit 1; }
object="$(realpath "$object")"

tools="${AMK_CACHE_DIR:-$HOME/.cache/amk}/tools/cuda-binutils"
version=13.5.37
if [[ ! -f "$tools/.done-$version" ]]; then
  python="$(./scripts/pyenv.sh)"
  rm -rf "$tools" && mkdir -p "$tools"
  for pkg in nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm; do
    "$python" -m pip download -q --disable-pip-version-check --no-deps -d "$tools" "$pkg==$version" >&2
  done
  for whl in "$tools"/*.whl; do "$python" -m zipfile -e "$whl" "$tools/x" >&2; done
  chmod +x "$tools"/x/nvidia/cu*/bin/*
  touch "$tools/.done-$version"
fi
bin="$(dirname "$(ls "$tools"/x/nvidia/cu*/bin/nvdisasm)")"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
if [[ "$object" == *.cubin ]]; then
  cp "$object" "$work/k.cubin"
else
  (cd "$work" && "$bin/cuobjdump" -xelf all "$object" >/dev/null)
  cubins=("$work"/*.cubin)
  [[ -f "${cubins[0]}" ]] || { echo "sass: '$object' holds no cubin" >&2; exit 1; }
  mv "${cubins[0]}" "$work/k.cubin"
fi
"$bin/cuobjdump" -res-usage "$work/k.cubin" >"$work/res.txt"
"$bin/nvdisasm" -g -c "$work/k.cubin" >"$work/all.sass"
[[ -n "$dump" ]] && mkdir -p "$dump"

# One awk pass per kernel: its .text section runs from its label to the next kernel's.
spilling=()  # "build spills" of the --no-spills builds that spill
checked=0
mapfile -t kernels < <(grep -oE '^\.text\.[A-Za-z0-9_]+:' "$work/all.sass" | sed 's/^\.text\.//; s/:$//')
printf '%-34s %5s %6s %8s %9s %7s %7s %6s %6s %7s %6s\n' kernel regs stack instrs text_KB spills localarr LDG128 LDG64 'LDG<=32' LDGSTS
for k in "${kernels[@]}"; do
  awk -v k="$k" '$0 ~ "^\\.text\\."k":" {f=1; next} /^\.text\./ {f=0} f' "$work/all.sass" >"$work/k.sass"
  [[ -n "$dump" ]] && cp "$work/k.sass" "$dump/$k.sass"
  usage=$(grep -A1 "Function $k:" "$work/res.txt" | tail -1)
  regs=$(grep -oE 'REG:[0-9]+' <<<"$usage" | cut -d: -f2)
  stack=$(grep -oE 'STACK:[0-9]+' <<<"$usage" | cut -d: -f2)
  instrs=$(grep -cE '^\s+/\*[0-9a-f]{4,}\*/' "$work/k.sass" || true)
  spills=$(grep -E '\b(STL|LDL)' "$work/k.sass" | grep -c 'SpillRefill' || true)
  local_all=$(grep -cE '\b(STL|LDL)' "$work/k.sass" || true)
  ldg128=$(grep -cE '\bLDG\.[A-Z0-9.]*128' "$work/k.sass" || true)
  ldg64=$(grep -cE '\bLDG\.[A-Z0-9.]*64' "$work/k.sass" || true)
  ldg_all=$(grep -cE '\bLDG(\.|\s)' "$work/k.sass" || true)
  ldgsts=$(grep -cE '\bLDGSTS' "$work/k.sass" || true)
  name="$(c++filt "$k" 2>/dev/null | sed 's/(.*//; s/^amk::cuda:://')"
  printf '%-34s %5s %6s %8s %9s %7s %7s %6s %6s %7s %6s\n' "$name" "$regs" "$stack" "$instrs" \
    "$(awk -v n="$instrs" 'BEGIN {printf "%.1f", n * 16 / 1024}')" "$spills" \
    "$((local_all - spills))" "$ldg128" "$ldg64" "$((ldg_all - ldg128 - ldg64))" "$ldgsts"
  build=$(grep -oE 'amk_megakernel<[0-9]+>' <<<"$name" | grep -oE '[0-9]+' || true)
  if [[ -n "$build" && ",$no_spills," == *",$build,"* ]]; then
    checked=$((checked + 1))
    ((spills == 0)) || spilling+=("amk_megakernel<$build> spills $spills")
  fi
  awk '/\/\/## File/ {loc = $0} /[^A-Z](STL|LDL)[. ]/ {print loc (/SpillRefill/ ? " (spill)" : " (local array)")}' \
    "$work/k.sass" | sed -E 's/.*"([^"]*)", line ([0-9]+).*\((spill|local array)\)$/\1:\2 \3/; s|^.*/src/|src/|' |
    sort | uniq -c | sort -rn | awk -v top="$top" 'NR <= top {print "    " $0}'
done
if [[ -n "$no_spills" ]]; then
  expected=$(tr ',' '\n' <<<"$no_spills" | sort -u | wc -l)
  if ((checked != expected)); then
    echo "sass: --no-spills $no_spills: found $checked of those builds in $object" >&2
    exit 3
  fi
  if ((${#spilling[@]})); then
    printf 'sass: %s (spill instructions: ptxas SpillRefill; the lines above say where)\n' "${spilling[@]}" >&2
    exit 3
  fi
fi
