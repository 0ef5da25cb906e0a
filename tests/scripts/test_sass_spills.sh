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

out=$(SASS_TOP=0 bash "$sass" --object "$object" --no-spills 512 2>&1)
rc=$?
if [[ $rc != 3 || $out != *"amk_megakernel<512> spills"* ]]; then
  echo "FAIL: --no-spills 512 exited $rc without naming the 512 build's spills (if that build"
  echo "      stopped spilling, pick another that does, so this check keeps proving it can fail):"
  echo "$out"
  fail=1
fi

out=$(SASS_TOP=0 bash "$sass" --object "$object" --no-spills 128 2>&1)
rc=$?
if [[ $rc != 3 || $out != *"found 0 of those builds"* ]]; then
  echo "FAIL: --no-spills 128 (no such build) exited $rc: $out"
  fail=1
fi

out=$(bash "$sass" --object "$object" --no-spills 'two' 2>&1)
rc=$?
if [[ $rc != 2 ]]; then
  echo "FAIL: --no-spills two exited $rc, not 2 (a bad argument): $out"
  fail=1
fi

((fail == 0)) && echo "PASS: the 224 and 256 builds spill nothing; the check refuses a spilling build"
exit $fail
