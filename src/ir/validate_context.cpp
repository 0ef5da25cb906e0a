// Message helpers and the buffer-use index shared by the validator's checks.
#include "ir/validate_context.h"

#include <algorithm>

#include "amk/op_traits.h"

namespace amk::detail {

std::string task_ref(const Program& p, int32_t t) {
  const Task& task = p.tasks[static_cast<size_t>(t)];
  std::string s = std::to_string(t);
  s += " (";
  s += task.label.empty() ? std::string(name_of(task.op)) : task.label;
  s += ')';
  return s;
}

std::string buffer_ref(const Program& p, int32_t b) {
  std::string s = "#";
  s += std::to_string(b);
  s += " ('";
  s += p.buffers[static_cast<size_t>(b)].name;
  return s += "')";
}

std::string id_list(const std::vector<int32_t>& ids, size_t total) {
  constexpr size_t kShown = 8;
  std::string s = "[";
  if (total > ids.size()) {
    for (int32_t id : ids) s += std::to_string(id) + ", ";
    s += "... (";
    s += std::to_string(total - ids.size());
    return s += " more)]";
  }
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids.size() > kShown && i == kShown - 2) {
      s += "... (";
      s += std::to_string(ids.size() - kShown + 1);
      s += " more), ";
      i = ids.size() - 1;
    }
    s += std::to_string(ids[i]);
    if (i + 1 < ids.size()) s += ", ";
  }
  return s + "]";
}

BufferUse BufferUse::build(const Program& p, bool without_accumulations) {
  const int64_t nb = static_cast<int64_t>(p.buffers.size());
  std::vector<std::pair<int32_t, int32_t>> read_pairs, write_pairs;
  std::vector<int32_t> mine;
  auto collect = [&](int32_t t, const std::vector<int64_t>& ids,
                     std::vector<std::pair<int32_t, int32_t>>& out) {
    mine.clear();
    for (int64_t b : ids)
      if (b >= 0 && b < nb) mine.push_back(static_cast<int32_t>(b));
    std::sort(mine.begin(), mine.end());
    mine.erase(std::unique(mine.begin(), mine.end()), mine.end());
    for (int32_t b : mine) out.emplace_back(t, b);
  };
  for (size_t t = 0; t < p.tasks.size(); ++t) {
    collect(static_cast<int32_t>(t), p.tasks[t].inputs, read_pairs);
    if (without_accumulations && is_glu_down(p.tasks[t].op) && !p.tasks[t].outputs.empty()) {
      std::vector<int64_t> rest(p.tasks[t].outputs.begin() + 1, p.tasks[t].outputs.end());
      collect(static_cast<int32_t>(t), rest, write_pairs);
    } else {
      collect(static_cast<int32_t>(t), p.tasks[t].outputs, write_pairs);
    }
  }
  BufferUse u;
  u.reads = Csr::from_pairs(p.tasks.size(), read_pairs);
  u.writes = Csr::from_pairs(p.tasks.size(), write_pairs);
  for (auto& pr : read_pairs) std::swap(pr.first, pr.second);
  for (auto& pr : write_pairs) std::swap(pr.first, pr.second);
  u.readers = Csr::from_pairs(p.buffers.size(), read_pairs);
  u.writers = Csr::from_pairs(p.buffers.size(), write_pairs);
  return u;
}

bool BufferUse::task_writes(int32_t t, int32_t b) const {
  const auto row = writes.row(static_cast<size_t>(t));
  return std::binary_search(row.begin(), row.end(), b);
}

}  // namespace amk::detail
