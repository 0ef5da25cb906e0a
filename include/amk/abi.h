/* AMK on-device ABI (IR_SPEC §8), version 0.11 (0.2 + the on-device decode fields of
 * amk_program_t in 0.3, + the task records in 0.4, + opcodes 23-24 and the attention flag bits
 * 3-4 in 0.5, + five profile stamps per task in 0.6, + ATTENTION_COMBINE's partial output
 * (flags bit 1) in 0.7, + the gated-unit GEMV tiles (opcodes 25-26) in 0.8, + opcode 27 and the
 * partial stacks in 0.9, + opcode 28 and a second output in 0.10, + the task record's flags in
 * 0.11; docs/CUDA_VM.md, docs/IR.md).
 *
 * The ONE header shared by host and device code. Plain C so nvcc, gcc and clang agree on every
 * byte: fixed-width fields, no pointers-to-member, no C++ types. The IR (include/amk/ir.h) mirrors
 * the enum codes and capacities below and checks them at compile time; a drift fails the build.
 *
 * Layout rules: every struct is POD and naturally aligned; the static asserts at the bottom pin
 * sizes and offsets so a change here is a deliberate ABI bump, never an accident. */
#ifndef AMK_ABI_H
#define AMK_ABI_H

#include <stddef.h>
#include <stdint.h>

#define AMK_ABI_VERSION_MAJOR 0
#define AMK_ABI_VERSION_MINOR 12
#define AMK_PROFILE_STAMPS 5 /* per instruction in amk_program_t.profile */

#define AMK_MAX_INPUTS 8
#define AMK_MAX_OUTPUTS 4
#define AMK_MAX_WAITS 8
#define AMK_MAX_RANK 4

