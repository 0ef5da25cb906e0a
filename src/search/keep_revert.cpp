#include "amk/keep_revert.h"

#include <fmt/format.h>

#include <algorithm>

namespace amk::search {

bool meaningfully_simpler(const eval::Simplicity& c, const eval::Simplicity& i) {
  const bool no_worse = c.tasks <= i.tasks && c.pages <= i.pages &&
                        c.pipelining_depth <= i.pipelining_depth &&
                        c.fusion_groups <= i.fusion_groups;
  const bool better = c.tasks < i.tasks || c.pages < i.pages ||
                      c.pipelining_depth < i.pipelining_depth || c.fusion_groups < i.fusion_groups;
  return no_worse && better;
}

KeepRevert decide(const eval::Verdict* incumbent, const eval::Verdict& candidate,
                  std::optional<double> best_us) {
  using eval::Correctness;
  if (!candidate.pass())
    return {false, fmt::format("{}: never kept", eval::name_of(candidate.correctness))};
  if (!candidate.has_latency()) return {false, "PASS without a latency: nothing to compare"};
  if (incumbent == nullptr) return {true, "baseline"};
  if (!incumbent->has_latency()) return {true, "first PASS (the incumbent has no latency)"};
  const double before = *incumbent->latency_us, after = *candidate.latency_us;
  const double change = (after - before) / before;  // negative = faster
  if (change <= -kImprovementThreshold)
    return {true, fmt::format("improved {:.1f}%", -change * 100)};
  if (change < kImprovementThreshold) {
    if (meaningfully_simpler(candidate.simplicity, incumbent->simplicity)) {
      const double best = std::min(before, best_us.value_or(before));
      if (after >= best * (1 + kImprovementThreshold))
        return {false, fmt::format("simpler and within noise ({:+.1f}%) of the incumbent, but "
                                   "{:+.1f}% off the best measured",
                                   change * 100, (after - best) / best * 100)};
      return {true, fmt::format("within noise ({:+.1f}%) and simpler", change * 100)};
    }
    return {false, fmt::format("within noise ({:+.1f}%), not simpler", change * 100)};
  }
  return {false, fmt::format("worse ({:+.1f}%)", change * 100)};
}

}  // namespace amk::search
