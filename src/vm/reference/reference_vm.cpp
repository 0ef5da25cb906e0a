// The ReferenceVM: counter-driven firing (IR_SPEC §2) over one host Tensor per logical buffer.
// Readiness is tracked incrementally (a per-task count of unmet waits), which is exactly the
// "every wait counter >= threshold" rule evaluated only when a counter it depends on moves.
#include "amk/reference_vm.h"

#include <chrono>
#include <cmath>
#include <cstring>
#include <exception>
#include <limits>
#include <random>
#include <set>
#include <sstream>
#include <stdexcept>
#include <utility>

#include "amk/reference_ops.h"

namespace amk {

namespace {

using Status = VmRunResult::Status;

bool is_bindable(BufferKind k) { return is_readonly_kind(k); }
bool is_transient(BufferKind k) {
  return k == BufferKind::ACTIVATION || k == BufferKind::IO_OUTPUT;
}
bool is_float_dtype(DType d) {
  return d == DType::F32 || d == DType::F16 || d == DType::BF16 || d == DType::F8E4M3 ||
         d == DType::F8E5M2;
}

std::string describe(const Buffer& b) {
  std::ostringstream os;
  os << "buffer " << b.id << " '" << b.name << "' (" << name_of(b.kind) << ")";
  return os.str();
}

std::string shape_str(const std::vector<int64_t>& shape) {
  std::ostringstream os;
  os << '[';
  for (size_t i = 0; i < shape.size(); ++i) os << (i ? "," : "") << shape[i];
  os << ']';
  return os.str();
}

std::string describe(const Task& t) {
  std::ostringstream os;
  os << "task " << t.id << " '" << t.label << "' (" << name_of(t.op) << ")";
  return os.str();
}

// Before-write reads must be visible: NaN for floats; for integers the most negative value
// (or all-ones for the unsigned/packed types), never a plausible token id.
void poison(Tensor& t) {
  if (is_float_dtype(t.dtype)) {
    t.fill(std::numeric_limits<float>::quiet_NaN());
    return;
  }
  if (t.dtype == DType::I32) {
    for (size_t i = 0; i + 4 <= t.bytes.size(); i += 4) {
      const uint8_t int32_min[4] = {0x00, 0x00, 0x00, 0x80};
      std::memcpy(&t.bytes[i], int32_min, 4);
    }
    return;
  }
  std::memset(t.bytes.data(), t.dtype == DType::I8 ? 0x80 : 0xFF, t.bytes.size());
}

// The ready set: ListOrder takes the lowest task index, Random a uniformly random member.
class ReadyQueue {
 public:
  ReadyQueue(VmOptions::Order order, uint64_t seed) : order_(order), rng_(seed) {}
  void push(size_t task) {
    if (order_ == VmOptions::Order::ListOrder)
      ordered_.insert(task);
    else
      pool_.push_back(task);
  }
  bool empty() const { return ordered_.empty() && pool_.empty(); }
  size_t pop() {
    if (order_ == VmOptions::Order::ListOrder) {
      const size_t t = *ordered_.begin();
      ordered_.erase(ordered_.begin());
      return t;
    }
    std::uniform_int_distribution<size_t> pick(0, pool_.size() - 1);
    const size_t i = pick(rng_);
    const size_t t = pool_[i];
    pool_[i] = pool_.back();
    pool_.pop_back();
    return t;
  }