#ifdef __cplusplus
extern "C" {
#endif

typedef enum amk_dtype_t {
  AMK_DTYPE_F32 = 0,
  AMK_DTYPE_F16 = 1,
  AMK_DTYPE_BF16 = 2,
  AMK_DTYPE_F8E4M3 = 3,
  AMK_DTYPE_F8E5M2 = 4,
  AMK_DTYPE_I32 = 5,
  AMK_DTYPE_I8 = 6,
  AMK_DTYPE_I4 = 7, /* packed 4-bit, two per byte */
  AMK_DTYPE_U8 = 8,
  AMK_DTYPE_BOOL = 9,
  AMK_DTYPE_COUNT = 10
} amk_dtype_t;

typedef enum amk_memspace_t {
  AMK_MEM_HBM = 0,
  AMK_MEM_GLOBAL_SCRATCH = 1,
  AMK_MEM_SMEM = 2,
  AMK_MEM_REGISTER = 3,
  AMK_MEM_COUNT = 4
} amk_memspace_t;

typedef enum amk_buffer_kind_t {
  AMK_BUF_WEIGHT = 0,
  AMK_BUF_ACTIVATION = 1,
  AMK_BUF_KV_CACHE = 2,
  AMK_BUF_IO_INPUT = 3,
  AMK_BUF_IO_OUTPUT = 4,
  AMK_BUF_CONST = 5,
  AMK_BUF_COUNT = 6
} amk_buffer_kind_t;

/* Opcodes. Append only; never renumber. */
typedef enum amk_opcode_t {
  AMK_OP_NOP = 0,
  AMK_OP_COPY = 1,
  AMK_OP_EMBED = 2,
  AMK_OP_RMSNORM = 3,
  AMK_OP_LAYERNORM = 4,
  AMK_OP_GEMV_TILE = 5,
  AMK_OP_GEMM_TILE = 6,
  AMK_OP_ATTENTION_TILE = 7,
  AMK_OP_ROPE = 8,
  AMK_OP_SILU_MUL = 9,
  AMK_OP_GELU = 10,
  AMK_OP_ADD = 11,
  AMK_OP_MUL = 12,
  AMK_OP_DEQUANT = 13,
  AMK_OP_SOFTMAX = 14,
  AMK_OP_ALLREDUCE_SHARD = 15,
  AMK_OP_KV_APPEND = 16,
  AMK_OP_SAMPLE_ARGMAX = 17,
  AMK_OP_ATTENTION_COMBINE = 18,
  AMK_OP_ROPE_FREQ = 19, /* ROPE with an explicit F32 inv_freq table (input 2) */
  /* Fused GEMV tiles (ScheduleConfig.fusion_grouping), docs/OPCODES.md */
  AMK_OP_RMSNORM_GEMV_TILE = 20,  /* [x, norm_w, W(, bias)]: RMSNORM(x) then GEMV_TILE */
  AMK_OP_SILU_MUL_GEMV_TILE = 21, /* [gate, up, W(, bias)]: SILU_MUL then GEMV_TILE */
  AMK_OP_GEMV_ADD_TILE = 22,      /* [x, W, residual(, bias)]: GEMV_TILE + residual tile */
  AMK_OP_SILU_MUL_GEMV_ADD_TILE = 23, /* [gate, up, W, residual(, bias)]: SILU_MUL, GEMV, + residual */
  /* [q, k, v, k_cache, v_cache(, q_norm_w, k_norm_w)(, inv_freq)] -> [out, k_cache, v_cache]:
     per-head RMSNORM, RoPE, the new KV row, then ATTENTION_TILE (docs/OPCODES.md) */
  AMK_OP_ROPE_KV_ATTENTION_TILE = 24,
  /* [x, W_gate, W_up(, b_gate, b_up)]: silu(x @ W_gate.T + b_gate) * (x @ W_up.T + b_up) over the
     tile's columns (docs/OPCODES.md) */
  AMK_OP_GEMV_GLU_TILE = 25,
  AMK_OP_RMSNORM_GEMV_GLU_TILE = 26, /* [x, norm_w, W_gate, W_up(, b_gate, b_up)]: RMSNORM first */
  AMK_OP_COMBINE_GEMV_ADD_TILE = 27, /* [parts, W, residual(, bias)]: ATTENTION_COMBINE first */
  /* [x, norm_w, W_gate, W_up, W_down(, b_gate, b_up, b_down)] -> [acc]: RMSNORM_GEMV_GLU_TILE's
     features a, then acc += a @ W_down[:, n_off:+N_tile].T, accumulated (docs/OPCODES.md) */
  AMK_OP_RMSNORM_GEMV_GLU_DOWN_TILE = 28,
  AMK_OP_COUNT = 29
} amk_opcode_t;

/* ATTENTION_TILE flag bits (params.flags). */
#define AMK_ATTN_FLAG_CAUSAL 1
#define AMK_ATTN_FLAG_PARTIAL 2 /* write the un-normalised flash partial [acc | m | l] */
#define AMK_ATTN_FLAG_RUNTIME_WINDOW 4 /* the window is clipped to the step's position */
#define AMK_ATTN_FLAG_HEAD_NORM 8      /* ROPE_KV_ATTENTION_TILE: per-head q/k RMSNORM first */
#define AMK_ATTN_FLAG_ROPE_TABLE 16    /* ROPE_KV_ATTENTION_TILE: inv_freq input (ROPE_FREQ) */

/* Counters are 32-bit and only ever incremented. */
typedef uint32_t amk_counter_t;

/* Marshalled task params: the int32 PARAM_FIELDS in spec order, then the floats. v0.12: kv_stride
 * (a strided attention window, amk/kv_window.h) and three words that keep a task record's
 * descriptors on a 16-byte vector boundary. */
typedef struct amk_params_t {
  int32_t K, N, M, N_tile, M_tile, n_off, m_off, hidden, vocab, head_dim, n_heads, n_kv_heads,
      kv_start, kv_len, pos, qdtype, flags, group, dim, kv_stride;
  float eps, scale, theta;
  int32_t reserved[3]; /* 0 */
} amk_params_t;

/* A buffer resolved by the host loader: ptr already offset for paged activations. */
typedef struct amk_buffer_t {
  void* ptr;
  int64_t numel;
  int32_t rank, dtype, space, pad;
  int64_t shape[AMK_MAX_RANK];
  int64_t stride[AMK_MAX_RANK]; /* element strides, row-major */
} amk_buffer_t;

/* One task == one instruction invocation on one SM. */
typedef struct amk_instruction_t {
  int32_t op, n_inputs, n_outputs, n_waits;
  int32_t inputs[AMK_MAX_INPUTS];
  int32_t outputs[AMK_MAX_OUTPUTS];
  int32_t wait_counter[AMK_MAX_WAITS];
  int32_t wait_threshold[AMK_MAX_WAITS];
  int32_t out_counter;
  int32_t sm;
  amk_params_t params;
} amk_instruction_t;

/* v0.4: one queue entry as a self-contained record, so a CTA stages a task (and prefetches the
 * next one while the current one runs) with ONE copy that depends on nothing, instead of the
 * chain queue -> instruction -> operand ids -> descriptors. task_records[q] is the task at
 * sm_queue[q]; desc holds its n_inputs input descriptors, then its n_outputs output
 * descriptors, packed. The copy covers the first n_vectors 16-byte vectors (header and the
 * used descriptors); next_vectors is the n_vectors of the record that runs next on this CTA
 * (the next queue entry, or the queue's first for the next step), so the prefetch knows how
 * much to copy before that record has arrived.
 * v0.11: flags. The loader checks a GEMV-family task's operands when it builds the record
 * (docs/CUDA_VM.md "Checked by the loader") and the device trusts them; AMK_RECORD_RING_TILE
 * says the tile's rows stream through the weight ring (the producer and the consumers read the
 * same bit, so they agree without exchanging anything). */
#define AMK_RECORD_RING_TILE 1
typedef struct amk_task_record_t {
  amk_instruction_t inst;
  int32_t index;        /* into instructions: the profile slot, the sink test */
  int32_t n_vectors;    /* 16-byte vectors of this record in use */
  int32_t next_vectors; /* n_vectors of the next record this CTA runs */
  int32_t flags;        /* AMK_RECORD_* bits (v0.11) */
  amk_buffer_t desc[AMK_MAX_INPUTS + AMK_MAX_OUTPUTS];
} amk_task_record_t;

/* The resolved program the persistent kernel walks. SM s runs
 * instructions[sm_queue[sm_queue_offset[s] .. sm_queue_offset[s+1])] in order. */
typedef struct amk_program_t {
  amk_buffer_t* buffers;
  amk_counter_t* counters;
  const amk_instruction_t* instructions;
  const int32_t* sm_queue_offset; /* n_sms + 1 entries */
  const int32_t* sm_queue;        /* n_instructions entries */
  void* scratch;
  int64_t scratch_bytes;
  volatile uint32_t* abort_flag; /* != 0: every CTA leaves its spin and exits */
  int32_t n_buffers, n_counters, n_instructions, n_sms;
  /* ---- v0.3: epoch thresholds and on-device decode (docs/CUDA_VM.md) ----
   * Counters are never reset between steps. Step e (e = epoch + s for the s-th step of this
   * launch) waits for counters[c] >= e * counter_step_increment[c] + wait_threshold, where
   * counter_step_increment[c] is the number of tasks signalling c in one step. */
  const uint32_t* counter_step_increment; /* n_counters entries */
  int32_t* token_history;    /* n_steps entries: next_token after each step; NULL: not recorded */
  uint32_t epoch;            /* steps completed since the counters were last zeroed */
  int32_t n_steps;           /* decode steps this launch runs back to back (>= 1) */
  int32_t pos_buffer;        /* I32 [1] buffer holding the step position; -1: none */
  int32_t next_token_buffer; /* I32 [1] buffer the sink writes; -1: none */
  int32_t sink_instruction;  /* index into instructions: every task happens-before it; its CTA
                                records token_history and advances *pos after it. -1: none
                                (then n_steps must be 1) */
  int32_t pad0;
  /* NULL, or AMK_PROFILE_STAMPS x n_instructions %globaltimer stamps (ns) of the launch's LAST
     step, written by each task's consumer thread 0: [wait begins, op begins, op ends, body
     begins, body ends] (amk bench --profile). Body: the span an op marks between its prologue
     and its epilogue (a GEMV tile's streaming after x is built; an attention tile's keys after
     its prologue); 0 where the op marks none. v0.6: 5 stamps (3 before). */
  uint64_t* profile;
  /* ---- v0.4 ---- */
  const amk_task_record_t* task_records; /* n_instructions entries, in sm_queue order */
} amk_program_t;

#ifdef __cplusplus
} /* extern "C" */
#define AMK_STATIC_ASSERT(c, m) static_assert(c, m)
#else
#define AMK_STATIC_ASSERT(c, m) _Static_assert(c, m)
#endif

