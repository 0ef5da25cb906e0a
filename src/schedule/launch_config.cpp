#include "schedule/launch_config.h"

#include <fmt/format.h>

#include "amk/knob_space.h"
#include "amk/lowering.h"

namespace amk::schedule {

void check_launch_config(const ScheduleConfig& c, const GpuTarget& target) {
  // Every range lives in the knob space (amk/knob_space.h), the one source the config loader,
  // the CUDA loader and the search read too; the first problem is the error.
  const std::vector<std::string> problems = knob_range_problems(c, &target);
  if (!problems.empty()) throw LoweringError(problems.front());
}

}  // namespace amk::schedule
