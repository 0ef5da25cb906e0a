// STUB: replaced by the simulator implementation.
#include "amk/validate.h"
namespace amk {
CounterSimulation simulate_counters(const Program&) { return {}; }
std::vector<std::string> simulate_adversarial(const Program&, int) { return {"not implemented"}; }
}  // namespace amk
