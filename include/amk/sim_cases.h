// The calibration cases of the timing simulator, from the files the GPU runs leave behind
// (docs/SIMULATOR.md, scripts/sim_calibrate.sh): a manifest names, per case, the model, the
// ScheduleConfig it was lowered with, the `amk bench --json` report (µs/token, context, positions)
// and optionally the `--profile-tsv` stamps of the same run. The program is lowered again here
// exactly as the bench lowered it, so a profile's task ids and labels must match it.
#pragma once

#include <string>
#include <vector>

#include "amk/ir.h"
#include "amk/sim_fit.h"

namespace amk::sim {

// Manifest: one case per line, tab- or space-separated, '#' starts a comment:
//   GROUP  NAME  MODEL  CONFIG  BENCH  [PROFILE]
// GROUP: the held-out unit (the model's name); NAME: the case's name in tables.
// MODEL: a preset name (amk make-model's: llama-3.2-1b, qwen3-0.6b, smollm2-135m, ...), a
//   checkpoint folder (its config.json; BF16 unless its torch_dtype says otherwise), or a
//   program JSON file (then CONFIG must be "-": the program is used as it is).
// CONFIG: a ScheduleConfig JSON file, or "-" for the derived default (what bench uses without
//   --config). BENCH: an `amk bench --json` report, or a number (the measured µs/token, with a
//   512-token context and the bench's positions), or "-" (profile only). PROFILE: an
//   `amk bench --profile --profile-tsv` file of the same run, or "-".
// Relative paths are relative to the manifest's folder. Throws std::invalid_argument naming the
// line on anything it cannot use (a missing file, an unknown preset, a config that does not
// lower, a profile of another program).
std::vector<SimCase> load_cases(const std::string& manifest_path, const GpuTarget& target);

// The stamps of the `amk bench --profile-tsv` file at `path` against `program` (read_profile_tsv:
// the file's tasks must be the program's). Throws std::invalid_argument naming `where` and the
// file when it is not a readable regular file, or the row that differs.
MeasuredProfile read_profile_tsv_file(const std::string& path, const Program& program,
                                      const std::string& where);

// The median `ceiling_gbs` of the bench reports the manifest names (0 when none has one): the
// device's measured read ceiling, which the fit keeps rather than fits.
double measured_ceiling_gbs(const std::string& manifest_path);

}  // namespace amk::sim
