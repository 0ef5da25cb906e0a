// A picture of one decode step from the CUDA VM's per-task %globaltimer stamps (amk bench
// --trace): a Chrome / Perfetto trace with one track per SM, and a per-level table of one layer
// (bytes, bandwidth floor, measured span, achieved GB/s, exposed latency).
//
// Input: the lowered Program (task labels, est_bytes, the SM each task runs on) and one
// TaskStamps per task in list order (CudaVM::last_profile(), converted field by field).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "amk/ir.h"

namespace amk::eval {

// One task's stamps, in ns of %globaltimer: waiting for its inputs begins, the op begins, the op
// ends (signalled). op_end == 0: the task did not run (it is left out of everything below).
// body_begin / body_end: where the op marks its body (the GEMV tiles' weight stream, the
// attention's block walk), 0 where it marks none.
struct TaskStamps {
  uint64_t wait_begin = 0, op_begin = 0, op_end = 0;
  uint64_t body_begin = 0, body_end = 0;
  // The op marked a body, inside the op: op_begin <= body_begin <= body_end <= op_end. The one
  // rule for every per-body figure (the trace's pre / body / epi, the simulator fit's body).
  bool marks_body() const {
    return body_begin != 0 && body_end != 0 && op_begin <= body_begin &&
           body_begin <= body_end && body_end <= op_end;
  }
};

// A task label split into its layer and stage: "L8.q_proj[t3]" -> {8, "q_proj"},
// "L8.attention[h0][kv5]" -> {8, "attention"}, "layers.2.k_proj" -> {2, "k_proj"},
// "lm_head[t4]" -> {nullopt, "lm_head"}. The stage is whatever follows the layer prefix, up to
// the first '[' (the tile / head / KV-block suffixes), so new stage names need no code here.
struct LabelParts {
  std::optional<int64_t> layer;
  std::string stage;
};
LabelParts parse_label(std::string_view label);

// Layers named by the program's labels: 1 + the largest layer index (0 when none is named).
int64_t layer_count(const Program& program);

// The trace as Chrome's JSON object format ({"traceEvents": [...], "displayTimeUnit": "ns"}),
// loadable in ui.perfetto.dev or chrome://tracing. Process 0 is the step; thread (tid) n is SM n
// with a "thread_name" metadata event "SM n" for every SM that ran a task. Each task that ran is
// one complete event ("ph": "X", cat "task") from op begin to op end named "<stage> L<layer>"
// (or the stage for a task outside the layers) with args {task, label, op, layer, bytes,
// wait_us}; with `waits`, a task that waited also gets a "wait" event (cat "wait") from wait
// begin to op begin on its SM. Times are µs (fractional) from the step's earliest stamp.
// Throws std::invalid_argument when `stamps` does not have one entry per task.
std::string chrome_trace_json(const Program& program, const std::vector<TaskStamps>& stamps,
                              bool waits = true);
// chrome_trace_json written to `path`; throws std::runtime_error when it cannot be written.
void write_chrome_trace(const std::string& path, const Program& program,
                        const std::vector<TaskStamps>& stamps, bool waits = true);

// One level of a layer: its tasks of one stage. Times in µs from the step's earliest stamp.
struct LevelRow {
  std::string stage;        // "q_proj", "attention", ...; "total" for the layer's row
  int64_t tasks = 0;
  int64_t bytes = 0;        // sum of est_bytes
  double floor_us = 0;      // bytes / ceiling (NaN when the ceiling is unknown)
  double start_us = 0;      // earliest op begin
  double end_us = 0;        // latest op end
  double span_us = 0;       // end_us - start_us: the measured time of the level
  double from_prev_us = 0;  // end_us - the previous level's end_us (levels in start order; the
                            // first level's and the total's previous end is the latest op end
                            // of the tasks listed before the layer; none: start_us)
  double gbs = 0;           // bytes / span_us (NaN for an empty span)
  double pct_of_ceiling = 0;
  double exposed_us = 0;    // span_us - floor_us
  // The gate's latency: the median, over the level's tasks that were already waiting when their
  // last wait was met, of op begin minus that moment (the signal's hop and the poll round that
  // saw it). A wait on counter c with threshold k is met at the k-th earliest op end of the
  // tasks that signal c (op end is stamped after the signal). NaN when no task of the level
  // waited (or its producers did not all run).
  double gate_us = 0;
  // The tasks that began waiting only after their last wait was met: their SM, still busy with
  // its previous task, held them back, not their inputs. gate_us leaves them out. (A task that
  // began just before, with work of its own before its gate, shows in gate_us instead: qwen3-0.6b's
  // attention behind its SMs' q_proj tiles, 3.58 µs with 2 of 64 late, thirtieth session.)
  int64_t late_tasks = 0;
  // What a late task paid once it reached its gate: the median, over the late tasks, of op
  // begin minus wait begin (its work before the gate and the gate's own poll, its inputs long
  // ready). On the layer's chain wherever the level ends with late tasks: 2.1 µs on the GEMV
  // tiles until the loader took over their operand checks, 1.06 µs after (H200, thirty-fifth
  // session). NaN when no task was late.
  double late_to_begin_us = 0;
  // The median, over every task of the level whose waits were met (late ones included), of op
  // begin minus that moment: how long the level's tasks took to start once they could. NaN
  // when none of them waited.
  double met_to_begin_us = 0;
  // A task's op split at its body stamps, medians over the level's tasks that mark a body (NaN
  // when none does): pre = op begin -> body begin (x, a merge, a prologue), body, epi = body
  // end -> signalled (the partials' sums, the output stores, the end barrier, the release).
  // What a level spends besides streaming (bench/RESULTS.md, forty-second session: ~1.5 µs
  // before and ~2 µs after each GEMV body on the H200).
  double pre_us = 0, body_us = 0, epi_us = 0;
};

struct LayerTable {
  int64_t layer = -1;
  double ceiling_gbs = 0;
  std::vector<LevelRow> levels;  // ordered by start_us (then list order)
  // The same tasks by dependency level: the stages whose tasks sit at the same depth of the
  // program's counter DAG (they wait on the same inputs and run side by side, e.g. gate_proj
  // and up_proj) in one row named "gate_proj+up_proj", in start order. A level's bandwidth is
  // what the "gate/up level" means; a stage row alone shows half of it.
  std::vector<LevelRow> dependency_levels;
  LevelRow total;                // the layer: all its tasks, its span, its floor
  // The whole step: every task that ran, from the earliest wait begin to the latest op end.
  int64_t step_tasks = 0;
  int64_t step_bytes = 0;
  double step_span_us = 0;
  double step_floor_us = 0;
};

// The per-level table of `layer` (default: the middle layer, layer_count / 2). `ceiling_gbs` is
// the device's read ceiling (0: unknown, floors are NaN). Throws std::invalid_argument on a
// stamps / tasks size mismatch or a layer the program does not have. A layer none of whose
// tasks ran gives no levels.
LayerTable layer_table(const Program& program, const std::vector<TaskStamps>& stamps,
                       double ceiling_gbs, std::optional<int64_t> layer = std::nullopt);

// The table as text: a header line, one row per level, the layer's total row, and the step's
// span line. Columns: level, tasks, KB, floor µs, span µs, from prev µs, GB/s, % ceiling,
// exposed µs, gate µs, late, met→op µs.
std::string format_layer_table(const LayerTable& table);

// `amk bench --trace PATH`: writes chrome_trace_json to `path` and returns the text to print
// (a line naming the file, then format_layer_table of `layer`). With no stamp per task (no
// profile came back) it writes nothing and returns a line saying so. Throws std::runtime_error
// when the file cannot be written.
std::string write_step_trace(const std::string& path, const Program& program,
                             const std::vector<TaskStamps>& stamps, double ceiling_gbs,
                             std::optional<int64_t> layer = std::nullopt);

}  // namespace amk::eval
