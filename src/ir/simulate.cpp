// The dynamic backstops of IR_SPEC §3.4: counter-driven execution without numerics.
//
// Both simulators are event driven: each counter keeps its not-yet-satisfied waits sorted by
// threshold, and an increment releases exactly the waits it satisfies, so a run costs
// O((tasks + waits) log) instead of the O(n^2) repeated sweeps of a naive "fire what is ready"
// loop. A wait on a counter that does not exist can never be satisfied (the task is stuck); an
// increment of a missing counter signals nobody.
#include <algorithm>
#include <functional>
#include <queue>
#include <random>
#include <unordered_map>

#include "amk/validate.h"

namespace amk {

namespace {

// id -> position in the list, for ids as written (dense ids map to themselves).
template <typename T>
class IdIndex {
 public:
  explicit IdIndex(const std::vector<T>& items) : size_(static_cast<int64_t>(items.size())) {
    for (size_t i = 0; i < items.size(); ++i)
      if (items[i].id != static_cast<int64_t>(i)) dense_ = false;
    if (!dense_)
      for (size_t i = 0; i < items.size(); ++i)
        sparse_.emplace(items[i].id, static_cast<int64_t>(i));
  }
  int64_t operator()(int64_t id) const {
    if (dense_) return id >= 0 && id < size_ ? id : -1;
    const auto it = sparse_.find(id);
    return it == sparse_.end() ? -1 : it->second;
  }

 private:
  int64_t size_;
  bool dense_ = true;
  std::unordered_map<int64_t, int64_t> sparse_;  // first occurrence wins (emplace)
};

// The static part of a run: every wait not satisfied at the start, grouped by counter and
// sorted by threshold, and how many such waits each task has.
class CounterNetwork {
 public:
  explicit CounterNetwork(const Program& p) : p_(p) {
    const IdIndex<Counter> counter_of(p.counters);
    out_.resize(p.tasks.size());
    initial_pending_.assign(p.tasks.size(), 0);
    std::vector<std::vector<std::pair<int64_t, int64_t>>> waits(p.counters.size());
    for (size_t t = 0; t < p.tasks.size(); ++t) {
      const Task& task = p.tasks[t];
      out_[t] = counter_of(task.out_counter);
      for (const Wait& w : task.waits) {
        const int64_t c = counter_of(w.counter);
        if (c < 0) {
          ++initial_pending_[t];  // never released
        } else if (w.threshold > p.counters[static_cast<size_t>(c)].init) {
          ++initial_pending_[t];
          waits[static_cast<size_t>(c)].emplace_back(w.threshold, static_cast<int64_t>(t));
        }
      }
    }
    begin_.assign(p.counters.size() + 1, 0);
    for (size_t c = 0; c < waits.size(); ++c) {
      std::sort(waits[c].begin(), waits[c].end());
      begin_[c + 1] = begin_[c] + static_cast<int64_t>(waits[c].size());
      sorted_.insert(sorted_.end(), waits[c].begin(), waits[c].end());
    }
  }

  // A fresh run: counter values at init, nothing released yet.
  void reset(std::vector<int64_t>& ready) {
    value_.resize(p_.counters.size());
    for (size_t c = 0; c < p_.counters.size(); ++c) value_[c] = p_.counters[c].init;
    cursor_.assign(begin_.begin(), begin_.end() - 1);
    pending_ = initial_pending_;
    ready.clear();
    for (size_t t = 0; t < pending_.size(); ++t)
      if (pending_[t] == 0) ready.push_back(static_cast<int64_t>(t));
  }

  // Completes task t: one increment of its out_counter; calls on_ready for each task whose last
  // outstanding wait this satisfied.
  template <typename F>
  void fire(int64_t t, F&& on_ready) {
    const int64_t c = out_[static_cast<size_t>(t)];
    if (c < 0) return;
    const auto cu = static_cast<size_t>(c);
    const int64_t v = ++value_[cu];
    for (int64_t& i = cursor_[cu]; i < begin_[cu + 1] && sorted_[static_cast<size_t>(i)].first <= v;
         ++i) {
      const int64_t waiter = sorted_[static_cast<size_t>(i)].second;
      if (--pending_[static_cast<size_t>(waiter)] == 0) on_ready(waiter);
    }
  }

