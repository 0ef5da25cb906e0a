#!/usr/bin/env bash
# scripts/sass.sh --no-spills on the built megakernel object (the CTest megakernel_spills):
#  1. the builds the derived configs run (224 and 256 consumer threads) spill no register: one
#     spilled value cost 1.2-2.5 % a token on the H200 (bench/RESULTS.md, forty-second session);
#  2. the check can fail: the 512 build (96 registers a thread, never derived) spills, and
#     --no-spills 512 must refuse it; a build the object does not hold is refused too.
#
#   tests/scripts/test_sass_spills.sh OBJECT...   (CMake's $<TARGET_OBJECTS:amk_cuda>: the one
#                                                 named megakernel.cu.o is read)
set -u
object=""
for o in "$@"; do [[ $(basename "$o") == megakernel.cu.o ]] && object="$o"; done
if [[ -z "$object" ]]; then
  echo "FAIL: no megakernel.cu.o among the objects given: $*"
  exit 1
fi
sass="$(dirname "$0")/../../scripts/sass.sh"
fail=0

out=$(SASS_TOP=0 bash "$sass" --object "$object" --no-spills 224,256 2>&1)
rc=$?
echo "$out"
if [[ $rc != 0 ]]; then
  echo "FAIL: --no-spills 224,256 exited $rc: a shipped build spills (the lines above say where)"
  fail=1
fi

# refused BUILDS RC TEXT WHY: --no-spills BUILDS must exit RC with TEXT in its output.
refused() {
  local out rc
  out=$(SASS_TOP=0 bash "$sass" --object "$object" --no-spills "$1" 2>&1)
  rc=$?
  if [[ $rc != "$2" || $out != *"$3"* ]]; then
    echo "FAIL: --no-spills $1 exited $rc, not $2 with '$3' ($4):"
    echo "$out"
    fail=1
  fi
}
refused 512 3 "amk_megakernel<512> spills" "the 512 build spills; if it ever stops, name another that does, so \
this test keeps proving the check can fail"
refused 128 3 "found 0 of those builds" "no such build"
refused two 2 "--no-spills takes" "a bad argument"

((fail == 0)) && echo "PASS: the 224 and 256 builds spill nothing; the check refuses a spilling build"
exit $fail
