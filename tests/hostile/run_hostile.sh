#!/usr/bin/env bash
# Hostile-input battery (issue 10): hand-made programs and hostile inputs run against the built
# `amk`, each under a 20 s timeout and a 1 GiB address-space limit. Every case must end without a
# signal and without hanging, with the exit code it expects (validator verdicts: 0 accepted,
# 1 rejected, 2 unreadable; other refusals: any non-zero code) and a message that matches a
# pattern naming the problem. Inputs are made here, in a scratch folder, never in the repository.
#
# Usage: tests/hostile/run_hostile.sh AMK_BINARY [CASE_FILTER]
#   CASE_FILTER: an extended regex; only cases whose name matches it run.
# ctest runs it as `hostile_inputs` (CMakeLists.txt).
set -u

if [ $# -lt 1 ] || [ ! -x "$1" ]; then
  echo "usage: $0 AMK_BINARY [CASE_FILTER]" >&2
  exit 2
fi
AMK=$(readlink -f "$1")
FILTER=${2:-}
SRC=$(cd "$(dirname "$0")/../.." && pwd)
FIXTURE="$SRC/tests/data/fixtures/tiny-llama"
GGUF_SEED="$SRC/fuzz/corpus_gguf/tiny_llama_model.gguf"
WORK=$(mktemp -d "${TMPDIR:-/tmp}/amk-hostile.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$WORK/out"

TIME_LIMIT=20              # seconds per case
MEM_LIMIT_KB=$((1 << 20))  # 1 GiB of address space per case
CASES=0
FAILED=()

# ---- running a case -----------------------------------------------------------------------------

# The part of a case's output its pattern must match: all of it, except where a usage error is
# followed by the command's help, whose text would match anything: then the first two lines.
message_of() {
  if grep -Eq '^(Usage:|Positionals:|Options:)' "$1"; then head -n 2 "$1"; else cat "$1"; fi
}

# expect NAME CODE PATTERN [--stdin FILE] -- COMMAND...
#   CODE: the exit code the case must end with, or "nz" for any failure code (1..125).
#   PATTERN: an extended regex (case-insensitive) the command's stdout + stderr must match.
expect() {
  local name=$1 code=$2 pattern=$3
  shift 3
  local stdin=/dev/null
  if [ "$1" = --stdin ]; then
    stdin=$2
    shift 2
  fi
  [ "$1" = -- ] && shift
  if [ -n "$FILTER" ] && ! [[ $name =~ $FILTER ]]; then return 0; fi
  CASES=$((CASES + 1))
  local out="$WORK/out/$name.txt"
  (
    cd "$WORK" || exit 99
    ulimit -v "$MEM_LIMIT_KB"
    exec timeout -k 5 "$TIME_LIMIT" "$@"
  ) <"$stdin" >"$out" 2>&1
  local rc=$?
  local why=""
  if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
    why="hung: still running after ${TIME_LIMIT} s"
  elif [ $rc -ge 126 ]; then
    why="ended by signal $((rc - 128)) (exit $rc)"
  elif [ "$code" = nz ] && [ $rc -eq 0 ]; then
    why="exit 0, expected a failure"
  elif [ "$code" != nz ] && [ $rc -ne "$code" ]; then
    why="exit $rc, expected $code"
  elif ! message_of "$out" | grep -Eiq -- "$pattern"; then
    why="message does not match /$pattern/"
  elif [ "$(wc -c <"$out")" -gt 200000 ]; then
    why="$(wc -c <"$out") bytes of output (a message must be short)"
  fi
  if [ -n "$why" ]; then
    FAILED+=("$name")
    echo "FAIL $name: $why"
    echo "  command: $*"
    head -c 1500 "$out" | sed 's/^/  | /'
  else
    echo "ok   $name (exit $rc)"
  fi
}

# check NAME CONDITION...: an extra assertion after a case (e.g. an input left untouched).
check() {
  local name=$1
  shift
  if [ -n "$FILTER" ] && ! [[ $name =~ $FILTER ]]; then return 0; fi
  CASES=$((CASES + 1))
  if "$@"; then
    echo "ok   $name"
  else
    FAILED+=("$name")
    echo "FAIL $name: $*"
  fi
}

same_file() { cmp -s "$1" "$2"; }
fewer_lines() { [ "$(wc -l <"$WORK/out/$1.txt")" -lt "$2" ]; }
fewer_bytes() { [ "$(wc -c <"$WORK/out/$1.txt")" -lt "$2" ]; }

# ---- hand-made programs -------------------------------------------------------------------------
# B ID NAME KIND DTYPE SHAPE, C ID [INIT], W COUNTER THRESHOLD, T ID OP INPUTS OUTPUTS COUNTER
# WAITS PARAMS [EXTRA]: JSON records; prog FILE BUFFERS COUNTERS TASKS [TOP-LEVEL EXTRA].
B() { printf '{"id":%s,"name":"%s","kind":"%s","dtype":"%s","shape":%s}' "$@"; }
C() { printf '{"id":%s,"init":%s}' "$1" "${2:-0}"; }
W() { printf '{"counter":%s,"threshold":%s}' "$1" "$2"; }
T() {
  printf '{"id":%s,"op":"%s","inputs":%s,"outputs":%s,"out_counter":%s,"waits":[%s],"params":{%s}%s}' \
    "$1" "$2" "$3" "$4" "$5" "$6" "$7" "${8:-}"
}
prog() {
  printf '{"ir_version":"0.4.0","abi_version":"0.6","meta":{},"target":null,"buffers":[%s],"counters":[%s],"tasks":[%s]%s}\n' \
    "$2" "$3" "$4" "${5:-}" >"$WORK/$1"
}
validate() { expect "$1" "$2" "$3" -- "$AMK" validate "$WORK/$4"; }

X=$(B 0 x IO_INPUT F32 '[1,8]')
A=$(B 1 a ACTIVATION F32 '[1,8]')
BB=$(B 2 b ACTIVATION F32 '[1,8]')
Y=$(B 3 y IO_OUTPUT F32 '[1,8]')
Y2=$(B 2 y IO_OUTPUT F32 '[1,8]')
BUFS="$X,$A,$BB,$Y"
C4="$(C 0),$(C 1),$(C 2),$(C 3)"

# A straight chain x -> a -> y: the accepted baseline, also executed on the reference VM.
prog chain.json "$X,$A,$Y2" "$(C 0),$(C 1)" \
  "$(T 0 COPY '[0]' '[1]' 0 '' ''),$(T 1 COPY '[1]' '[2]' 1 "$(W 0 1)" '')"
validate prog_chain_accepted 0 'ACCEPTED|OK|valid' chain.json
expect exec_chain 0 'ok|y' -- "$AMK" exec "$WORK/chain.json" --seed 1
expect exec_without_seed_prints_it 0 'seed [0-9]+' -- "$AMK" exec "$WORK/chain.json"

# Ping-pong reuse A -> B -> A: the second writer of a is ordered after a's reader. Valid.
prog pingpong.json "$BUFS" "$C4" "$(T 0 COPY '[0]' '[1]' 0 '' ''),$(T 1 COPY '[1]' '[2]' 1 "$(W 0 1)" ''),$(T 2 COPY '[2]' '[1]' 2 "$(W 1 1)" ''),$(T 3 COPY '[1]' '[3]' 3 "$(W 2 1)" '')"
validate prog_pingpong_accepted 0 'ACCEPTED|OK|valid' pingpong.json
expect exec_pingpong 0 'ok|y' -- "$AMK" exec "$WORK/pingpong.json" --seed 2 --order random --runs 3
# ... and its racing twin: the second writer of a waits for nothing, so it races a's reader.
prog pingpong_race.json "$BUFS" "$C4" "$(T 0 COPY '[0]' '[1]' 0 '' ''),$(T 1 COPY '[1]' '[2]' 1 "$(W 0 1)" ''),$(T 2 COPY '[0]' '[1]' 2 '' ''),$(T 3 COPY '[1]' '[3]' 3 "$(W 2 1),$(W 1 1)" '')"
validate prog_pingpong_war_rejected 1 'race|unordered|not ordered' pingpong_race.json

# In-place accumulation COPY -> a, ADD(a, x) -> a, ADD(a, x) -> a, each ordered. Valid.
prog accumulate.json "$BUFS" "$C4" "$(T 0 COPY '[0]' '[1]' 0 '' ''),$(T 1 ADD '[1,0]' '[1]' 1 "$(W 0 1)" ''),$(T 2 ADD '[1,0]' '[1]' 2 "$(W 1 1)" ''),$(T 3 COPY '[1]' '[3]' 3 "$(W 2 1)" '')"
validate prog_accumulate_accepted 0 'ACCEPTED|OK|valid' accumulate.json
# ... an in-place ADD with no earlier writer reads uninitialized memory.
prog accumulate_uninit.json "$BUFS" "$(C 0),$(C 1)" "$(T 0 ADD '[1,0]' '[1]' 0 '' ''),$(T 1 COPY '[1]' '[3]' 1 "$(W 0 1)" '')"
validate prog_inplace_without_writer_rejected 1 'no writer|uninitiali|before it' accumulate_uninit.json
# ... a chain link that skips its predecessor: two ADDs unordered with each other.
prog accumulate_race.json "$BUFS" "$C4" "$(T 0 COPY '[0]' '[1]' 0 '' ''),$(T 1 ADD '[1,0]' '[1]' 1 "$(W 0 1)" ''),$(T 2 ADD '[1,0]' '[1]' 2 "$(W 0 1)" ''),$(T 3 COPY '[1]' '[3]' 3 "$(W 1 1),$(W 2 1)" '')"
validate prog_accumulate_race_rejected 1 'race|unordered|not ordered' accumulate_race.json

# Write-after-write: two unordered whole writers of a.
prog waw.json "$X,$A,$Y2" "$(C 0),$(C 1)" "$(T 0 COPY '[0]' '[1]' 0 '' ''),$(T 1 COPY '[0]' '[1]' 0 '' ''),$(T 2 COPY '[1]' '[2]' 1 "$(W 0 2)" '')"
validate prog_waw_rejected 1 'race|overlap|unordered|not ordered' waw.json
# Read before write: y's reader waits on nothing.
prog raw.json "$X,$A,$Y2" "$(C 0),$(C 1)" "$(T 0 COPY '[0]' '[1]' 0 '' ''),$(T 1 COPY '[1]' '[2]' 1 '' '')"
validate prog_read_unordered_rejected 1 'race|no writer|before it|unordered' raw.json

# GEMV tiles: disjoint columns under one counter are valid; overlapping ones race.
WT=$(B 1 w WEIGHT F32 '[8,8]')
OUT=$(B 2 out IO_OUTPUT F32 '[1,8]')
gemv() { T "$1" GEMV_TILE '[0,1]' '[2]' 0 '' "\"K\":${4:-8},\"N_tile\":$3,\"n_off\":$2"; }
prog gemv_disjoint.json "$X,$WT,$OUT" "$(C 0)" "$(gemv 0 0 4),$(gemv 1 4 4)"
validate prog_gemv_disjoint_tiles_accepted 0 'ACCEPTED|OK|valid' gemv_disjoint.json
prog gemv_overlap.json "$X,$WT,$OUT" "$(C 0)" "$(gemv 0 0 4),$(gemv 1 2 4)"
validate prog_gemv_overlapping_tiles_rejected 1 'overlap|race' gemv_overlap.json
prog gemv_gap.json "$X,$WT,$OUT,$(B 3 z IO_OUTPUT F32 '[1,8]')" "$(C 0),$(C 1)" "$(gemv 0 0 4),$(T 1 COPY '[2]' '[3]' 1 "$(W 0 1)" '')"
validate prog_gemv_partial_cover_then_read_rejected 1 'only part of it.*never written' gemv_gap.json
# Out-of-bounds params: a tile past the weight's rows, K that disagrees with x.
prog gemv_oob.json "$X,$WT,$OUT" "$(C 0)" "$(gemv 0 6 4)"
validate prog_gemv_tile_past_rows_rejected 1 'n_off|N_tile' gemv_oob.json
prog gemv_k.json "$X,$WT,$OUT" "$(C 0)" "$(gemv 0 0 8 16)"
validate prog_gemv_wrong_K_rejected 1 "'?K'?" gemv_k.json
prog gemv_huge.json "$X,$WT,$OUT" "$(C 0)" "$(gemv 0 2147483647 2147483647)"
validate prog_gemv_int32_max_offsets_rejected 1 'n_off|N_tile' gemv_huge.json
prog gemv_big_param.json "$X,$WT,$OUT" "$(C 0)" "$(gemv 0 0 8 1099511627776)"
validate prog_param_beyond_int32_rejected 1 'int32' gemv_big_param.json
prog gemv_string_param.json "$X,$WT,$OUT" "$(C 0)" "$(T 0 GEMV_TILE '[0,1]' '[2]' 0 '' '"K":"8","N_tile":8,"n_off":0')"
validate prog_param_string_rejected 1 'int32|K' gemv_string_param.json
prog gemv_nparam.json "$X,$WT,$OUT" "$(C 0)" "$(gemv 0 -4 4)"
validate prog_negative_n_off_rejected 1 'n_off' gemv_nparam.json

# GEMM tiles: a 2 x 2 grid of row x column tiles covers its output (valid); a tile past x's rows
# or at a negative row is out of bounds.
X2=$(B 0 x IO_INPUT F32 '[2,8]')
O2=$(B 2 out ACTIVATION F32 '[2,8]')
Z2=$(B 3 z IO_OUTPUT F32 '[2,8]')
gemm() { T "$1" GEMM_TILE '[0,1]' '[2]' 0 '' "\"K\":8,\"N_tile\":4,\"n_off\":$2,\"M_tile\":1,\"m_off\":$3"; }
prog gemm_grid.json "$X2,$WT,$O2,$Z2" "$(C 0),$(C 1)" "$(gemm 0 0 0),$(gemm 1 4 0),$(gemm 2 0 1),$(gemm 3 4 1),$(T 4 COPY '[2]' '[3]' 1 "$(W 0 4)" '')"
validate prog_gemm_tile_grid_accepted 0 'ACCEPTED|OK|valid' gemm_grid.json
prog gemm_rows.json "$X2,$WT,$O2,$Z2" "$(C 0),$(C 1)" "$(gemm 0 0 2),$(T 1 COPY '[2]' '[3]' 1 "$(W 0 1)" '')"
validate prog_gemm_tile_past_rows_rejected 1 'm_off' gemm_rows.json
prog gemm_neg.json "$X2,$WT,$O2,$Z2" "$(C 0),$(C 1)" "$(gemm 0 0 -1),$(T 1 COPY '[2]' '[3]' 1 "$(W 0 1)" '')"
validate prog_gemm_negative_m_off_rejected 1 'm_off' gemm_neg.json
prog gemv_tile0.json "$X,$WT,$OUT" "$(C 0)" "$(gemv 0 0 0)"
validate prog_gemv_N_tile_zero_rejected 1 'N_tile' gemv_tile0.json

# SAMPLE_ARGMAX partials: a range past the logits, a pairs row past the output.
LOG=$(B 0 logits IO_INPUT F32 '[1,16]')
PAIRS=$(B 1 pairs IO_OUTPUT F32 '[2,2]')
prog argmax_range.json "$LOG,$PAIRS" "$(C 0)" "$(T 0 SAMPLE_ARGMAX '[0]' '[1]' 0 '' '"n_off":8,"N_tile":16,"m_off":0')"
validate prog_argmax_partial_past_logits_rejected 1 'n_off' argmax_range.json
prog argmax_slot.json "$LOG,$PAIRS" "$(C 0)" "$(T 0 SAMPLE_ARGMAX '[0]' '[1]' 0 '' '"n_off":0,"N_tile":8,"m_off":5')"
validate prog_argmax_partial_row_past_pairs_rejected 1 'm_off' argmax_slot.json
# EMBED with a hidden that does not divide the table's rows.
prog embed.json "$(B 0 ids IO_INPUT I32 '[1]'),$(B 1 table WEIGHT F32 '[16,8]'),$(B 2 e IO_OUTPUT F32 '[1,8]')" "$(C 0)" \
  "$(T 0 EMBED '[0,1]' '[2]' 0 '' '"hidden":3')"
validate prog_embed_hidden_not_dividing_rejected 1 'hidden' embed.json

# ATTENTION_TILE: a negative window start, heads that disagree with q, a head range outside.
Q=$(B 0 q IO_INPUT F32 '[1,8]')
KC=$(B 1 k KV_CACHE F32 '[4,2,4]')
VC=$(B 2 v KV_CACHE F32 '[4,2,4]')
AO=$(B 3 o IO_OUTPUT F32 '[1,8]')
att() { T 0 ATTENTION_TILE '[0,1,2]' '[3]' 0 '' "\"head_dim\":4,\"n_kv_heads\":2,\"scale\":0.5,$1"; }
prog att_ok.json "$Q,$KC,$VC,$AO" "$(C 0)" "$(att '"n_heads":2,"kv_start":0,"kv_len":3')"
validate prog_attention_accepted 0 'ACCEPTED|OK|valid' att_ok.json
prog att_neg.json "$Q,$KC,$VC,$AO" "$(C 0)" "$(att '"n_heads":2,"kv_start":-2,"kv_len":3')"
validate prog_attention_negative_kv_start_rejected 1 'kv_start' att_neg.json
prog att_q.json "$Q,$KC,$VC,$AO" "$(C 0)" "$(att '"n_heads":4,"kv_start":0,"kv_len":3')"
validate prog_attention_heads_disagree_with_q_rejected 1 'q' att_q.json
prog att_range.json "$Q,$KC,$VC,$AO" "$(C 0)" "$(att '"n_heads":2,"kv_start":0,"kv_len":3,"n_off":1,"N_tile":4')"
validate prog_attention_head_range_outside_rejected 1 'head range' att_range.json
# A strided window (kv_stride): runs of kv_len keys every kv_stride positions. Accepted and run
# by the reference VM where the runs cannot overlap (a stride past the cache: one run);
# refused, naming kv_stride, where they would (stride < kv_len) or the stride is negative.
prog att_stride.json "$Q,$KC,$VC,$AO" "$(C 0)" "$(att '"n_heads":2,"kv_start":1,"kv_len":1,"kv_stride":2')"
validate prog_attention_strided_accepted 0 'ACCEPTED|OK|valid' att_stride.json
expect exec_attention_strided 0 'ok|o' -- "$AMK" exec "$WORK/att_stride.json" --seed 3
prog att_stride_huge.json "$Q,$KC,$VC,$AO" "$(C 0)" "$(att '"n_heads":2,"kv_start":0,"kv_len":3,"kv_stride":2147483647')"
expect exec_attention_stride_past_the_cache 0 'ok|o' -- "$AMK" exec "$WORK/att_stride_huge.json" --seed 3
prog att_stride_short.json "$Q,$KC,$VC,$AO" "$(C 0)" "$(att '"n_heads":2,"kv_start":0,"kv_len":3,"kv_stride":2')"
validate prog_attention_stride_shorter_than_its_run_rejected 1 'kv_stride 2' att_stride_short.json
prog att_stride_neg.json "$Q,$KC,$VC,$AO" "$(C 0)" "$(att '"n_heads":2,"kv_start":0,"kv_len":3,"kv_stride":-4')"
validate prog_attention_negative_stride_rejected 1 'kv_stride' att_stride_neg.json
# A head-ranged ATTENTION_COMBINE past its output.
prog combine.json "$(B 0 p0 IO_INPUT F32 '[12]'),$(B 1 p1 IO_INPUT F32 '[12]'),$(B 2 o IO_OUTPUT F32 '[1,8]')" "$(C 0)" \
  "$(T 0 ATTENTION_COMBINE '[0,1]' '[2]' 0 '' '"head_dim":4,"n_off":1,"N_tile":2')"
validate prog_combine_head_range_past_output_rejected 1 'head range' combine.json

# RMSNORM hidden that disagrees with x.
prog rms.json "$X,$(B 1 w WEIGHT F32 '[8]'),$OUT" "$(C 0)" "$(T 0 RMSNORM '[0,1]' '[2]' 0 '' '"eps":1e-5,"hidden":16')"
validate prog_rmsnorm_hidden_mismatch_rejected 1 'hidden' rms.json

# KV_APPEND: rows 0 and 1 of one cache under one counter are disjoint; the same row twice races;
# (an IR 0.4.0 file: its [max_seq, n_kv_heads, head_dim] cache is read as [2, 4, 4])
# a row past the cache is out of bounds.
NEW=$(B 0 new IO_INPUT F32 '[1,2,4]')
CACHE=$(B 1 cache KV_CACHE F32 '[4,2,4]')
kv() { T "$1" KV_APPEND '[0,1]' '[1]' 0 '' "\"head_dim\":4,\"n_kv_heads\":2,\"pos\":$2"; }
prog kv_rows.json "$NEW,$CACHE" "$(C 0)" "$(kv 0 0),$(kv 1 1)"
validate prog_kv_append_distinct_rows_accepted 0 'ACCEPTED|OK|valid' kv_rows.json
prog kv_same_row.json "$NEW,$CACHE" "$(C 0)" "$(kv 0 1),$(kv 1 1)"
validate prog_kv_append_same_row_rejected 1 'overlap|race' kv_same_row.json
prog kv_oob.json "$NEW,$CACHE" "$(C 0)" "$(kv 0 4)"
validate prog_kv_append_past_cache_rejected 1 'pos' kv_oob.json
prog kv_neg.json "$NEW,$CACHE" "$(C 0)" "$(kv 0 -1)"
validate prog_kv_append_negative_pos_rejected 1 'pos' kv_neg.json

# Deadlock: a wait on a counter nobody signals, a threshold above the producers, a cycle, a
# wait on the task's own counter, and two tasks queued on one SM in the wrong order.
prog never.json "$X,$A,$Y2" "$(C 0),$(C 1),$(C 2)" "$(T 0 COPY '[0]' '[1]' 0 "$(W 2 1)" ''),$(T 1 COPY '[1]' '[2]' 1 "$(W 0 1)" '')"
validate prog_counter_never_signalled_rejected 1 'no producer|never|deadlock' never.json
prog unreachable.json "$X,$A,$Y2" "$(C 0),$(C 1)" "$(T 0 COPY '[0]' '[1]' 0 '' ''),$(T 1 COPY '[1]' '[2]' 1 "$(W 0 2)" '')"
validate prog_threshold_unreachable_rejected 1 'threshold' unreachable.json
prog cycle.json "$X,$A,$BB,$Y" "$(C 0),$(C 1)" "$(T 0 COPY '[0]' '[1]' 0 "$(W 1 1)" ''),$(T 1 COPY '[1]' '[2]' 1 "$(W 0 1)" '')"
validate prog_cyclic_waits_rejected 1 'cycle' cycle.json
prog self.json "$X,$A" "$(C 0)" "$(T 0 COPY '[0]' '[1]' 0 "$(W 0 1)" '')"
validate prog_wait_on_own_counter_rejected 1 'own' self.json
prog smq.json "$X,$A,$Y2" "$(C 0),$(C 1)" "$(T 0 COPY '[1]' '[2]' 0 "$(W 1 1)" '' ',"sm":0'),$(T 1 COPY '[0]' '[1]' 1 '' '' ',"sm":0')"
validate prog_sm_queue_deadlock_rejected 1 'SM|deadlock|queue' smq.json
prog partial.json "$X,$WT,$OUT,$(B 3 z IO_OUTPUT F32 '[1,8]')" "$(C 0),$(C 1)" "$(gemv 0 0 4),$(gemv 1 4 4),$(T 2 COPY '[2]' '[3]' 1 "$(W 0 1)" '')"
validate prog_partial_wait_rejected 1 'partial' partial.json
prog zero_threshold.json "$X,$A,$Y" "$(C 0),$(C 1)" "$(T 0 COPY '[0]' '[1]' 0 '' ''),$(T 1 COPY '[1]' '[2]' 1 "$(W 0 0)" '')"
validate prog_threshold_zero_rejected 1 'threshold' zero_threshold.json

# Structure: ids, init, enums, references, shapes, read-only buffers, outputs, SMs, sizes.
prog init.json "$X,$A" "$(C 0 1)" "$(T 0 COPY '[0]' '[1]' 0 '' '')"
validate prog_counter_init_nonzero_rejected 1 'init' init.json
prog sparse_ids.json "$X,$(B 2 a ACTIVATION F32 '[1,8]')" "$(C 0)" "$(T 0 COPY '[0]' '[2]' 0 '' '')"
validate prog_sparse_buffer_ids_rejected 1 'id' sparse_ids.json
prog dup_task.json "$X,$A,$Y2" "$(C 0),$(C 1)" "$(T 0 COPY '[0]' '[1]' 0 '' ''),$(T 0 COPY '[1]' '[2]' 1 "$(W 0 1)" '')"
validate prog_duplicate_task_id_rejected 1 'id' dup_task.json
prog missing_buf.json "$X,$A" "$(C 0)" "$(T 0 COPY '[99]' '[1]' 0 '' '')"
validate prog_missing_buffer_rejected 1 'missing buffer' missing_buf.json
prog missing_ctr.json "$X,$A" "$(C 0)" "$(T 0 COPY '[0]' '[1]' 7 '' '')"
validate prog_missing_counter_rejected 1 'missing counter' missing_ctr.json
prog write_weight.json "$X,$(B 1 w WEIGHT F32 '[1,8]')" "$(C 0)" "$(T 0 COPY '[0]' '[1]' 0 '' '')"
validate prog_write_to_weight_rejected 1 'read-only' write_weight.json
prog no_output.json "$X,$A,$Y2" "$(C 0)" "$(T 0 COPY '[0]' '[1]' 0 '' '')"
validate prog_io_output_never_produced_rejected 1 'never produced' no_output.json
prog neg_dim.json "$(B 0 x IO_INPUT F32 '[-1]'),$A" "$(C 0)" "$(T 0 COPY '[0]' '[1]' 0 '' '')"
validate prog_negative_dimension_rejected 1 'negative' neg_dim.json
prog rank5.json "$(B 0 x IO_INPUT F32 '[1,1,1,1,8]'),$A" "$(C 0)" "$(T 0 COPY '[0]' '[1]' 0 '' '')"
validate prog_rank_5_rejected 1 'rank' rank5.json
prog arity.json "$X,$A" "$(C 0)" "$(T 0 ADD '[0]' '[1]' 0 '' '')"
validate prog_wrong_arity_rejected 1 'arity' arity.json
prog sm_range.json "$X,$A" "$(C 0)" "$(T 0 COPY '[0]' '[1]' 0 '' '' ',"sm":100000')" \
  ',"target":{"name":"t","sm_arch":90,"num_sms":4,"smem_bytes_per_sm":1,"smem_bytes_per_block_optin":1,"regs_per_sm":1,"max_threads_per_sm":1,"max_regs_per_thread":1,"l2_bytes":1,"hbm_bytes":1,"hbm_bandwidth_gbs":100,"fp16_tflops":1,"clock_ghz":1,"supports_cooperative":true,"wddm_tdr":false,"measured_bw_gbs":0,"note":""}'
# (the extra "target" key above is a duplicate of prog's own: refused before validation)
expect prog_duplicate_top_level_key_unreadable 2 'duplicate key' -- "$AMK" validate "$WORK/sm_range.json"
TGT='{"name":"t","sm_arch":90,"num_sms":4,"smem_bytes_per_sm":1,"smem_bytes_per_block_optin":1,"regs_per_sm":1,"max_threads_per_sm":1,"max_regs_per_thread":1,"l2_bytes":1,"hbm_bytes":1,"hbm_bandwidth_gbs":BW,"fp16_tflops":1,"clock_ghz":1,"supports_cooperative":true,"wddm_tdr":false,"measured_bw_gbs":0,"note":""}'
printf '{"target":%s,"buffers":[%s],"counters":[%s],"tasks":[%s]}\n' "${TGT/BW/100}" "$X,$A" "$(C 0)" \
  "$(T 0 COPY '[0]' '[1]' 0 '' '' ',"sm":100000')" >"$WORK/sm_range.json"
validate prog_sm_out_of_range_rejected 1 'SM' sm_range.json
printf '{"target":%s,"buffers":[%s],"counters":[%s],"tasks":[%s]}\n' "${TGT/BW/0}" "$X,$A" "$(C 0)" \
  "$(T 0 COPY '[0]' '[1]' 0 '' '')" >"$WORK/bw0.json"
validate prog_target_zero_bandwidth_rejected 1 'bandwidth' bw0.json
printf '{"target":%s,"buffers":[%s],"counters":[%s],"tasks":[%s]}\n' "${TGT/BW/-5}" "$X,$A" "$(C 0)" \
  "$(T 0 COPY '[0]' '[1]' 0 '' '')" >"$WORK/bwneg.json"
validate prog_target_negative_bandwidth_rejected 1 'bandwidth' bwneg.json
prog est_overflow.json "$X,$A,$Y" "$(C 0),$(C 1)" "$(T 0 COPY '[0]' '[1]' 0 '' '' ',"est_bytes":9223372036854775807'),$(T 1 COPY '[1]' '[2]' 1 "$(W 0 1)" '' ',"est_bytes":9223372036854775807')"
validate prog_est_bytes_overflow_rejected 1 'overflow' est_overflow.json
prog weight_overflow.json "$(B 0 w WEIGHT F32 '[4611686018427387904,4]'),$A" "$(C 0)" "$(T 0 COPY '[0]' '[1]' 0 '' '')"
validate prog_weight_bytes_overflow_rejected 1 'overflow' weight_overflow.json

# Many racing reads: the listing is capped and the rest counted.
{
  printf '{"buffers":[%s,%s,%s],"counters":[{"id":0},{"id":1}],"tasks":[' "$X" "$A" "$(B 2 y IO_OUTPUT F32 '[1,8]')"
  printf '%s' "$(T 0 COPY '[0]' '[1]' 0 '' '')"
  for i in $(seq 1 20000); do printf ',{"id":%d,"op":"COPY","inputs":[1],"outputs":[2],"out_counter":1}' "$i"; done
  printf ']}\n'
} >"$WORK/many_races.json"
validate prog_20000_races_listing_capped 1 'more' many_races.json
check prog_20000_races_output_short fewer_lines prog_20000_races_listing_capped 200

# ---- hostile program files ----------------------------------------------------------------------
printf '{"buffers":[{"id":0,"name":"x","kind":"IO_INPUT","dtype":"F32","shape":[1' >"$WORK/truncated.json"
validate json_truncated_unreadable 2 'syntax error' truncated.json
: >"$WORK/empty.json"
validate json_empty_unreadable 2 'empty' empty.json
printf '   \n\t  ' >"$WORK/blank.json"
validate json_whitespace_only_unreadable 2 'empty' blank.json
printf '[1,2,3]' >"$WORK/array.json"
validate json_top_level_array_unreadable 2 'expected an object' array.json
printf '%s' "$(printf '[%.0s' $(seq 1 100000))" >"$WORK/deep.json"
validate json_100000_deep_unreadable 2 'nesting deeper' deep.json
{ printf '{"meta":{"a":'; printf '{"b":%.0s' $(seq 1 70); printf '1'; printf '}%.0s' $(seq 1 70); printf '}}'; } >"$WORK/deep_meta.json"
validate json_deep_meta_unreadable 2 'nesting deeper' deep_meta.json
printf '{"meta":{"x":NaN}}' >"$WORK/nan.json"
validate json_nan_unreadable 2 'NaN' nan.json
printf '{"meta":{},"meta":{}}' >"$WORK/dup.json"
validate json_duplicate_key_unreadable 2 'duplicate key' dup.json
printf '{"meta":{"x":"\xff\xfe"}}' >"$WORK/utf8.json"
validate json_invalid_utf8_unreadable 2 'syntax error|UTF' utf8.json
printf '{"ir_version":"9.0.0"}' >"$WORK/major.json"
validate json_major_version_unreadable 2 'version' major.json
printf '{"ir_version":"zero"}' >"$WORK/version_text.json"
validate json_version_not_a_version_unreadable 2 'version' version_text.json
prog op_unknown.json "$X,$A" "$(C 0)" "$(T 0 GEMV_TIL '[0]' '[1]' 0 '' '')"
validate json_unknown_op_unreadable 2 'unknown op' op_unknown.json
printf '{"tasks":[{"id":0,"op":5,"inputs":[],"outputs":[],"out_counter":0}]}' >"$WORK/op_code.json"
validate json_op_as_number_unreadable 2 'op.*expected a string' op_code.json
prog kind.json "$(B 0 x WEIGHTS F32 '[1]')" "" ""
validate json_unknown_kind_unreadable 2 'unknown kind' kind.json
prog dtype.json "$(B 0 x IO_INPUT F64 '[1]')" "" ""
validate json_unknown_dtype_unreadable 2 'unknown dtype' dtype.json
prog space.json "$(B 0 x IO_INPUT F32 '[1]' | sed 's/}$/,"space":"L3"}/')" "" ""
validate json_unknown_space_unreadable 2 'space' space.json
printf '{"buffers":[{"id":18446744073709551616,"name":"x","kind":"IO_INPUT","dtype":"F32","shape":[1]}]}' >"$WORK/bigid.json"
validate json_id_beyond_int64_unreadable 2 'id' bigid.json
printf '{"buffers":[{"id":0,"name":"x","kind":"IO_INPUT","dtype":"F32","shape":[1e400]}]}' >"$WORK/bignum.json"
validate json_number_overflow_unreadable 2 'syntax error|number|overflow|range' bignum.json
printf '{"buffers":{"id":0}}' >"$WORK/buffers_object.json"
validate json_buffers_not_array_unreadable 2 'expected an array' buffers_object.json
printf '{"tasks":[{"id":0,"op":"COPY","inputs":[0],"outputs":[1],"out_counter":0,"waits":[{"counter":0}]}]}' >"$WORK/wait_field.json"
validate json_wait_missing_threshold_unreadable 2 'threshold' wait_field.json
{ printf '{"meta":{"x":['; printf '0,%.0s' $(seq 1 600000); printf '0]}}'; } >"$WORK/wide.json"
validate json_600000_values_in_meta 0 'ACCEPTED|OK|valid|no tasks|warning' wide.json
{ printf '{"meta":{"%s":1}}' "$(head -c 1048576 /dev/zero | tr '\0' k)"; } >"$WORK/longkey.json"
validate json_1MiB_key 0 '.' longkey.json
check json_1MiB_key_output_short fewer_bytes json_1MiB_key 20000
head -c 4096 /dev/urandom >"$WORK/random.bin"
validate json_random_bytes_unreadable 2 'syntax error|empty|UTF|expected' random.bin
truncate -s 300M "$WORK/huge.json"
validate json_300MiB_file_refused 2 'MiB|limit|bytes' huge.json
# Program inputs that are not regular files: no hang on a FIFO, no 1 GiB read of /dev/zero.
mkfifo "$WORK/fifo.json"
validate input_fifo_program 2 'FIFO|regular file' fifo.json
expect input_dev_zero_program 2 'device|regular file' -- "$AMK" validate /dev/zero
expect input_directory_program 2 'directory' -- "$AMK" validate "$WORK"
expect input_missing_program 2 'no such file' -- "$AMK" validate "$WORK/nope.json"
expect input_stdin_program 0 'ACCEPTED|OK|valid' --stdin "$WORK/chain.json" -- "$AMK" validate -
expect input_stdin_garbage 2 'syntax error' --stdin "$WORK/random.bin" -- "$AMK" validate -
expect exec_fifo_program nz 'FIFO|regular file' -- "$AMK" exec "$WORK/fifo.json"
expect info_dev_zero_program nz 'device|regular file' -- "$AMK" info /dev/zero
expect exec_rejected_program nz 'race|no writer|before it|unordered|reject' -- "$AMK" exec "$WORK/raw.json"

# ---- exec options -------------------------------------------------------------------------------
expect exec_pos_negative nz 'pos' -- "$AMK" exec "$WORK/chain.json" --pos -1
expect exec_pos_nan nz 'pos' -- "$AMK" exec "$WORK/chain.json" --pos nan
expect exec_pos_huge nz 'pos' -- "$AMK" exec "$WORK/chain.json" --pos 99999999999999
expect exec_seed_negative nz 'seed' -- "$AMK" exec "$WORK/chain.json" --seed -1
expect exec_seed_2_64 nz 'seed' -- "$AMK" exec "$WORK/chain.json" --seed 18446744073709551616
expect exec_timeout_nan nz 'timeout' -- "$AMK" exec "$WORK/chain.json" --timeout nan
expect exec_timeout_negative nz 'timeout' -- "$AMK" exec "$WORK/chain.json" --timeout -1
expect exec_runs_zero nz 'runs' -- "$AMK" exec "$WORK/chain.json" --runs 0
expect exec_order_bogus nz 'order' -- "$AMK" exec "$WORK/chain.json" --order sideways

# ---- model folders: config.json and the checkpoint ----------------------------------------------
model() {  # model NAME: a fresh copy of the tiny Llama fixture
  rm -rf "${WORK:?}/$1"
  mkdir -p "$WORK/$1"
  cp "$FIXTURE/config.json" "$FIXTURE/model.safetensors" "$WORK/$1/"
}
config_case() {  # config_case NAME SED-EXPRESSION PATTERN: a config.json edit compile must refuse
  model "$1"
  sed -i -E "$2" "$WORK/$1/config.json"
  expect "config_$1" nz "$3" -- "$AMK" compile "$WORK/$1" -o "$WORK/$1.json"
}
config_case kv_heads_zero 's/"num_key_value_heads": 2/"num_key_value_heads": 0/' 'num_key_value_heads'
config_case kv_heads_negative 's/"num_key_value_heads": 2/"num_key_value_heads": -2/' 'num_key_value_heads'
config_case kv_heads_not_divisor 's/"num_key_value_heads": 2/"num_key_value_heads": 3/' 'num_key_value_heads'
config_case heads_zero 's/"num_attention_heads": 4/"num_attention_heads": 0/' 'num_attention_heads'
config_case hidden_zero 's/"hidden_size": 64/"hidden_size": 0/' 'hidden_size'
config_case hidden_huge 's/"hidden_size": 64/"hidden_size": 1e30/' 'hidden_size'
config_case head_dim_zero 's/"head_dim": 16/"head_dim": 0/' 'head_dim'
config_case head_dim_odd 's/"head_dim": 16/"head_dim": 15/' 'head_dim'
config_case vocab_zero 's/"vocab_size": 256/"vocab_size": 0/' 'vocab_size'
config_case vocab_string 's/"vocab_size": 256/"vocab_size": "256"/' 'vocab_size'
config_case intermediate_zero 's/"intermediate_size": 160/"intermediate_size": 0/' 'intermediate_size'
config_case layers_fewer 's/"num_hidden_layers": 2/"num_hidden_layers": 1/' 'num_hidden_layers'
config_case layers_million 's/"num_hidden_layers": 2/"num_hidden_layers": 1000000/' 'num_hidden_layers'
config_case layers_null 's/"num_hidden_layers": 2/"num_hidden_layers": null/' 'num_hidden_layers'
config_case eps_negative 's/"rms_norm_eps": 1e-05/"rms_norm_eps": -1e-05/' 'rms_norm_eps'
config_case theta_zero 's/"rope_theta": 10000.0/"rope_theta": 0/' 'rope_theta'
config_case theta_nan 's/"rope_theta": 10000.0/"rope_theta": NaN/' 'config.json'
config_case max_pos_zero 's/"max_position_embeddings": 512/"max_position_embeddings": 0/' 'max_position_embeddings'
config_case rope_scaling_bogus 's/"rope_scaling": null/"rope_scaling": {"rope_type": "warp", "factor": 2}/' 'rope'
config_case model_type_unknown 's/"model_type": "llama"/"model_type": "gpt9"/' 'model_type|gpt9|architecture'
config_case config_truncated '$d' 'config.json'
config_case config_array 's/^\{/[/; s/^\}/]/' 'config.json'
model config_dir && rm "$WORK/config_dir/config.json" && mkdir "$WORK/config_dir/config.json"
expect config_is_directory nz 'config.json|directory' -- "$AMK" compile "$WORK/config_dir" -o "$WORK/x.json"
model config_fifo && rm "$WORK/config_fifo/config.json" && mkfifo "$WORK/config_fifo/config.json"
expect config_is_fifo nz 'config.json|FIFO|regular' -- "$AMK" compile "$WORK/config_fifo" -o "$WORK/x.json"
model config_missing && rm "$WORK/config_missing/config.json"
expect config_missing nz 'config.json' -- "$AMK" compile "$WORK/config_missing" -o "$WORK/x.json"

# safetensors corruptions.
st_case() {  # st_case NAME PATTERN: compile must refuse $WORK/NAME as prepared by the caller
  expect "safetensors_$1" nz "$2" -- "$AMK" compile "$WORK/$1" -o "$WORK/$1.json"
}
model st_truncated && truncate -s 100000 "$WORK/st_truncated/model.safetensors"
st_case st_truncated 'safetensors|truncated|past the end|bytes'
model st_header_only && truncate -s 2000 "$WORK/st_header_only/model.safetensors"
st_case st_header_only 'safetensors|header|bytes'
model st_huge_len && printf '\xff\xff\xff\xff\xff\xff\xff\x7f' | dd of="$WORK/st_huge_len/model.safetensors" conv=notrunc status=none
st_case st_huge_len 'safetensors|header'
model st_not_json && printf 'XXXX' | dd of="$WORK/st_not_json/model.safetensors" bs=1 seek=8 conv=notrunc status=none
st_case st_not_json 'safetensors|JSON|header'
model st_dtype && sed -i '1s/"F32"/"F99"/' "$WORK/st_dtype/model.safetensors"
st_case st_dtype 'dtype|F99'
model st_offsets && sed -i -E '1s/"data_offsets":\[0,/"data_offsets":[9,/' "$WORK/st_offsets/model.safetensors"
st_case st_offsets 'offset|bytes|size'
model st_empty && : >"$WORK/st_empty/model.safetensors"
st_case st_empty 'safetensors|bytes|empty|short'
model st_fifo && rm "$WORK/st_fifo/model.safetensors" && mkfifo "$WORK/st_fifo/model.safetensors"
st_case st_fifo 'FIFO|regular'
model st_zero && rm "$WORK/st_zero/model.safetensors" && ln -s /dev/zero "$WORK/st_zero/model.safetensors"
st_case st_zero 'device|regular'
model st_missing && rm "$WORK/st_missing/model.safetensors"
st_case st_missing 'safetensors|no .*checkpoint|weights|not found|no such'

# GGUF corruptions (from the fuzz seed, a one-layer llama).
cp "$GGUF_SEED" "$WORK/ok.gguf"
expect gguf_seed_accepted 0 '.' -- "$AMK" compile "$WORK/ok.gguf" -o "$WORK/ok_gguf.json"
cp "$GGUF_SEED" "$WORK/magic.gguf" && printf 'GGUX' | dd of="$WORK/magic.gguf" conv=notrunc status=none
expect gguf_bad_magic nz 'magic|GGUF' -- "$AMK" compile "$WORK/magic.gguf" -o "$WORK/g.json"
head -c 700 "$GGUF_SEED" >"$WORK/trunc.gguf"
expect gguf_truncated nz 'GGUF|truncated|end|bytes' -- "$AMK" compile "$WORK/trunc.gguf" -o "$WORK/g.json"
cp "$GGUF_SEED" "$WORK/count.gguf" && printf '\xff\xff\xff\xff\xff\xff\xff\x7f' | dd of="$WORK/count.gguf" bs=1 seek=8 conv=notrunc status=none
expect gguf_huge_tensor_count nz 'GGUF|tensor|count' -- "$AMK" compile "$WORK/count.gguf" -o "$WORK/g.json"
cp "$GGUF_SEED" "$WORK/kvcount.gguf" && printf '\xff\xff\xff\xff\xff\xff\xff\x7f' | dd of="$WORK/kvcount.gguf" bs=1 seek=16 conv=notrunc status=none
expect gguf_huge_metadata_count nz 'GGUF|metadata|count|key' -- "$AMK" compile "$WORK/kvcount.gguf" -o "$WORK/g.json"
cp "$GGUF_SEED" "$WORK/version.gguf" && printf '\x09\x00\x00\x00' | dd of="$WORK/version.gguf" bs=1 seek=4 conv=notrunc status=none
expect gguf_unknown_version nz 'version' -- "$AMK" compile "$WORK/version.gguf" -o "$WORK/g.json"
ln -s /dev/zero "$WORK/zero.gguf"
expect gguf_dev_zero nz 'device|regular' -- "$AMK" compile "$WORK/zero.gguf" -o "$WORK/g.json"
mkfifo "$WORK/fifo.gguf"
expect gguf_fifo nz 'FIFO|regular' -- "$AMK" run "$WORK/fifo.gguf" --prompt-ids 1 -n 1

# ---- model command options ----------------------------------------------------------------------
model m
expect run_n_negative nz '^amk: -n: .*-1' -- "$AMK" run "$WORK/m" --prompt-ids 1 -n -1
expect run_n_nan nz '^amk: -n: .*nan' -- "$AMK" run "$WORK/m" --prompt-ids 1 -n nan
expect run_n_huge nz 'max_position_embeddings 512' -- "$AMK" run "$WORK/m" --prompt-ids 1 -n 1048576
expect run_prompt_past_context nz '600 tokens.*max_position_embeddings' -- "$AMK" run "$WORK/m" --prompt-ids "$(seq -s, 1 600 | sed 's/[0-9]*/1/g')" -n 1
expect run_prompt_id_past_vocab nz 'vocab|256|token' -- "$AMK" run "$WORK/m" --prompt-ids 999999 -n 1
expect run_prompt_ids_garbage nz 'prompt-ids' -- "$AMK" run "$WORK/m" --prompt-ids 1,,x -n 1
expect run_device_bogus nz 'device' -- "$AMK" run "$WORK/m" --prompt-ids 1 -n 1 --device tpu
expect oracle_tolerance_nan nz '^amk: --tolerance' -- "$AMK" oracle "$WORK/m" --expected "$FIXTURE/expected.safetensors" --tolerance nan
expect oracle_tolerance_negative nz '^amk: --tolerance' -- "$AMK" oracle "$WORK/m" --expected "$FIXTURE/expected.safetensors" --tolerance -1
expect oracle_timeout_nan nz '^amk: --timeout' -- "$AMK" oracle "$WORK/m" --expected "$FIXTURE/expected.safetensors" --timeout nan
expect oracle_fixture_passes 0 'PASS|ok' -- "$AMK" oracle "$WORK/m" --expected "$FIXTURE/expected.safetensors"
# Non-finite values are a failure: NaN weights (4 KiB of NaN over the start of the data), NaN
# expected logits.
nan_fill() {  # nan_fill FILE OFFSET: 1024 F32 NaNs at OFFSET
  head -c 4096 /dev/zero | tr '\0' '\377' | dd of="$1" bs=1 seek="$2" conv=notrunc status=none
}
model nan_weights
nan_fill "$WORK/nan_weights/model.safetensors" 4096
expect oracle_nan_weights 1 'FAIL|non-finite|NaN' -- "$AMK" oracle "$WORK/nan_weights" --expected "$FIXTURE/expected.safetensors"
expect run_nan_weights 1 'non-finite|NaN' -- "$AMK" run "$WORK/nan_weights" --prompt-ids 1,2 -n 2
mkdir -p "$WORK/nan_expected" && cp "$FIXTURE/expected.safetensors" "$WORK/nan_expected/"
nan_fill "$WORK/nan_expected/expected.safetensors" 20000
expect oracle_nan_expected_logits 1 'FAIL|non-finite|NaN' -- "$AMK" oracle "$WORK/m" --expected "$WORK/nan_expected/expected.safetensors"
expect compile_unknown_gpu nz 'gpu|target|xyz9000' -- "$AMK" compile "$WORK/m" --gpu xyz9000 -o "$WORK/m.json"
# Schedule configs: {} means defaults, an unknown key is a warning, bad values name the key.
echo '{}' >"$WORK/cfg_empty.json"
expect compile_config_empty_is_defaults 0 '.' -- "$AMK" compile "$WORK/m" --config "$WORK/cfg_empty.json" -o "$WORK/m_empty.json"
echo '{"no_such_knob": 1}' >"$WORK/cfg_unknown.json"
expect compile_config_unknown_key_warns 0 'no_such_knob' -- "$AMK" compile "$WORK/m" --config "$WORK/cfg_unknown.json" -o "$WORK/m_unknown.json"
echo '{"pipelining_depth": -1}' >"$WORK/cfg_depth.json"
expect compile_config_negative_depth nz 'pipelining_depth' -- "$AMK" compile "$WORK/m" --config "$WORK/cfg_depth.json" -o "$WORK/m_depth.json"
echo '{"threads_per_block": "many"}' >"$WORK/cfg_threads.json"
expect compile_config_threads_string nz 'threads_per_block' -- "$AMK" compile "$WORK/m" --config "$WORK/cfg_threads.json" -o "$WORK/m_threads.json"
echo '[1,2]' >"$WORK/cfg_array.json"
expect compile_config_array nz 'config|object' -- "$AMK" compile "$WORK/m" --config "$WORK/cfg_array.json" -o "$WORK/m_array.json"
expect compile_config_fifo nz 'FIFO|regular' -- "$AMK" compile "$WORK/m" --config "$WORK/fifo.json" -o "$WORK/m_fifo.json"
expect compile_config_dev_zero nz 'device|regular' -- "$AMK" compile "$WORK/m" --config /dev/zero -o "$WORK/m_zero.json"
# A compiled decode program can be executed, given its step position.
expect compile_then_exec 0 '.' -- "$AMK" exec "$WORK/m_empty.json" --pos 3 --seed 1
expect exec_compiled_pos_past_cache nz 'pos' -- "$AMK" exec "$WORK/m_empty.json" --pos 100000 --seed 1
# Never write over an input; never fill a non-empty folder without --force.
cp "$WORK/m/config.json" "$WORK/config.before"
expect compile_output_over_config nz 'input|overwrite|config.json' -- "$AMK" compile "$WORK/m" -o "$WORK/m/config.json"
check compile_output_over_config_left_input same_file "$WORK/m/config.json" "$WORK/config.before"
cp "$WORK/m/model.safetensors" "$WORK/st.before"
expect make_model_over_checkpoint nz 'force|not empty|exists' -- "$AMK" make-model --preset tiny -o "$WORK/m" --seed 1
check make_model_over_checkpoint_left_input same_file "$WORK/m/model.safetensors" "$WORK/st.before"
expect make_model_seed_negative nz 'seed' -- "$AMK" make-model --preset tiny -o "$WORK/new_model" --seed -1
expect make_model_unknown_preset nz 'preset' -- "$AMK" make-model --preset gpt-17 -o "$WORK/new_model2"
expect make_model_dtype_bogus nz 'dtype' -- "$AMK" make-model --preset tiny --dtype f7 -o "$WORK/new_model3"

# ---- the rest of the command line ---------------------------------------------------------------
expect cli_version 0 'IR [0-9.]+, ABI [0-9.]+' -- "$AMK" --version
expect cli_version_says_cuda 0 'CUDA' -- "$AMK" --version
expect cli_unknown_command nz 'frobnicate|subcommand|extra|expected' -- "$AMK" frobnicate
expect cli_no_arguments nz 'subcommand|usage|command' -- "$AMK"
expect bench_no_gpu nz 'GPU|CUDA|driver' -- "$AMK" bench "$WORK/m"
expect bench_no_gpu_before_inputs nz 'GPU|CUDA|driver' -- "$AMK" bench "$WORK/no_such_model"
printf '{"model":{"type":"BPE","vocab":{"a":0},"merges":[["a","b","c"]]}}' >"$WORK/tokenizer_bad.json"
expect tokenize_bad_tokenizer nz 'merge|tokenizer' -- "$AMK" tokenize "$WORK/tokenizer_bad.json" -p hello
printf '{%% for i in range(100000000) %%}{%% for j in range(100000000) %%}x{%% endfor %%}{%% endfor %%}' >"$WORK/loop.jinja"
echo '[{"role":"user","content":"hi"}]' >"$WORK/messages.json"
expect template_endless_loop nz 'limit|iteration|loop|output' -- "$AMK" template "$WORK/loop.jinja" --messages "$WORK/messages.json"

# ---- summary ------------------------------------------------------------------------------------
echo
if [ ${#FAILED[@]} -gt 0 ]; then
  echo "${#FAILED[@]} of $CASES hostile-input cases FAILED: ${FAILED[*]}"
  exit 1
fi
echo "all $CASES hostile-input cases passed"