AMK_STATIC_ASSERT(sizeof(amk_counter_t) == 4, "counters are uint32");
AMK_STATIC_ASSERT(sizeof(amk_params_t) == 104, "amk_params_t: 20 int32 + 3 float + 3 reserved");
AMK_STATIC_ASSERT(offsetof(amk_params_t, dim) == 72, "amk_params_t int32 order");
AMK_STATIC_ASSERT(offsetof(amk_params_t, kv_stride) == 76, "amk_params_t int32 order (v0.12)");
AMK_STATIC_ASSERT(offsetof(amk_params_t, eps) == 80, "amk_params_t floats follow ints");
AMK_STATIC_ASSERT(offsetof(amk_params_t, theta) == 88, "amk_params_t float order");
AMK_STATIC_ASSERT(sizeof(amk_buffer_t) == 96, "amk_buffer_t layout");
AMK_STATIC_ASSERT(offsetof(amk_buffer_t, numel) == 8, "amk_buffer_t.numel");
AMK_STATIC_ASSERT(offsetof(amk_buffer_t, rank) == 16, "amk_buffer_t.rank");
AMK_STATIC_ASSERT(offsetof(amk_buffer_t, shape) == 32, "amk_buffer_t.shape");
AMK_STATIC_ASSERT(offsetof(amk_buffer_t, stride) == 64, "amk_buffer_t.stride");
AMK_STATIC_ASSERT(offsetof(amk_instruction_t, inputs) == 16, "amk_instruction_t.inputs");
AMK_STATIC_ASSERT(offsetof(amk_instruction_t, outputs) == 48, "amk_instruction_t.outputs");
AMK_STATIC_ASSERT(offsetof(amk_instruction_t, wait_counter) == 64, "amk_instruction_t.wait_counter");
AMK_STATIC_ASSERT(offsetof(amk_instruction_t, wait_threshold) == 96,
                  "amk_instruction_t.wait_threshold");
AMK_STATIC_ASSERT(offsetof(amk_instruction_t, out_counter) == 128, "amk_instruction_t.out_counter");
AMK_STATIC_ASSERT(offsetof(amk_instruction_t, params) == 136, "amk_instruction_t.params");
AMK_STATIC_ASSERT(sizeof(amk_instruction_t) == 240, "amk_instruction_t layout");
AMK_STATIC_ASSERT(offsetof(amk_program_t, counter_step_increment) == 80,
                  "amk_program_t v0.3 fields follow the v0.2 ones");
AMK_STATIC_ASSERT(sizeof(amk_program_t) == 136, "amk_program_t layout");
AMK_STATIC_ASSERT(offsetof(amk_task_record_t, desc) == 256, "amk_task_record_t header");
AMK_STATIC_ASSERT(sizeof(amk_task_record_t) == 256 + 12 * 96, "amk_task_record_t layout");

#undef AMK_STATIC_ASSERT

#endif /* AMK_ABI_H */
