// What the parts of validate() share: the message sink, message formatting helpers, and the
// buffer-use indexes the race and page checks are built on. Internal to src/ir.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "amk/ir.h"
#include "amk/validate.h"
#include "ir/csr.h"
#include "ir/dependency_graph.h"
#include "ir/reachability.h"

namespace amk::detail {

struct Diagnostics {
  std::vector<std::string>& errors;
  std::vector<std::string>& warnings;
  void error(std::string msg) { errors.push_back(std::move(msg)); }
  void warn(std::string msg) { warnings.push_back(std::move(msg)); }
};

// "3 (label)" with the op name standing in for an empty label; "task " is the caller's.
std::string task_ref(const Program& p, int32_t t);
// "#5 ('name')"
std::string buffer_ref(const Program& p, int32_t b);
// "[3, 4, 9]", eliding the middle of a long list so one message stays short. With `total`
// larger than ids.size(), ids are the first few of `total` and the rest are counted.
std::string id_list(const std::vector<int32_t>& ids, size_t total = 0);

template <typename E>
bool enum_in_range(E v, int count) {
  const auto i = static_cast<int64_t>(v);
  return i >= 0 && i < count;
}

// Which task reads and writes which buffer. Built only when buffer ids are dense; references
// to missing buffers are left out (they are reported once, by the structural checks).
struct BufferUse {
  Csr reads;    // task -> distinct buffers it reads, sorted
  Csr writes;   // task -> distinct buffers it writes, sorted
  Csr readers;  // buffer -> tasks reading it, task order
  Csr writers;  // buffer -> tasks writing it, task order

  // `without_accumulations`: leave out each accumulating task's write of its accumulator
  // (RMSNORM_GEMV_GLU_DOWN_TILE's output 0), which check_accumulations checks instead.
  static BufferUse build(const Program& p, bool without_accumulations = false);
  bool task_writes(int32_t t, int32_t b) const;
};

struct CheckInputs {
  const Program& program;
  const BufferUse& use;
  const DependencyGraph& graph;
  HappensBefore& hb;  // over an acyclic graph
  Diagnostics& diag;
};

// Race-freedom (IR_SPEC §3.2): RAW provenance, KV_CACHE ordering, multi-writer WAW.
void check_races(const CheckInputs& in);
// Accumulation (RMSNORM_GEMV_GLU_DOWN_TILE): the tasks that add into one buffer share a counter
// and are not ordered among themselves (their adds commute); every other writer and every reader
// of the buffer is ordered before all of them or after all of them, and some writer before them
// gives the sum its initial value. check_races runs on a BufferUse without the accumulating
// writes, so it proves the initial value's writers and the readers after the sum as usual.
// `use` is the full one.
bool has_accumulations(const Program& p);
void check_accumulations(const CheckInputs& in);
// Page aliasing (IR_SPEC §3.3): live ranges of buffers sharing a page must be ordered.
void check_page_aliasing(const CheckInputs& in);
// Params against the shapes of the buffers they address (GEMV tiles, norms, KV_APPEND,
// attention windows). Needs dense buffer ids.
void check_task_params(const Program& p, Diagnostics& diag);
// The page table itself: references, sizes, kinds. Needs no graph.
void check_page_table(const Program& p, Diagnostics& diag);

}  // namespace amk::detail
