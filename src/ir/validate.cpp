// validate(): the static proof that a Program is deadlock- and race-free (IR_SPEC §3).
//
// The driver runs the checks in dependency order: structure (ids, enums, arity, params, caps,
// references) first, then the counter graph (thresholds, acyclicity, SM queues), then the
// checks that need an acyclic graph (races, page aliasing). A check whose inputs are broken is
// skipped rather than guessed at: the program is already rejected by the error that broke them.
// Nothing here recurses or throws on a malformed Program; memory exhaustion is the one failure
// caught (as a rejection), since a result must always come back.
#include "amk/validate.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <new>
#include <optional>
#include <unordered_map>

#include "ir/dependency_graph.h"
#include "ir/reachability.h"
#include "ir/validate_context.h"

namespace amk {

namespace {

using detail::BufferUse;
using detail::CycleStep;
using detail::DependencyGraph;
using detail::Diagnostics;
using detail::enum_in_range;
using detail::HappensBefore;
using detail::task_ref;

constexpr int64_t kInt32Min = std::numeric_limits<int32_t>::min();
constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();
// Internally tasks, buffers and counters are int32 indices.
constexpr size_t kMaxElements = static_cast<size_t>(kInt32Max) - 1;

std::string task_word(const Program& p, size_t t) {
  return "task " + task_ref(p, static_cast<int32_t>(t));
}

std::string param_text(const ParamValue& v) {
  switch (v.kind) {
    case ParamValue::Kind::Int:
      return std::to_string(v.i);
    case ParamValue::Kind::Real: {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%.17g", v.f);
      return buf;
    }
    default:
      return v.other_json.empty() ? "<non-numeric>" : v.other_json;
  }
}

// ---- ids, enums, shapes ----------------------------------------------------------------------
template <typename T>
bool check_dense_ids(const std::vector<T>& items, std::string_view what, Diagnostics& d) {
  bool dense = true;
  for (size_t i = 0; i < items.size(); ++i)
    if (items[i].id != static_cast<int64_t>(i)) {
      dense = false;
      d.error(std::string(what) + " at index " + std::to_string(i) + " has id " +
              std::to_string(items[i].id) + "; ids must be dense 0..n-1 in list order");
    }
  return dense;
}

// A box is rows and columns of a rank-2 WEIGHT tensor, the buffer's whole shape. Whether the
// tensor is large enough only the checkpoint says (amk/decoder.h weight_tensor).
void check_source_box(const Buffer& b, const std::string& ref, Diagnostics& d) {
  const SourceBox& x = *b.source_box;
  const std::string box = "source_box [" + std::to_string(x.row0) + ", " + std::to_string(x.rows) +
                          ", " + std::to_string(x.col0) + ", " + std::to_string(x.cols) + "]";
  int64_t end = 0;
  if (b.kind != BufferKind::WEIGHT || !b.source)
    d.error(ref + " has a " + box + " but is not a WEIGHT with a source");
  else if (x.row0 < 0 || x.col0 < 0 || x.rows < 1 || x.cols < 1 ||
           __builtin_add_overflow(x.row0, x.rows, &end) ||
           __builtin_add_overflow(x.col0, x.cols, &end))
    d.error(ref + " has " + box + ": offsets must be >= 0 and sizes >= 1");
  else if (b.shape != std::vector<int64_t>{x.rows, x.cols})
    d.error(ref + " has " + box + " but its shape is not [" + std::to_string(x.rows) + ", " +
            std::to_string(x.cols) + "]");
}

void check_buffers(const Program& p, Diagnostics& d) {
  for (size_t i = 0; i < p.buffers.size(); ++i) {
    const Buffer& b = p.buffers[i];
    const std::string ref = "buffer #" + std::to_string(i) + " ('" + b.name + "')";
    if (!enum_in_range(b.kind, kNumBufferKinds))
      d.error(ref + " has invalid kind code " + std::to_string(static_cast<int64_t>(b.kind)));
    if (!enum_in_range(b.dtype, kNumDTypes))
      d.error(ref + " has invalid dtype code " + std::to_string(static_cast<int64_t>(b.dtype)));
    if (!enum_in_range(b.space, kNumMemSpaces))
      d.error(ref + " has invalid memory space code " +
              std::to_string(static_cast<int64_t>(b.space)));
    if (b.shape.size() > static_cast<size_t>(kMaxRank))
      d.error(ref + " has rank " + std::to_string(b.shape.size()) +
              " > ABI_MAX_RANK=" + std::to_string(kMaxRank));
    for (int64_t dim : b.shape)
      if (dim < 0) {
        d.error(ref + " has negative dimension " + std::to_string(dim));
        break;
      }
    if (b.source_box) check_source_box(b, ref, d);
  }
}

void check_counters(const Program& p, Diagnostics& d) {
  for (size_t i = 0; i < p.counters.size(); ++i)
    if (p.counters[i].init != 0)
      d.error("counter " + std::to_string(i) + " has init " + std::to_string(p.counters[i].init) +
              " != 0 (counters are zeroed before every launch; a fresh pass starts at 0)");
}

// ---- per-task structure: opcode, arity, params, caps, references -------------------------------
void check_params(const Program& p, size_t t, Diagnostics& d) {
  const Task& task = p.tasks[t];
  for (const auto& [key, v] : task.params.items()) {
    const auto type = param_field_type(key);
    if (!type) {
      d.warn(task_word(p, t) + " param '" + key +
             "' is not a known amk_params_t field (will not marshal to the device)");
    } else if (*type == ParamType::Int32) {
      if (v.kind != ParamValue::Kind::Int || v.i < kInt32Min || v.i > kInt32Max)
        d.error(task_word(p, t) + " param '" + key + "'=" + param_text(v) + " must be an int32");
    } else {
      const bool numeric = v.kind == ParamValue::Kind::Int ||
                           (v.kind == ParamValue::Kind::Real && std::isfinite(v.f));
      if (!numeric)
        d.error(task_word(p, t) + " param '" + key + "'=" + param_text(v) +
                " must be a finite real number");
    }
  }
}

void check_task_structure(const Program& p, bool buffers_dense, bool counters_dense,
                          Diagnostics& d) {
  const auto nb = static_cast<int64_t>(p.buffers.size());
  const auto nc = static_cast<int64_t>(p.counters.size());
  std::vector<int64_t> used;
  for (size_t t = 0; t < p.tasks.size(); ++t) {
    const Task& task = p.tasks[t];
    auto who = [&] { return task_word(p, t); };  // built only when there is something to say
    if (task.inputs.size() > static_cast<size_t>(kMaxInputs))
      d.error(who() + " has " + std::to_string(task.inputs.size()) +
              " inputs > ABI_MAX_INPUTS=" + std::to_string(kMaxInputs));
    if (task.outputs.size() > static_cast<size_t>(kMaxOutputs))
      d.error(who() + " has " + std::to_string(task.outputs.size()) +
              " outputs > ABI_MAX_OUTPUTS=" + std::to_string(kMaxOutputs));
    if (task.waits.size() > static_cast<size_t>(kMaxWaits))
      d.error(who() + " has " + std::to_string(task.waits.size()) +
              " waits > ABI_MAX_WAITS=" + std::to_string(kMaxWaits));

    if (!enum_in_range(task.op, kNumOps)) {
      d.error(who() + " has invalid opcode " + std::to_string(static_cast<int64_t>(task.op)));
    } else {
      const OpSpec& spec = op_spec(task.op);
      const std::string op(name_of(task.op));
      const auto n_in = static_cast<int64_t>(task.inputs.size());
      if (n_in < spec.min_inputs || n_in > spec.max_inputs)
        d.error(who() + " " + op + " arity: " + std::to_string(n_in) + " inputs, expected [" +
                std::to_string(spec.min_inputs) + "," + std::to_string(spec.max_inputs) + "]");
      if (task.outputs.size() < static_cast<size_t>(spec.n_outputs) ||
          task.outputs.size() > static_cast<size_t>(spec.most_outputs()))
        d.error(who() + " " + op + " expected " + std::to_string(spec.n_outputs) +
                (spec.most_outputs() > spec.n_outputs
                     ? " or " + std::to_string(spec.most_outputs())
                     : std::string()) +
                " outputs, got " + std::to_string(task.outputs.size()));
      for (std::string_view k : spec.required_params)
        if (!task.params.contains(k))
          d.error(who() + " " + op + " missing required param '" + std::string(k) + "'");
    }
    check_params(p, t, d);

    if (buffers_dense) {
      for (int64_t b : task.inputs)
        if (b < 0 || b >= nb) d.error(who() + " reads missing buffer " + std::to_string(b));
      for (int64_t b : task.outputs)
        if (b < 0 || b >= nb) d.error(who() + " writes missing buffer " + std::to_string(b));
      used.clear();
      for (const auto* list : {&task.inputs, &task.outputs})
        for (int64_t b : *list)
          if (b >= 0 && b < nb) used.push_back(b);
      std::sort(used.begin(), used.end());
      used.erase(std::unique(used.begin(), used.end()), used.end());
      for (int64_t b : used) {
        const size_t rank = p.buffers[static_cast<size_t>(b)].shape.size();
        if (rank > static_cast<size_t>(kMaxRank))
          d.error(who() + " uses buffer " + detail::buffer_ref(p, static_cast<int32_t>(b)) +
                  " of rank " + std::to_string(rank) +
                  " > ABI_MAX_RANK=" + std::to_string(kMaxRank));
      }
    }
    if (counters_dense && (task.out_counter < 0 || task.out_counter >= nc))
      d.error(who() + " increments missing counter " + std::to_string(task.out_counter));
    for (const Wait& w : task.waits) {
      if (counters_dense && (w.counter < 0 || w.counter >= nc))
        d.error(who() + " waits on missing counter " + std::to_string(w.counter));
      if (w.threshold < 1)
        d.error(who() + " threshold " + std::to_string(w.threshold) + " on counter " +
                std::to_string(w.counter) + " is not a positive static int");
      if (w.counter == task.out_counter)
        d.error(who() + " waits on its OWN out_counter " + std::to_string(w.counter) +
                ", self-deadlock");
    }
  }
}

// ---- the counter graph -------------------------------------------------------------------------
void check_thresholds(const Program& p, const DependencyGraph& g, Diagnostics& d) {
  for (size_t t = 0; t < p.tasks.size(); ++t)
    for (const Wait& w : p.tasks[t].waits) {
      if (w.counter < 0 || w.counter >= g.num_counters || w.threshold < 1) continue;
      const int64_t np = g.producer_count(static_cast<int32_t>(w.counter));
      const std::string c = std::to_string(w.counter);
      if (np == 0)
        d.error(task_word(p, t) + " waits on counter " + c +
                " with NO producer, unsatisfiable (deadlock)");
      else if (w.threshold > np)
        d.error(task_word(p, t) + " threshold " + std::to_string(w.threshold) + " > " +
                std::to_string(np) + " producers of counter " + c + ", unsatisfiable (deadlock)");
      else if (np > 1 && w.threshold != np)
        // A counter only counts: any subset of threshold producers can satisfy a partial wait,
        // including t = 1 (first-of-N), so it orders none of them in particular.
        d.error(task_word(p, t) + " partial wait threshold " + std::to_string(w.threshold) +
                " on shared counter " + c + " (" + std::to_string(np) +
                " producers), ambiguous which-producer RACE; a shared counter must be an "
                "all-join (threshold == " +
                std::to_string(np) + ")");
    }
}

// "cycle: 3:a -> 7:b -> 3:a"; a queue edge is drawn "=[SM s queue]=>". Long cycles keep their
// two ends so a 200k-task witness stays one readable line.
std::string describe_cycle(const Program& p, const std::vector<CycleStep>& steps) {
  if (steps.empty()) return "cycle: <not localized>";
  constexpr size_t kEnds = 24;
  auto node = [&](int32_t t) {
    const Task& task = p.tasks[static_cast<size_t>(t)];
    return std::to_string(t) + ":" +
           (task.label.empty() ? std::string(name_of(task.op)) : task.label);
  };
  auto arrow = [&](const CycleStep& s) {
    if (!s.queue_edge) return std::string(" -> ");
    return " =[SM " + std::to_string(p.tasks[static_cast<size_t>(s.task)].sm.value_or(-1)) +
           " queue]=> ";
  };
  std::string out = "cycle";
  if (steps.size() > 2 * kEnds) out += " (" + std::to_string(steps.size()) + " tasks)";
  out += ": ";
  for (size_t i = 0; i < steps.size(); ++i) {
    if (steps.size() > 2 * kEnds && i == kEnds) {
      out += "... (" + std::to_string(steps.size() - 2 * kEnds) + " more tasks) ... -> ";
      i = steps.size() - kEnds;
    }
    out += node(steps[i].task) + arrow(steps[i]);
  }
  return out + node(steps.front().task);
}

// Per-SM queues (IR_SPEC §3.1). The SM s runs its tasks in task-list order and never reorders
// them, so queue order is an extra edge between consecutive entries: the program can deadlock
// iff dependencies plus queue edges have a cycle. This covers the direct case (a queue entry
// waiting on a later entry of its own queue) and the transitive one (through other SMs).
void check_sm_queues(const Program& p, const DependencyGraph* g, bool acyclic, Diagnostics& d) {
  size_t assigned = 0;
  const int64_t num_sms = p.target ? p.target->num_sms : -1;
  std::vector<int32_t> queue_next(p.tasks.size(), -1);
  std::unordered_map<int64_t, int32_t> last_of_sm;
  for (size_t t = 0; t < p.tasks.size(); ++t) {
    const auto& sm = p.tasks[t].sm;
    if (!sm) continue;
    ++assigned;
    if (*sm < 0) {
      d.error(task_word(p, t) + " assigned to negative SM " + std::to_string(*sm));
      continue;
    }
    if (p.target && *sm >= num_sms) {
      d.error(task_word(p, t) + " assigned to SM " + std::to_string(*sm) + " out of range [0," +
              std::to_string(num_sms) + ")");
      continue;
    }
    const auto [it, fresh] = last_of_sm.emplace(*sm, static_cast<int32_t>(t));
    if (!fresh) {
      queue_next[static_cast<size_t>(it->second)] = static_cast<int32_t>(t);
      it->second = static_cast<int32_t>(t);
    }
  }
  if (assigned == 0) return;
  if (assigned < p.tasks.size())
    d.warn(std::to_string(p.tasks.size() - assigned) + " of " + std::to_string(p.tasks.size()) +
           " tasks have no SM assigned while others do; their queue placement is unchecked");
  if (!g || !acyclic) return;
  const auto topo = detail::topological_order(*g, queue_next);
  if (topo.acyclic) return;
  const auto steps = detail::find_cycle(*g, topo, queue_next);
  std::vector<int64_t> sms;
  for (const CycleStep& s : steps)
    if (s.queue_edge) sms.push_back(p.tasks[static_cast<size_t>(s.task)].sm.value_or(-1));
  std::sort(sms.begin(), sms.end());
  sms.erase(std::unique(sms.begin(), sms.end()), sms.end());
  std::string which;
  for (size_t i = 0; i < sms.size(); ++i) which += (i ? ", " : "") + std::to_string(sms[i]);
  d.error(std::string(sms.size() == 1 ? "SM " : "SMs ") + which +
          " serial queue order deadlocks: a queued task waits, directly or through other tasks, "
          "on a counter only a LATER entry of the same queue signals (producer must precede "
          "consumer in each SM's queue). " +
          describe_cycle(p, steps));
}

// ---- buffer placement: read-only writes, on-chip buffers, outputs
// --------------------------------
void check_buffer_placement(const Program& p, const BufferUse& use, Diagnostics& d) {
  for (size_t t = 0; t < p.tasks.size(); ++t)
    for (int32_t b : use.writes.row(t)) {
      const BufferKind k = p.buffers[static_cast<size_t>(b)].kind;
      if (enum_in_range(k, kNumBufferKinds) && is_readonly_kind(k))
        d.error(task_word(p, t) + " writes read-only " + std::string(name_of(k)) + " buffer " +
                detail::buffer_ref(p, b) +
                " (WEIGHT/CONST/IO_INPUT are never written by a schedule)");
    }
  std::vector<int64_t> sms;
  for (size_t bi = 0; bi < p.buffers.size(); ++bi) {
    const Buffer& b = p.buffers[bi];
    const auto ref = detail::buffer_ref(p, static_cast<int32_t>(bi));
    if (b.kind == BufferKind::IO_OUTPUT && use.writers.row_size(bi) == 0)
      d.error("IO_OUTPUT buffer " + ref + " is never produced");
    if (b.space != MemSpace::SMEM && b.space != MemSpace::REGISTER) continue;
    sms.clear();
    bool used = false;
    for (const detail::Csr* users : {&use.readers, &use.writers})
      for (int32_t t : users->row(bi)) {
        used = true;
        if (const auto& sm = p.tasks[static_cast<size_t>(t)].sm) sms.push_back(*sm);
      }
    std::sort(sms.begin(), sms.end());
    sms.erase(std::unique(sms.begin(), sms.end()), sms.end());
    if (sms.size() > 1) {
      std::string list;
      for (size_t i = 0; i < sms.size() && i < 8; ++i)
        list += (i ? ", " : "") + std::to_string(sms[i]);
      if (sms.size() > 8) list += ", ... (" + std::to_string(sms.size() - 8) + " more)";
      d.error("on-chip buffer " + ref + " (" + std::string(name_of(b.space)) +
              ") is used across SMs [" + list +
              "]; counters give ordering, not cross-SM data: promote it to GLOBAL_SCRATCH/HBM "
              "or co-locate its users on one SM");
    } else if (used && sms.empty()) {
      d.warn("on-chip buffer " + ref + " (" + std::string(name_of(b.space)) +
             ") requires same-SM placement (unverified until sm_assignment runs)");
    }
  }
}

void run_validation(const Program& p, ValidationResult& r) {
  Diagnostics d{r.errors, r.warnings};
  auto& st = r.stats;
  st.tasks = static_cast<int64_t>(p.tasks.size());
  st.buffers = static_cast<int64_t>(p.buffers.size());
  st.counters = static_cast<int64_t>(p.counters.size());
  st.weight_mb = static_cast<double>(p.total_weight_bytes()) / 1e6;
  st.sm_assigned =
      std::any_of(p.tasks.begin(), p.tasks.end(), [](const Task& t) { return t.sm.has_value(); });
  if (p.tasks.size() > kMaxElements || p.buffers.size() > kMaxElements ||
      p.counters.size() > kMaxElements) {
    d.error("program too large to validate (more than 2^31 - 2 tasks, buffers or counters)");
    return;
  }

  const bool buffers_dense = check_dense_ids(p.buffers, "buffer", d);
  const bool counters_dense = check_dense_ids(p.counters, "counter", d);
  check_dense_ids(p.tasks, "task", d);  // tasks are referred to by position only
  check_buffers(p, d);
  check_counters(p, d);
  check_task_structure(p, buffers_dense, counters_dense, d);

  // ---- deadlock-freedom: thresholds, acyclicity, SM queues ----
  std::optional<DependencyGraph> graph;
  detail::TopoOrder topo;
  if (counters_dense) {
    graph = DependencyGraph::build(p);
    check_thresholds(p, *graph, d);
    st.edges = graph->edge_count();
    topo = detail::topological_order(*graph);
    st.acyclic = topo.acyclic;
    if (!topo.acyclic)
      d.error("producer->consumer graph has a CYCLE, structural deadlock. " +
              describe_cycle(p, detail::find_cycle(*graph, topo)));
  }
  check_sm_queues(p, graph ? &*graph : nullptr, st.acyclic, d);

  // ---- race-freedom and memory ----
  if (buffers_dense) {
    detail::check_task_params(p, d);
    const BufferUse use = BufferUse::build(p);
    check_buffer_placement(p, use, d);
    if (p.pages) detail::check_page_table(p, d);
    if (graph && topo.acyclic) {
      HappensBefore hb(*graph, topo.tasks);
      const detail::CheckInputs in{p, use, *graph, hb, d};
      if (detail::has_accumulations(p)) {
        // The adds into an accumulator are checked as a group; the rest as usual without them.
        const BufferUse without = BufferUse::build(p, /*without_accumulations=*/true);
        detail::check_races(detail::CheckInputs{p, without, *graph, hb, d});
        detail::check_accumulations(in);
      } else {
        detail::check_races(in);
      }
      if (p.pages) detail::check_page_aliasing(in);
      st.hb_queries = hb.queries_asked();
    }
  }

  // Byte totals (the floor, the roofline) are sums over every weight and task: one that does not
  // fit 64 bits is an error, never a saturated number that prints as a plausible floor.
  {
    int64_t weights = 0, est = 0;
    bool overflow = false;
    for (const Buffer& b : p.buffers)
      if (b.kind == BufferKind::WEIGHT)
        overflow |= b.nbytes() == std::numeric_limits<int64_t>::max() ||
                    __builtin_add_overflow(weights, b.nbytes(), &weights);
    if (overflow) d.error("the program's weight bytes overflow 64 bits");
    overflow = false;
    for (const Task& t : p.tasks)
      overflow |= t.est_bytes < 0 || __builtin_add_overflow(est, t.est_bytes, &est);
    if (overflow) d.error("the tasks' est_bytes are negative or overflow 64 bits in total");
  }

  if (p.target) {
    // A bandwidth divides every floor: zero, negative or NaN makes the target meaningless.
    if (!(p.target->hbm_bandwidth_gbs > 0.0))
      d.error("target '" + p.target->name + "': hbm_bandwidth_gbs must be > 0");
    if (!(p.target->measured_bw_gbs >= 0.0))
      d.error("target '" + p.target->name + "': measured_bw_gbs must be >= 0 (0: not measured)");
    // meta values are free-form JSON text; one that cannot be read is simply not a label.
    std::optional<std::string> gpu;
    try {
      gpu = p.meta_string("gpu");
    } catch (const std::bad_alloc&) {
      throw;
    } catch (...) {
    }
    if (gpu && !gpu->empty() && *gpu != p.target->name)
      d.warn("meta['gpu']='" + *gpu + "' != target.name='" + p.target->name +
             "' - flywheel rows derive GPU from target.name");
  }
}

// Records why validation stopped. If even that allocation fails, the findings so far are
// dropped to make room; the result is REJECTED whatever happens here.
void record_abort(ValidationResult& r, const char* why) noexcept {
  try {
    r.errors.emplace_back(why);
    return;
  } catch (...) {
  }
  r.errors = {};
  r.warnings = {};
  try {
    r.errors.emplace_back(why);
  } catch (...) {
  }
}

}  // namespace

ValidationResult validate(const Program& program) {
  ValidationResult r;
  bool aborted = false;
  try {
    run_validation(program, r);
  } catch (const std::bad_alloc&) {
    aborted = true;
    record_abort(r, "validation aborted: out of memory");
  } catch (...) {
    aborted = true;
    record_abort(r, "validation aborted: internal error");
  }
  r.ok = !aborted && r.errors.empty();
  return r;
}

std::string ValidationResult::report() const {
  char head[256];
  std::snprintf(head, sizeof head,
                "[%s] tasks=%lld buffers=%lld counters=%lld edges=%lld acyclic=%s weight_MB=%.2f "
                "sm_assigned=%s",
                ok ? "VALID" : "REJECTED", static_cast<long long>(stats.tasks),
                static_cast<long long>(stats.buffers), static_cast<long long>(stats.counters),
                static_cast<long long>(stats.edges), stats.acyclic ? "true" : "false",
                stats.weight_mb, stats.sm_assigned ? "true" : "false");
  // A program with 100k racing reads has 100k errors: the text lists the first kReportLines of
  // each kind and counts the rest (`amk validate --json` and `errors` keep every one).
  const size_t n_err = std::min(errors.size(), kReportLines);
  const size_t n_warn = std::min(warnings.size(), kReportLines);
  size_t size = std::char_traits<char>::length(head) + 128;
  for (size_t i = 0; i < n_err; ++i) size += errors[i].size() + 10;
  for (size_t i = 0; i < n_warn; ++i) size += warnings[i].size() + 12;
  std::string out;
  out.reserve(size);
  out += head;
  for (size_t i = 0; i < n_err; ++i) (out += "\n  ERROR: ") += errors[i];
  if (errors.size() > n_err)
    out += "\n  ... and " + std::to_string(errors.size() - n_err) + " more errors (" +
           std::to_string(errors.size()) + " in all; --json lists every one)";
  for (size_t i = 0; i < n_warn; ++i) (out += "\n  warning: ") += warnings[i];
  if (warnings.size() > n_warn)
    out += "\n  ... and " + std::to_string(warnings.size() - n_warn) + " more warnings";
  return out;
}

}  // namespace amk