 private:
  const Program& p_;
  std::vector<int64_t> out_;                         // task -> counter index or -1
  std::vector<int64_t> initial_pending_;             // task -> waits unsatisfied at start
  std::vector<int64_t> begin_;                       // counter -> start in sorted_
  std::vector<std::pair<int64_t, int64_t>> sorted_;  // (threshold, task) per counter
  std::vector<int64_t> value_, cursor_, pending_;
};

std::string task_text(const Task& t) {
  return std::to_string(t.id) + " (" + (t.label.empty() ? std::string(name_of(t.op)) : t.label) +
         ")";
}

}  // namespace

CounterSimulation simulate_counters(const Program& program) {
  CounterNetwork net(program);
  std::vector<int64_t> initial;
  net.reset(initial);
  // Lowest index first: deterministic, and close to the list order the reference sweeps use.
  std::priority_queue<int64_t, std::vector<int64_t>, std::greater<>> ready(std::greater<>{},
                                                                           std::move(initial));
  std::vector<uint8_t> fired(program.tasks.size(), 0);
  CounterSimulation sim;
  sim.order.reserve(program.tasks.size());
  while (!ready.empty()) {
    const int64_t t = ready.top();
    ready.pop();
    fired[static_cast<size_t>(t)] = 1;
    sim.order.push_back(program.tasks[static_cast<size_t>(t)].id);
    net.fire(t, [&](int64_t w) { ready.push(w); });
  }
  for (size_t t = 0; t < program.tasks.size(); ++t)
    if (!fired[t]) sim.stuck.push_back(program.tasks[t].id);
  return sim;
}

std::vector<std::string> simulate_adversarial(const Program& program, int seeds) {
  const IdIndex<Buffer> buffer_of(program.buffers);
  // Transient = must be produced this pass before it is read. KV_CACHE holds the previous
  // step's state, so it is transient only when some task appends to it in this pass.
  std::vector<uint8_t> transient(program.buffers.size(), 0);
  for (size_t b = 0; b < program.buffers.size(); ++b) {
    const BufferKind k = program.buffers[b].kind;
    transient[b] = k == BufferKind::ACTIVATION || k == BufferKind::IO_OUTPUT;
  }
  for (const Task& t : program.tasks)
    for (int64_t id : t.outputs) {
      const int64_t b = buffer_of(id);
      if (b >= 0 && program.buffers[static_cast<size_t>(b)].kind == BufferKind::KV_CACHE)
        transient[static_cast<size_t>(b)] = 1;
    }

  CounterNetwork net(program);
  std::vector<std::string> violations;
  std::vector<int64_t> ready;
  std::vector<uint8_t> written(program.buffers.size());
  for (int s = 0; s < std::max(1, seeds); ++s) {
    std::mt19937_64 rng(static_cast<uint64_t>(s));
    net.reset(ready);
    std::fill(written.begin(), written.end(), 0);
    while (!ready.empty()) {
      // A uniformly random ready task: over many seeds this explores the interleavings a
      // fixed order never would (the wrong producer winning a race, a reader running early).
      std::uniform_int_distribution<size_t> pick(0, ready.size() - 1);
      const size_t i = pick(rng);
      const int64_t t = ready[i];
      ready[i] = ready.back();
      ready.pop_back();
      const Task& task = program.tasks[static_cast<size_t>(t)];
      for (int64_t id : task.inputs) {
        const int64_t b = buffer_of(id);
        if (b < 0 || !transient[static_cast<size_t>(b)] || written[static_cast<size_t>(b)])
          continue;
        // An append reading the cache it writes sees the previous step's state (as validate()
        // allows); an ACTIVATION read before its only writer fired is a real violation.
        if (program.buffers[static_cast<size_t>(b)].kind == BufferKind::KV_CACHE &&
            std::find(task.outputs.begin(), task.outputs.end(), id) != task.outputs.end())
          continue;
        violations.push_back("[seed " + std::to_string(s) + "] task " + task_text(task) +
                             " reads buffer #" + std::to_string(id) + " ('" +
                             program.buffers[static_cast<size_t>(b)].name +
                             "') before any producer wrote it");
      }
      for (int64_t id : task.outputs) {
        const int64_t b = buffer_of(id);
        if (b >= 0) written[static_cast<size_t>(b)] = 1;
      }
      net.fire(t, [&](int64_t w) { ready.push_back(w); });
    }
    if (!violations.empty()) break;
  }
  std::sort(violations.begin(), violations.end());
  violations.erase(std::unique(violations.begin(), violations.end()), violations.end());
  return violations;
}

}  // namespace amk
