// The whole-model oracle: our decode of a checkpoint against the expected outputs of
// transformers (tests/data/fixtures/README.md: expected.safetensors with prompt_ids,
// sequence_ids and logits [S, vocab]).
//
// Teacher-forced logits: at every position i of sequence_ids, the error is
// max_j |ours[j] - theirs[j]| / max_j |theirs[j]|, and must be <= tolerance; a NaN or infinity
// on either side is an infinite error (a FAIL, never a pass). Greedy: the
// continuation generated from prompt_ids must equal the rest of sequence_ids.
#pragma once

#include <cstdint>
#include <filesystem>
#include <stdexcept>
#include <vector>

#include "amk/checkpoint.h"
#include "amk/decoder.h"
#include "amk/ir.h"

namespace amk {

inline constexpr double kOracleTolerance = 1e-4;

// expected.safetensors is missing a tensor or its tensors disagree (shapes, vocab, lengths).
class OracleInputError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct ExpectedOutputs {
  std::vector<int64_t> prompt_ids;
  std::vector<int64_t> sequence_ids;
  std::vector<float> logits;  // [sequence_ids.size(), vocab], row-major
  int64_t vocab = 0;
};
// Throws OracleInputError or SafetensorsError.
ExpectedOutputs load_expected(const std::filesystem::path& expected_safetensors);

struct OracleReport {
  std::vector<double> errors;  // per position of sequence_ids
  int64_t worst_position = -1;
  double worst_error = 0.0;
  std::vector<int64_t> expected_continuation, continuation;
  int64_t first_divergence = -1;  // index into the continuation, -1 when identical
  // NaN or infinite values among the expected logits and among ours. Either fails the logits
  // (their positions get an infinite error); non-finite logits of ours skip the greedy run
  // (continuation_ok false, continuation empty): no token can be chosen from them.
  int64_t nonfinite_expected = 0, nonfinite_ours = 0;
  bool logits_ok = false, continuation_ok = false;
  bool pass() const { return logits_ok && continuation_ok; }
};

// Runs `program` (a lower() output for the checkpoint) on the ReferenceVM. Its max_context must
// hold sequence_ids. Throws DecodeError / CheckpointError / OracleInputError.
OracleReport run_oracle(const Checkpoint& checkpoint, const Program& program,
                        const ExpectedOutputs& expected, double tolerance = kOracleTolerance);
// The same on any decoder (the CUDA VM's too); it is reset() first.
OracleReport run_oracle(Decoder& decoder, const ExpectedOutputs& expected,
                        double tolerance = kOracleTolerance);

}  // namespace amk
