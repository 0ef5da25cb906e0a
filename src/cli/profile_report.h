// `amk bench --profile`: where one decode step's time goes, from the CUDA VM's per-task
// %globaltimer stamps (CudaVM::last_profile). Tasks are grouped by label with the layer index and
// tile suffix removed ("layers.3.q_proj[t7]" -> "layers.*.q_proj"), so a row is one stage of
// every layer.
#pragma once

#include <string>
#include <vector>

#include "amk/cuda_vm.h"
#include "amk/ir.h"

namespace amk::cli {

// The table: per group, tasks, summed busy time (op begin -> signalled), summed wait time
// (wait begin -> op begin) and the group's wall span in the step; then the step's span and the
// per-SM busy spread. Empty when the profile is empty.
std::string profile_report(const Program& program, const std::vector<CudaVM::TaskTiming>& timing);

// The raw stamps as TSV (one row per task that ran: task, label, op, sm, est_bytes and the three
// stamps in ns from the step's first stamp), for analysis outside the tool (critical paths).
std::string profile_tsv(const Program& program, const std::vector<CudaVM::TaskTiming>& timing);

}  // namespace amk::cli
