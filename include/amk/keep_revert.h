// PROGRAM.md §3's keep/revert rules as a pure function of two verdicts, so the loop, the
// autoresearch driver and the tests share one reading of them:
//   REJECTED / TIMEOUT / CRASH / FAIL            -> revert (never keep an incorrect schedule)
//   PASS, latency >= 1 % lower than the incumbent -> keep (the new baseline)
//   PASS, within ±1 %                            -> revert, unless meaningfully simpler and also
//                                                   within 1 % of the best PASS measured so far
//                                                   (else each simpler keep could ratchet the
//                                                   incumbent up another 1 %)
//   PASS, worse                                  -> revert
// With no incumbent latency yet (the baseline failed), the first PASS is kept.
#pragma once

#include <optional>
#include <string>

#include "amk/verdict.h"

namespace amk::search {

inline constexpr double kImprovementThreshold = 0.01;  // "improved" = >= 1 % lower latency

struct KeepRevert {
  bool keep = false;
  std::string reason;  // one phrase: "improved 2.4%", "within noise (+0.3%), not simpler", ...
};

// `candidate` is simpler than `incumbent` when it is no worse on every simplicity measure
// (tasks, pages, pipelining_depth, fusion groups) and better on at least one.
bool meaningfully_simpler(const eval::Simplicity& candidate, const eval::Simplicity& incumbent);

// `incumbent` may be null (no incumbent at all: the candidate is the baseline). `best_us`: the
// lowest PASS latency the campaign has measured (none: the incumbent's).
KeepRevert decide(const eval::Verdict* incumbent, const eval::Verdict& candidate,
                  std::optional<double> best_us = std::nullopt);

}  // namespace amk::search
