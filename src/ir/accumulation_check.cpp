// The accumulation rule (validate_context.h check_accumulations): an MLP's tiles
// (RMSNORM_GEMV_GLU_DOWN_TILE) add their slices of the down projection into one buffer in any
// order, since fp32 sums differ only by rounding in any order; everything else that touches the
// buffer must stay clear of the whole group.
#include <algorithm>
#include <map>

#include "amk/op_traits.h"
#include "ir/validate_context.h"

namespace amk::detail {

bool has_accumulations(const Program& p) {
  return std::any_of(p.tasks.begin(), p.tasks.end(),
                     [](const Task& t) { return is_glu_down(t.op) && !t.outputs.empty(); });
}

void check_accumulations(const CheckInputs& in) {
  const Program& p = in.program;
  const DependencyGraph& g = in.graph;
  HappensBefore& hb = in.hb;
  const int64_t nb = static_cast<int64_t>(p.buffers.size());
  std::map<int32_t, std::vector<int32_t>> adders;  // buffer -> its accumulating tasks
  for (size_t t = 0; t < p.tasks.size(); ++t) {
    const Task& task = p.tasks[t];
    if (!is_glu_down(task.op) || task.outputs.empty()) continue;
    const int64_t b = task.outputs[0];
    if (b < 0 || b >= nb) continue;  // reported by the reference checks
    adders[static_cast<int32_t>(b)].push_back(static_cast<int32_t>(t));
  }

  // One group per buffer; every other access to the buffer is checked against all of it.
  struct Access {
    int32_t task;
    bool writer;
    HappensBefore::Ticket after;          // all adders happen before it
    std::vector<HappensBefore::Ticket> before;  // it happens before each adder representative
    bool before_impossible;
  };
  struct Group {
    int32_t buffer;
    int32_t counter;
    std::vector<int32_t> reps;
    std::vector<Access> accesses;
  };
  std::vector<Group> groups;
  hb.clear();
  for (const auto& entry : adders) {
    // Named, not structured bindings: clang 14 (the fuzz build) refuses lambdas capturing those.
    const auto& b = entry.first;
    const auto& tasks = entry.second;
    const Buffer& buf = p.buffers[static_cast<size_t>(b)];
    if (buf.kind != BufferKind::ACTIVATION && buf.kind != BufferKind::IO_OUTPUT) {
      in.diag.error("task " + task_ref(p, tasks[0]) + " accumulates into buffer " + buffer_ref(p, b) +
                    " of kind " + std::string(name_of(buf.kind)) +
                    ": an accumulator is an ACTIVATION or IO_OUTPUT buffer");
      continue;
    }
    const int32_t counter = g.out_counter[static_cast<size_t>(tasks[0])];
    bool one_counter = counter >= 0;
    for (int32_t t : tasks) one_counter &= g.out_counter[static_cast<size_t>(t)] == counter;
    if (!one_counter) {
      in.diag.error("the tasks accumulating into buffer " + buffer_ref(p, b) +
                    " do not all signal one counter: readers of the sum could not wait for all "
                    "of them at once (tasks " + task_ref(p, tasks.front()) + " ... " +
                    task_ref(p, tasks.back()) + ")");
      continue;
    }
    Group grp{b, counter, {}, {}};
    for (int32_t t : tasks) {
      const int32_t rep = hb.representative(t);
      if (std::find(grp.reps.begin(), grp.reps.end(), rep) == grp.reps.end()) grp.reps.push_back(rep);
    }
    const auto add_access = [&](int32_t t, bool writer) {
      if (std::binary_search(tasks.begin(), tasks.end(), t)) {
        if (!writer)
          in.diag.error("task " + task_ref(p, t) + " reads buffer " + buffer_ref(p, b) +
                        " that it accumulates into: its input would change under the sum, data RACE");
        return;
      }
      const int32_t c = g.out_counter[static_cast<size_t>(t)];
      Access a{t, writer, hb.ask(counter, t), {}, c < 0};
      if (c >= 0)
        for (int32_t rep : grp.reps) a.before.push_back(hb.ask(c, rep));
      grp.accesses.push_back(std::move(a));
    };
    for (int32_t w : in.use.writers.row(static_cast<size_t>(b))) add_access(w, true);
    for (int32_t r : in.use.readers.row(static_cast<size_t>(b))) add_access(r, false);
    groups.push_back(std::move(grp));
  }
  hb.solve();
  for (const Group& grp : groups) {
    const std::vector<int32_t>& tasks = adders.at(grp.buffer);
    bool initialized = false;
    for (const Access& a : grp.accesses) {
      const bool before =
          !a.before_impossible &&
          std::all_of(a.before.begin(), a.before.end(), [&](HappensBefore::Ticket k) { return hb.answer(k); });
      const bool after = hb.answer(a.after);
      if (a.writer && before) initialized = true;
      if (!before && !after)
        in.diag.error("task " + task_ref(p, a.task) + (a.writer ? " writes" : " reads") + " buffer " +
                      buffer_ref(p, grp.buffer) + " but is ordered neither before nor after all " +
                      std::to_string(tasks.size()) + " tasks accumulating into it (e.g. " +
                      task_ref(p, tasks.front()) + "), data RACE");
    }
    if (!initialized)
      in.diag.error("tasks accumulating into buffer " + buffer_ref(p, grp.buffer) + " (e.g. " +
                    task_ref(p, tasks.front()) +
                    ") add to a value that no writer ordered before them gives: an uninitialized "
                    "accumulator, data RACE");
  }
}

}  // namespace amk::detail