 private:
  VmOptions::Order order_;
  std::mt19937_64 rng_;
  std::set<size_t> ordered_;
  std::vector<size_t> pool_;
};

}  // namespace

std::string_view name_of(VmRunResult::Status status) {
  switch (status) {
    case Status::Ok: return "Ok";
    case Status::Rejected: return "Rejected";
    case Status::Deadlock: return "Deadlock";
    case Status::Timeout: return "Timeout";
    case Status::OpError: return "OpError";
    case Status::MissingData: return "MissingData";
    case Status::ResourceLimit: return "ResourceLimit";
  }
  return "<invalid>";
}

ReferenceVM::ReferenceVM(Program program)
    : program_(std::move(program)), validation_(validate(program_)) {
  for (size_t i = 0; i < program_.buffers.size(); ++i)
    buffer_index_.emplace(program_.buffers[i].id, i);
  storage_.resize(program_.buffers.size());
  bound_.assign(program_.buffers.size(), false);
  // Allocate up front for an accepted program so KV state can be inspected or carried before the
  // first run; a size-cap failure is reported by run(), never thrown from here.
  if (validation_.ok) {
    std::string ignored;
    ensure_storage(&ignored);
  }
}

const Buffer* ReferenceVM::find_buffer(std::string_view name) const {
  for (const Buffer& b : program_.buffers)
    if (b.name == name) return &b;
  return nullptr;
}

bool ReferenceVM::ensure_storage(std::string* error) {
  if (storage_ready_) return true;
  int64_t total = 0;
  for (const Buffer& b : program_.buffers) {
    const int64_t n = b.nbytes();
    if (n > kVmMaxBufferBytes) {
      *error = describe(b) + " shape " + shape_str(b.shape) + " needs " + std::to_string(n) +
               " bytes, over the reference VM's per-buffer cap of " +
               std::to_string(kVmMaxBufferBytes) + " bytes";
      return false;
    }
    total += n;  // cannot overflow: each term is below 2^33 and there are far fewer than 2^30
    if (total > kVmMaxTotalBytes) {
      *error = "buffers need more than the reference VM's total cap of " +
               std::to_string(kVmMaxTotalBytes) + " bytes (reached at " + describe(b) + ")";
      return false;
    }
  }
  for (size_t i = 0; i < program_.buffers.size(); ++i) {
    const Buffer& b = program_.buffers[i];
    if (bound_[i] || is_bindable(b.kind)) continue;  // bindables stay empty until set_buffer
    storage_[i] = Tensor::zeros(b.dtype, b.shape);
  }
  storage_ready_ = true;
  return true;
}

void ReferenceVM::set_buffer(int64_t id, Tensor value) {
  const auto it = buffer_index_.find(id);
  if (it == buffer_index_.end())
    throw std::invalid_argument("set_buffer: no buffer with id " + std::to_string(id));
  const Buffer& b = program_.buffers[it->second];
  if (is_transient(b.kind))
    throw std::invalid_argument("set_buffer: " + describe(b) +
                                " is transient (reset before every run); bind only WEIGHT, CONST, "
                                "IO_INPUT or KV_CACHE buffers");
  if (value.dtype != b.dtype)
    throw std::invalid_argument("set_buffer: " + describe(b) + " has dtype " +
                                std::string(name_of(b.dtype)) + ", got " +
                                std::string(name_of(value.dtype)));
  if (value.shape != b.shape)
    throw std::invalid_argument("set_buffer: " + describe(b) + " has shape " +
                                shape_str(b.shape) + ", got " + shape_str(value.shape));
  if (b.nbytes() > kVmMaxBufferBytes)
    throw std::invalid_argument("set_buffer: " + describe(b) + " exceeds the per-buffer cap of " +
                                std::to_string(kVmMaxBufferBytes) + " bytes");
  if (static_cast<int64_t>(value.bytes.size()) != b.nbytes())
    throw std::invalid_argument("set_buffer: " + describe(b) + " needs " +
                                std::to_string(b.nbytes()) + " bytes of storage, the tensor holds " +
                                std::to_string(value.bytes.size()));
  storage_[it->second] = std::move(value);
  bound_[it->second] = true;
}

const Tensor& ReferenceVM::buffer(int64_t id) const {
  const auto it = buffer_index_.find(id);
  if (it == buffer_index_.end())
    throw std::out_of_range("ReferenceVM::buffer: no buffer with id " + std::to_string(id));
  const size_t i = it->second;
  const Buffer& b = program_.buffers[i];
  const bool has_data = bound_[i] || (storage_ready_ && !is_bindable(b.kind));
  if (!has_data)
    throw std::logic_error("ReferenceVM::buffer: " + describe(b) +
                           " has no storage (unbound, rejected program, or over the size cap)");
  return storage_[i];
}

VmRunResult ReferenceVM::run(const VmOptions& options) {
  const auto t0 = std::chrono::steady_clock::now();
  const auto elapsed_s = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  VmRunResult result;
  const auto finish = [&](Status status, std::string message) {
    result.status = status;
    result.message = std::move(message);
    result.wall_s = elapsed_s();
    return result;
  };

  if (!validation_.ok && !options.testing_skip_validation) {
    std::string msg = "program rejected by validate()";
    constexpr size_t kShown = 5;
    for (size_t i = 0; i < validation_.errors.size() && i < kShown; ++i)
      msg += (i ? "; " : ": ") + validation_.errors[i];
    if (validation_.errors.size() > kShown)
      msg += " (+" + std::to_string(validation_.errors.size() - kShown) + " more)";
    return finish(Status::Rejected, msg);
  }

  if (std::string error; !ensure_storage(&error)) return finish(Status::ResourceLimit, error);

  std::string missing;
  for (size_t i = 0; i < program_.buffers.size(); ++i) {
    const Buffer& b = program_.buffers[i];
    if (is_bindable(b.kind) && !bound_[i]) missing += (missing.empty() ? "" : ", ") + describe(b);
  }
  if (!missing.empty())
    return finish(Status::MissingData, "not bound (call set_buffer before run): " + missing);

  for (size_t i = 0; i < program_.buffers.size(); ++i)
    if (is_transient(program_.buffers[i].kind)) poison(storage_[i]);

  // Counter values, and for each counter the waits that watch it (threshold, task index).
  std::unordered_map<int64_t, int64_t> value;
  for (const Counter& c : program_.counters) value[c.id] = c.init;
  std::unordered_map<int64_t, std::vector<std::pair<int64_t, size_t>>> watchers;
  const size_t n_tasks = program_.tasks.size();
  std::vector<size_t> unmet(n_tasks, 0);
  ReadyQueue ready(options.order, options.seed);
  for (size_t t = 0; t < n_tasks; ++t) {
    for (const Wait& w : program_.tasks[t].waits) {
      if (value[w.counter] >= w.threshold) continue;
      ++unmet[t];
      watchers[w.counter].emplace_back(w.threshold, t);
    }
    if (unmet[t] == 0) ready.push(t);
  }

  const StepState step{options.step_position};
  std::vector<const Tensor*> ins;
  std::vector<Tensor*> outs;
  std::vector<bool> done(n_tasks, false);
  size_t remaining = n_tasks;
  while (remaining > 0) {
    if (ready.empty()) {
      std::string msg = "no task is ready and " + std::to_string(remaining) + " remain:";
      size_t shown = 0;
      for (size_t t = 0; t < n_tasks && shown < 16; ++t) {
        if (done[t]) continue;
        ++shown;
        msg += " " + describe(program_.tasks[t]) + " waits";
        for (const Wait& w : program_.tasks[t].waits)
          if (value[w.counter] < w.threshold)
            msg += " [counter " + std::to_string(w.counter) + " is " +
                   std::to_string(value[w.counter]) + ", needs " + std::to_string(w.threshold) +
                   "]";
        msg += ";";
      }
      if (remaining > shown) msg += " ...";
      return finish(Status::Deadlock, msg);
    }

    const size_t index = ready.pop();
    const Task& task = program_.tasks[index];
    ins.clear();
    outs.clear();
    for (const auto* ids : {&task.inputs, &task.outputs}) {
      for (int64_t id : *ids) {
        const auto it = buffer_index_.find(id);
        if (it == buffer_index_.end())
          return finish(Status::OpError,
                        describe(task) + " references unknown buffer id " + std::to_string(id));
        if (ids == &task.inputs)
          ins.push_back(&storage_[it->second]);
        else
          outs.push_back(&storage_[it->second]);
      }
    }
    try {
      run_reference_op(task.op, task.params, ins, outs, step);
    } catch (const std::exception& e) {
      return finish(Status::OpError, describe(task) + " failed: " + e.what());
    }

    // Completion: exactly one increment of out_counter, then wake the waits it satisfies.
    const int64_t now = ++value[task.out_counter];
    if (const auto w = watchers.find(task.out_counter); w != watchers.end())
      for (const auto& [threshold, t] : w->second)
        if (threshold == now && --unmet[t] == 0) ready.push(t);
    result.fired.push_back(task.id);
    done[index] = true;
    --remaining;

    if (remaining > 0 && elapsed_s() > options.timeout_s)
      return finish(Status::Timeout, "watchdog: " + std::to_string(options.timeout_s) +
                                         " s passed with " + std::to_string(remaining) +
                                         " of " + std::to_string(n_tasks) + " tasks left");
  }
  return finish(Status::Ok, "");
}

}  // namespace amk
