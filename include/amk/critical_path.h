// Where one decode step's time goes, by region: the step's critical path (the chain of tasks
// that ended last, each reached through the latest-ending task it waited on or the one before it
// on its SM) split into attention, MLP, lm_head and the rest. `amk campaign status` shows it so
// the next experiments aim at the largest region (PROGRAM.md §3 move-on rule 3, Amdahl).
#pragma once

#include <string_view>
#include <vector>

#include "amk/ir.h"
#include "amk/step_trace.h"
#include "amk/verdict.h"

namespace amk::eval {

enum class Region { Attention, Mlp, LmHead, Other };

// A task label's region: lm_head, final_norm and sample_argmax are the head; a layer's gate /
// up / down / silu_mul / post-attention norm are the MLP, the rest of a layer is attention;
// anything else (the embedding) is other.
Region region_of_label(std::string_view label);

// Shares of the critical path from per-task stamps (one per task, list order; a task whose
// op_end is 0 did not run). Unknown (known = false) when nothing ran. Throws
// std::invalid_argument on a stamps / tasks size mismatch.
RegionShares critical_path_shares(const Program& program, const std::vector<TaskStamps>& stamps);

}  // namespace amk::eval
