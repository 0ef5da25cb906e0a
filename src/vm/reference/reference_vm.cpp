// STUB: replaced by the ReferenceVM implementation.
#include "amk/reference_vm.h"
namespace amk {
std::string_view name_of(VmRunResult::Status) { return "?"; }
ReferenceVM::ReferenceVM(Program p) : program_(std::move(p)), validation_(validate(program_)) {}
void ReferenceVM::set_buffer(int64_t, Tensor) {}
const Tensor& ReferenceVM::buffer(int64_t id) const { return storage_.at(static_cast<size_t>(id)); }
VmRunResult ReferenceVM::run(const VmOptions&) { VmRunResult r; r.status = VmRunResult::Status::Rejected; return r; }
}  // namespace amk
