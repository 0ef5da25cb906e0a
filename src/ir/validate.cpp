// STUB: replaced by the validator implementation.
#include "amk/validate.h"
namespace amk {
std::string ValidationResult::report() const { return ok ? "[VALID]" : "[REJECTED]"; }
ValidationResult validate(const Program&) { ValidationResult r; r.errors.push_back("validate() not implemented"); return r; }
}  // namespace amk
