#include "cli/synthetic_data.h"

#include <algorithm>
#include <limits>
#include <optional>

#include <fmt/format.h>

#include "amk/hash.h"
#include "amk/op_flags.h"

namespace amk::cli {

namespace {

// Uniform in [0, 1), a pure function of its arguments.
double unit(uint64_t seed, int64_t buffer, int64_t index) {
  const uint64_t h = splitmix64(splitmix64(seed ^ splitmix64(static_cast<uint64_t>(buffer))) ^
                                static_cast<uint64_t>(index));
  return static_cast<double>(h >> 11) * 0x1.0p-53;
}

bool is_float(DType d) {
  return d == DType::F32 || d == DType::F16 || d == DType::BF16 || d == DType::F8E4M3 ||
         d == DType::F8E5M2;
}

const Buffer* find(const Program& p, int64_t id) {
  for (const Buffer& b : p.buffers)
    if (b.id == id) return &b;
  return nullptr;
}

bool is_norm_weight(const Program& p, int64_t id) {
  for (const Task& t : p.tasks)
    if ((t.op == Op::RMSNORM || t.op == Op::LAYERNORM) && t.inputs.size() > 1 && t.inputs[1] == id)
      return true;
  return false;
}

// Rows of the smallest EMBED table that reads `id` as its token ids, if any does.
std::optional<int64_t> embed_rows(const Program& p, int64_t id) {
  std::optional<int64_t> rows;
  for (const Task& t : p.tasks) {
    if (t.op != Op::EMBED || t.inputs.size() < 2 || t.inputs[0] != id) continue;
    const Buffer* table = find(p, t.inputs[1]);
    if (table == nullptr || table->shape.empty()) continue;
    rows = std::min(rows.value_or(std::numeric_limits<int64_t>::max()), table->shape[0]);
  }
  return rows;
}

bool is_rope_position(const Program& p, int64_t id) {
  for (const Task& t : p.tasks)
    if ((t.op == Op::ROPE || t.op == Op::ROPE_FREQ) && t.inputs.size() > 1 && t.inputs[1] == id) return true;
  return false;
}

// One of the two settings inputs a sampling SAMPLE_ARGMAX ends with (docs/OPCODES.md).
bool is_sampling_settings(const Program& p, int64_t id) {
  for (const Task& t : p.tasks) {
    if (t.op != Op::SAMPLE_ARGMAX || (t.params.get_int("flags", 0) & sample_flags::kSample) == 0) continue;
    const size_t n = t.inputs.size();
    if (n >= 2 && (t.inputs[n - 1] == id || t.inputs[n - 2] == id)) return true;
  }
  return false;
}

int64_t decode_position(const Program& p) {
  for (const Task& t : p.tasks)
    if (t.op == Op::KV_APPEND) return std::max<int64_t>(0, t.params.get_int("pos", 0));
  return 0;
}

}  // namespace

const Buffer* step_position_buffer(const Program& p) {
  const std::optional<std::string> name = p.meta_string("step_position");
  if (!name) return nullptr;
  for (const Buffer& b : p.buffers)
    if (b.name == *name && b.kind == BufferKind::IO_INPUT && !is_float(b.dtype)) return &b;
  return nullptr;
}

std::vector<std::string> bind_synthetic_data(ReferenceVM& vm, uint64_t seed, int64_t step_position) {
  const Program& p = vm.program();
  const Buffer* pos_buffer = step_position_buffer(p);
  std::vector<std::string> notes;
  for (const Buffer& b : p.buffers) {
    if (!is_readonly_kind(b.kind)) continue;
    Tensor t = Tensor::zeros(b.dtype, b.shape);
    const int64_t n = t.numel();
    if (b.kind == BufferKind::IO_INPUT && is_sampling_settings(p, b.id)) {
      notes.push_back(fmt::format("{} = 0 (sampling settings: greedy)", b.name));
    } else if (is_float(b.dtype)) {
      const bool input = b.kind == BufferKind::IO_INPUT;
      const double center = !input && is_norm_weight(p, b.id) ? 1.0 : 0.0;
      const double half_width = input ? 1.0 : 0.1;
      for (int64_t i = 0; i < n; ++i)
        t.set(i, static_cast<float>(center + half_width * (2.0 * unit(seed, b.id, i) - 1.0)));
    } else if (b.kind == BufferKind::IO_INPUT) {
      int64_t value = 0;
      std::string role = "integer input";
      if (pos_buffer != nullptr && (b.id == pos_buffer->id || is_rope_position(p, b.id))) {
        value = step_position;
        role = "step position, --pos";
      } else if (const auto rows = embed_rows(p, b.id); rows && *rows > 0) {
        value = static_cast<int64_t>(seed % static_cast<uint64_t>(*rows));
        role = fmt::format("EMBED id, table rows {}", *rows);
      } else if (is_rope_position(p, b.id)) {
        value = decode_position(p);
        role = "ROPE position";
      }
      for (int64_t i = 0; i < n; ++i) t.set_int(i, value);
      notes.push_back(fmt::format("{} = {} ({})", b.name, value, role));
    } else {
      for (int64_t i = 0; i < n; ++i) {
        const double u = unit(seed, b.id, i);
        switch (b.dtype) {
          case DType::I8: t.set_int(i, static_cast<int64_t>(u * 16) - 8); break;
          case DType::I4: t.set_int(i, static_cast<int64_t>(u * 16)); break;
          case DType::U8: t.set_int(i, static_cast<int64_t>(u * 256)); break;
          default: break;  // I32 / BOOL constants stay 0
        }
      }
    }
    vm.set_buffer(b.id, std::move(t));
  }
  return notes;
}

}  // namespace amk::cli
