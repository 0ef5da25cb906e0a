#include "schedule/fusion.h"

#include <string>
#include <vector>

#include "amk/lowering.h"

namespace amk::schedule {

namespace {

std::string spell(const std::vector<std::string>& group) {
  std::string names;
  for (const auto& n : group) names += (names.empty() ? "" : ", ") + n;
  return "[" + names + "]";
}

}  // namespace

Fusion resolve_fusion(const ScheduleConfig& config) {
  Fusion f;
  std::string unknown;
  for (const auto& g : config.fusion_grouping) {
    if (g == std::vector<std::string>{"rmsnorm", "gemv"}) {
      f.rmsnorm_gemv = true;
    } else if (g == std::vector<std::string>{"silu_mul", "gemv"}) {
      f.silu_mul_gemv = true;
    } else if (g == std::vector<std::string>{"gemv", "add"}) {
      f.gemv_add = true;
    } else if (g == std::vector<std::string>{"rope", "attention"}) {
      f.rope_attention = true;
    } else if (g == std::vector<std::string>{"gemv", "silu_mul"}) {
      f.gemv_silu_mul = true;
    } else if (g == std::vector<std::string>{"attention_combine", "gemv"}) {
      f.combine_gemv = true;
    } else if (g == std::vector<std::string>{"gemv", "silu_mul", "gemv"}) {
      f.glu_down = true;
    } else {
      unknown += (unknown.empty() ? "" : ", ") + spell(g);
    }
  }
  // Silently dropping a group would lower a different program than the one asked for.
  if (!unknown.empty())
    throw LoweringError("fusion_grouping cannot fuse " + unknown +
                         " (known groups: [rmsnorm, gemv], [silu_mul, gemv], [gemv, add], [rope, attention], "
                         "[gemv, silu_mul], [attention_combine, gemv], [gemv, silu_mul, gemv])");
  return f;
}

}  // namespace amk::schedule
