// The CUDA VM of a build made without nvcc: every entry point of amk/cuda_vm.h says so instead of
// pretending, so the command, the oracle and the GPU tests build and report the same way
// everywhere. (name_of(CudaStatus) and CudaDecoder live in src/runtime/cuda_decoder.cpp, which
// both builds compile.)
#include <string>

#include "amk/cuda_vm.h"

namespace amk {

namespace {

const std::string kNotBuilt = "this amk was built without CUDA (no nvcc at configure time)";

[[noreturn]] void not_built() { throw CudaVmError(CudaStatus::LaunchError, kNotBuilt); }

}  // namespace

CudaAvailability cuda_availability() {
  CudaAvailability a;
  a.built = false;
  a.usable = false;
  a.message = kNotBuilt;
  return a;
}

double cuda_stream_read_gbs(int64_t, int, StreamReadMethod) { not_built(); }

// Nothing is ever constructed, but the destructor of unique_ptr<Impl> needs a complete type.
struct CudaVM::Impl {};

CudaVM::CudaVM(Program, const CudaVmOptions&) { not_built(); }
CudaVM::~CudaVM() = default;
const Program& CudaVM::program() const { not_built(); }
const Buffer* CudaVM::find_buffer(std::string_view) const { not_built(); }
void CudaVM::set_buffer(int64_t, const Tensor&) { not_built(); }
Tensor CudaVM::read_buffer(int64_t) const { not_built(); }
void CudaVM::zero_kv_cache() { not_built(); }
CudaRunResult CudaVM::run(int64_t, int, std::vector<int32_t>*) { not_built(); }
void CudaVM::set_profiling(bool) { not_built(); }
std::vector<CudaVM::TaskTiming> CudaVM::last_profile() const { not_built(); }

}  // namespace amk
