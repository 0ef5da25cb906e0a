// The launch knobs of a ScheduleConfig (threads_per_block, smem_bytes_per_block,
// pipelining_depth), checked against the target before anything is lowered.
#pragma once

#include "amk/ir.h"

namespace amk::schedule {

// Throws LoweringError naming the knob, its value and the limit it breaks.
void check_launch_config(const ScheduleConfig& config, const GpuTarget& target);

}  // namespace amk::schedule
