// The knobs of a ScheduleConfig checked against their ranges in the knob space
// (amk/knob_space.h) and the target's caps, before anything is lowered.
#pragma once

#include "amk/ir.h"

namespace amk::schedule {

// Throws LoweringError naming the knob, its value and the limit it breaks.
void check_launch_config(const ScheduleConfig& config, const GpuTarget& target);

}  // namespace amk::schedule
