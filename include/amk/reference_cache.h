// Reference logits kept on disk between runs of `amk bench` on one machine. The CPU reference's
// step is the slow part of a checked benchmark (llama-3.2-1b ~14 s, llama-3.1-8b ~2 minutes on
// 16 cores), and an A/B (scripts/gpu_ab.sh) repeats the same checks for every binary and every
// round. The cached logits are those of the plain lowering (plain_schedule_config(), the oracle
// `amk eval` uses), so every schedule is checked against the same numbers, not against itself.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "amk/checkpoint.h"
#include "amk/ir.h"

namespace amk::eval {

// What identifies a checkpoint: every regular file of the folder (or the one .gguf file) by
// relative name, size and content (small files whole, large ones by ~4 MiB of evenly spaced
// 4 KiB blocks), so the same checkpoint written again (a preset generated on a fresh machine)
// keeps its key and one with other weights or another config gets another. Throws
// std::runtime_error naming what cannot be read.
std::string checkpoint_fingerprint(const std::filesystem::path& checkpoint);

// The key of a run's reference logits: the checkpoint's fingerprint, the weight dtype, the
// context and the content of the plain lowering the logits come from (so a lowering that changed
// between two binaries does not share entries). Throws as checkpoint_fingerprint.
std::string reference_cache_key(const std::filesystem::path& checkpoint, DType weights,
                                int64_t context, const Program& plain);

// The reference's state at a check step depends on the steps before it (a position right after
// the previous one is stepped from it; any other is seek()ed to a seeded cache), so an entry is
// named by the whole prefix of the check list up to it: "p0:t0,p1:t1,...". Entries of another
// list are shared only where that history is the same.
std::string check_step_name(const std::vector<int64_t>& positions,
                            const std::vector<int64_t>& tokens, size_t index);

// One entry per (key, step name) in `dir`, a file whose header repeats both, so a hash
// collision, a truncated or foreign file, or logits of another length read as a miss, never as
// numbers. Writes go to a temporary file renamed into place (concurrent runs are safe).
class ReferenceCache {
 public:
  ReferenceCache(std::filesystem::path dir, std::string key);

  const std::string& key() const { return key_; }
  // The logits stored for this step, if a whole entry for this key with `vocab` of them is there.
  std::optional<std::vector<float>> load(const std::string& step, size_t vocab) const;
  // Every step of a check list, or nothing (a reference computed after some steps were read
  // from here would start from the wrong state): the callers use all or recompute all.
  std::optional<std::vector<std::vector<float>>> load_all(const std::vector<int64_t>& positions,
                                                         const std::vector<int64_t>& tokens,
                                                         size_t vocab) const;
  // False (and why) if the entry cannot be written; the run goes on without it.
  bool store(const std::string& step, const std::vector<float>& logits, std::string* why) const;
  std::filesystem::path entry_path(const std::string& step) const;

 private:
  std::filesystem::path dir_;
  std::string key_;
};

// The reference's logits at every check step: `plain` (a lower() output for this checkpoint)
// on the reference VM, stepped where a position follows the previous one and seek()ed to the
// seeded cache elsewhere, as the GPU side does; read whole from `cache` where it holds them,
// else computed and kept there (a step that could not be stored is computed again next time). One decoder,
// dropped before the call returns. Throws DecodeError (a step past step_timeout_s included).
struct ReferenceCheckLogits {
  std::vector<std::vector<float>> logits;  // one per check step
  bool from_cache = false;
  std::string not_kept;  // why the first step that could not be stored was not; empty: all were
};
ReferenceCheckLogits reference_check_logits(const Checkpoint& checkpoint, Program plain,
                                            const std::vector<int64_t>& positions,
                                            const std::vector<int64_t>& tokens,
                                            const ReferenceCache* cache, double step_timeout_s);

}  // namespace amk::eval
