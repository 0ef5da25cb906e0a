// The host loader of the CUDA VM (docs/CUDA_VM.md): validates and marshals a Program, places its
// buffers in device memory, uploads the tables once, and runs launches of the persistent
// megakernel under a host watchdog. Host code only (compiled by the C++ compiler against the CUDA
// runtime): the kernel lives in megakernel.cu.
//
// Every memory operation goes through the VM's own non-blocking stream and is synchronised
// before the call returns: the legacy default stream does not order against a non-blocking one,
// so a plain cudaMemset / cudaMemcpy before a launch on `stream` could still be in flight when
// the kernel reads the memory.
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "amk/cuda_vm.h"
#include "amk/validate.h"
#include "vm/cuda/marshal.h"
#include "vm/cuda/megakernel.h"

namespace amk {

// name_of(CudaStatus) lives in src/runtime/cuda_decoder.cpp, compiled with and without CUDA.

namespace {

using Clock = std::chrono::steady_clock;

// How long the watchdog polls between event queries, and how long it waits for the CTAs to
// leave once the abort flag is raised.
constexpr auto kPollInterval = std::chrono::microseconds(20);
constexpr double kAbortGraceSeconds = 5.0;
// The device word's values (device_common.cuh): 1 = watchdog abort, 0x100 + code = op error.
constexpr uint32_t kAbortByWatchdog = 1;
constexpr uint32_t kOpErrorBase = 0x100;
// Counters are uint32 and compared against e * increment + threshold: the host zeroes them well
// before the largest threshold could leave the signed range (docs/CUDA_VM.md).
constexpr uint64_t kCounterLimit = uint64_t{1} << 31;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Throws CudaVmError naming the call; an allocation failure is the program being too large for
// this device (Rejected), anything else is CUDA refusing (LaunchError).
void check(cudaError_t err, std::string_view call) {
  if (err == cudaSuccess) return;
  const CudaStatus status =
      err == cudaErrorMemoryAllocation ? CudaStatus::Rejected : CudaStatus::LaunchError;
  throw CudaVmError(status, fmt::format("{}: {} ({})", call, cudaGetErrorString(err),
                                        cudaGetErrorName(err)));
}

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? "," : "") + std::to_string(shape[i]);
  return s + "]";
}

bool is_float_dtype(DType d) {
  return d == DType::F32 || d == DType::F16 || d == DType::BF16 || d == DType::F8E4M3 ||
         d == DType::F8E5M2;
}

// `value` in `dtype`, converted element by element with the Tensor helpers (which round to
// nearest even, as the ReferenceVM stores). The common cases skip the conversion entirely.
Tensor convert_to(const Tensor& value, DType dtype) {
  if (value.dtype == dtype) return value;
  Tensor out = Tensor::zeros(dtype, value.shape);
  const int64_t n = value.numel();
  if (value.dtype == DType::F32 && dtype == DType::BF16) {  // the weight path: keep it fast
    const auto* src = reinterpret_cast<const float*>(value.bytes.data());
    auto* dst = reinterpret_cast<uint16_t*>(out.bytes.data());
    for (int64_t i = 0; i < n; ++i) dst[i] = float_to_bf16_bits(src[i]);
    return out;
  }
  if (is_float_dtype(dtype) && is_float_dtype(value.dtype)) {
    for (int64_t i = 0; i < n; ++i) out.set(i, value.get(i));
  } else {
    for (int64_t i = 0; i < n; ++i) out.set_int(i, value.get_int(i));
  }
  return out;
}

bool is_settable(BufferKind k) {
  return k == BufferKind::WEIGHT || k == BufferKind::CONST || k == BufferKind::IO_INPUT ||
         k == BufferKind::KV_CACHE;
}

struct DeviceLimits {
  int sm_count = 0;
  int smem_optin = 0;
  bool cooperative = false;
  int cc_major = 0, cc_minor = 0;
};

DeviceLimits device_limits(int device) {
  DeviceLimits l;
  int coop = 0;
  check(cudaDeviceGetAttribute(&l.sm_count, cudaDevAttrMultiProcessorCount, device),
        "cudaDeviceGetAttribute(MultiProcessorCount)");
  check(cudaDeviceGetAttribute(&l.smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device),
        "cudaDeviceGetAttribute(MaxSharedMemoryPerBlockOptin)");
  check(cudaDeviceGetAttribute(&coop, cudaDevAttrCooperativeLaunch, device),
        "cudaDeviceGetAttribute(CooperativeLaunch)");
  l.cooperative = coop != 0;
  check(cudaDeviceGetAttribute(&l.cc_major, cudaDevAttrComputeCapabilityMajor, device),
        "cudaDeviceGetAttribute(ComputeCapabilityMajor)");
  check(cudaDeviceGetAttribute(&l.cc_minor, cudaDevAttrComputeCapabilityMinor, device),
        "cudaDeviceGetAttribute(ComputeCapabilityMinor)");
  return l;
}

}  // namespace

// ---- availability ------------------------------------------------------------------------------

CudaAvailability cuda_availability() {
  CudaAvailability a;
  a.built = true;
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    // Without a driver the runtime says "CUDA driver version is insufficient": name what is
    // actually missing (driver version 0 means no driver is installed).
    int driver = 0;
    const bool has_driver = cudaDriverGetVersion(&driver) == cudaSuccess && driver > 0;
    if (err == cudaErrorInsufficientDriver && !has_driver)
      a.message = fmt::format("no NVIDIA driver or GPU found (cudaGetDeviceCount: {})",
                              cudaGetErrorString(err));
    else if (err == cudaErrorInsufficientDriver)
      a.message = fmt::format("the NVIDIA driver (CUDA {}.{}) is older than this build's CUDA "
                              "runtime {}.{} (cudaGetDeviceCount: {})",
                              driver / 1000, driver % 1000 / 10, CUDART_VERSION / 1000,
                              CUDART_VERSION % 1000 / 10, cudaGetErrorString(err));
    else if (err == cudaErrorNoDevice)
      a.message = fmt::format("no NVIDIA GPU found (cudaGetDeviceCount: {})", cudaGetErrorString(err));
    else
      a.message = fmt::format("no CUDA device: cudaGetDeviceCount: {}", cudaGetErrorString(err));
    return a;
  }
  if (count == 0) {
    a.message = "no NVIDIA GPU found (cudaGetDeviceCount found none)";
    return a;
  }
  cudaDeviceProp prop{};
  const cudaError_t perr = cudaGetDeviceProperties(&prop, 0);
  if (perr != cudaSuccess) {
    a.message = fmt::format("no CUDA device: cudaGetDeviceProperties: {}", cudaGetErrorString(perr));
    return a;
  }
  a.device_name = prop.name;
  a.sm_count = prop.multiProcessorCount;
  a.cc_major = prop.major;
  a.cc_minor = prop.minor;
  a.global_mem_bytes = static_cast<int64_t>(prop.totalGlobalMem);
  a.message = fmt::format("{}, {} SMs, sm_{}{}, {:.1f} GiB", a.device_name, a.sm_count, a.cc_major,
                          a.cc_minor, double(a.global_mem_bytes) / double(int64_t{1} << 30));
  // The kernel is compiled for sm_90a only: arch-specific SASS with no PTX another generation
  // could JIT, so any compute capability other than 9.x has no kernel image to launch.
  if (a.cc_major != 9) {
    a.message += fmt::format(": the megakernel is built for sm_90a only (Hopper, compute "
                             "capability 9.x); this device is sm_{}{}",
                             a.cc_major, a.cc_minor);
    return a;
  }
  a.usable = true;
  return a;
}

// ---- the streaming-read ceiling ----------------------------------------------------------------

double cuda_stream_read_gbs(int64_t bytes, int repeats, StreamReadMethod method) {
  if (bytes < 16 || repeats < 1)
    throw std::invalid_argument(fmt::format(
        "cuda_stream_read_gbs: bytes {} must be >= 16 and repeats {} >= 1", bytes, repeats));
  const CudaAvailability a = cuda_availability();
  if (!a.usable) throw CudaVmError(CudaStatus::LaunchError, a.message);
  bytes = bytes / 16 * 16;  // the kernel reads whole 16-byte vectors

  // RAII for the handful of objects, so an error on any call frees what came before.
  struct Resources {
    void* src = nullptr;
    float* sink = nullptr;
    cudaStream_t stream = nullptr;
    std::vector<cudaEvent_t> events;
    ~Resources() {
      for (cudaEvent_t e : events) cudaEventDestroy(e);
      if (stream) cudaStreamDestroy(stream);
      cudaFree(sink);
      cudaFree(src);
    }
  } r;
  check(cudaSetDevice(0), "cudaSetDevice(0)");
  check(cudaMalloc(&r.src, size_t(bytes)), fmt::format("cudaMalloc(stream-read source, {} bytes)", bytes));
  check(cudaMalloc(reinterpret_cast<void**>(&r.sink), 4096 * sizeof(float)),
        "cudaMalloc(stream-read sink)");
  check(cudaStreamCreateWithFlags(&r.stream, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  // Non-zero bytes: a page of zeros could be served without touching DRAM on some parts.
  check(cudaMemsetAsync(r.src, 0x3c, size_t(bytes), r.stream), "cudaMemsetAsync(stream-read source)");
  check(cudaStreamSynchronize(r.stream), "cudaStreamSynchronize(after memset)");

  int64_t bytes_read = bytes;
  const auto launch = [&] {
    if (method.ring_chunk_bytes == 0) return cuda::stream_read_launch(r.src, bytes, r.sink, r.stream);
    return cuda::bulk_ring_read_launch(r.src, bytes, method.ring_chunk_bytes, method.ring_stages,
                                       r.sink, r.stream, &bytes_read);
  };
  check(launch(), "stream_read_launch(warm-up)");
  check(cudaStreamSynchronize(r.stream), "cudaStreamSynchronize(warm-up)");

  r.events.resize(size_t(repeats) + 1, nullptr);
  for (cudaEvent_t& e : r.events) check(cudaEventCreate(&e), "cudaEventCreate");
  check(cudaEventRecord(r.events[0], r.stream), "cudaEventRecord");
  for (int i = 0; i < repeats; ++i) {
    check(launch(), "stream_read_launch");
    check(cudaEventRecord(r.events[size_t(i) + 1], r.stream), "cudaEventRecord");
  }
  check(cudaStreamSynchronize(r.stream), "cudaStreamSynchronize(timed passes)");
  check(cudaGetLastError(), "stream_read kernel");
  std::vector<float> ms(static_cast<size_t>(repeats), 0.0f);
  for (int i = 0; i < repeats; ++i)
    check(cudaEventElapsedTime(&ms[size_t(i)], r.events[size_t(i)], r.events[size_t(i) + 1]),
          "cudaEventElapsedTime");
  std::sort(ms.begin(), ms.end());
  const double median_ms = repeats % 2 ? ms[size_t(repeats / 2)]
                                       : 0.5 * (ms[size_t(repeats / 2 - 1)] + ms[size_t(repeats / 2)]);
  if (!(median_ms > 0.0))
    throw CudaVmError(CudaStatus::LaunchError, "stream_read: the timed passes took no time");
  return double(bytes_read) / (median_ms * 1e-3) / 1e9;
}

// ---- the VM --------------------------------------------------------------------------------------

struct CudaVM::Impl {
  Program program;
  CudaVmOptions options;
  cuda::MarshalledProgram mp;
  std::unordered_map<int64_t, size_t> position_of_id;  // IR buffer id -> ABI position

  // Device memory. own[i] is buffer i's allocation (nullptr for arena buffers and the aliased
  // token buffer); table is the amk_buffer_t array as uploaded (host copy keeps the pointers).
  std::vector<void*> own;
  void* arena = nullptr;
  amk_buffer_t* d_buffers = nullptr;
  amk_instruction_t* d_instructions = nullptr;
  std::vector<amk_task_record_t> records;  // host copy of d_records (alive while it uploads)
  amk_task_record_t* d_records = nullptr;
  int32_t* d_queue_offset = nullptr;
  int32_t* d_queue = nullptr;
  uint32_t* d_increment = nullptr;
  amk_counter_t* d_counters = nullptr;
  uint32_t* d_abort = nullptr;
  int32_t* d_token_history = nullptr;
  int64_t token_history_capacity = 0;
  uint64_t* d_profile = nullptr;  // AMK_PROFILE_STAMPS per instruction while profiling is on
  uint32_t* h_abort_value = nullptr;  // pinned: the watchdog's write must not wait for staging

  cudaStream_t stream = nullptr;        // launches and every memory operation
  cudaStream_t abort_stream = nullptr;  // only the watchdog's flag write, while a kernel runs
  cudaEvent_t done = nullptr;

  int64_t max_seq = -1;  // rows of the KV cache, -1 without one
  uint32_t max_increment = 0;
  uint32_t epoch = 0;

  // A kernel that ignored the abort flag still owns the GPU: nothing may block on it again, so
  // every later call reports this instead, and the destructor leaks rather than hangs.
  bool hung = false;
  // A sticky CUDA error (a fault inside the kernel) leaves the context unusable.
  std::string broken;

  ~Impl() {
    if (hung) return;
    cudaSetDevice(options.device);
    if (stream) cudaStreamSynchronize(stream);
    for (void* p : own) cudaFree(p);
    cudaFree(arena);
    cudaFree(d_buffers);
    cudaFree(d_instructions);
    cudaFree(d_records);
    cudaFree(d_queue_offset);
    cudaFree(d_queue);
    cudaFree(d_increment);
    cudaFree(d_counters);
    cudaFree(d_abort);
    cudaFree(d_token_history);
    cudaFree(d_profile);
    if (h_abort_value) cudaFreeHost(h_abort_value);
    if (done) cudaEventDestroy(done);
    if (abort_stream) cudaStreamDestroy(abort_stream);
    if (stream) cudaStreamDestroy(stream);
  }

  void use_device() const { check(cudaSetDevice(options.device), "cudaSetDevice"); }

  template <typename T>
  T* alloc(int64_t bytes, std::string_view what) {
    if (bytes <= 0) return nullptr;
    void* p = nullptr;
    check(cudaMalloc(&p, size_t(bytes)), fmt::format("cudaMalloc({}, {} bytes)", what, bytes));
    return static_cast<T*>(p);
  }

  template <typename T>
  T* upload(const std::vector<T>& v, std::string_view what) {
    T* p = alloc<T>(int64_t(v.size() * sizeof(T)), what);
    if (p)
      check(cudaMemcpyAsync(p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice, stream),
            fmt::format("cudaMemcpyAsync({})", what));
    return p;
  }

  void sync(std::string_view after) {
    check(cudaStreamSynchronize(stream), fmt::format("cudaStreamSynchronize(after {})", after));
  }

  void load();
  void zero_counters_and_flag();
  CudaRunResult launch(int64_t position, int n_steps, std::vector<int32_t>* tokens);
  const Buffer& record(int64_t id) const;
  size_t position(int64_t id) const;
};

void CudaVM::Impl::load() {
  if (!options.testing_skip_validation) {
    const ValidationResult v = validate(program);
    if (!v.ok) throw CudaVmError(CudaStatus::Rejected, v.report());
  }
  const CudaAvailability a = cuda_availability();
  if (!a.usable) throw CudaVmError(CudaStatus::LaunchError, a.message);
  int count = 0;
  check(cudaGetDeviceCount(&count), "cudaGetDeviceCount");
  if (options.device < 0 || options.device >= count)
    throw CudaVmError(CudaStatus::LaunchError,
                      fmt::format("CudaVmOptions.device {} is not one of the {} devices",
                                  options.device, count));
  use_device();
  const DeviceLimits limits = device_limits(options.device);
  if (limits.cc_major != 9)  // cuda_availability() looked at device 0 only
    throw CudaVmError(CudaStatus::LaunchError,
                      fmt::format("device {} is sm_{}{}: the megakernel is built for sm_90a only",
                           options.device, limits.cc_major, limits.cc_minor));
  if (!limits.cooperative)
    throw CudaVmError(CudaStatus::LaunchError,
                      fmt::format("device {} does not support cooperative launches", options.device));

  try {
    cuda::MarshalLimits ml;
    ml.smem_bytes_per_block_optin = limits.smem_optin;
    ml.num_sms = limits.sm_count;
    mp = cuda::marshal(program, ml);
    // Without the ring every GEMV tile reads its weights from global memory (the consumers'
    // own 16-byte loads): for tools that cannot see mbarrier/bulk-copy ordering (racecheck).
    if (!options.weight_ring) mp.layout.ring_stages = 0;
  } catch (const cuda::MarshalError& e) {
    throw CudaVmError(CudaStatus::Rejected, fmt::format("the CUDA VM cannot run this program: {}", e.what()));
  }

  int blocks_per_sm = 0;
  check(cuda::megakernel_prepare(mp.layout, &blocks_per_sm),
        fmt::format("megakernel_prepare({} consumer threads, {} bytes of shared memory)",
                    mp.layout.consumer_threads, cuda::megakernel_smem_bytes(mp.layout)));
  // A cooperative launch needs every CTA resident at once (the CTAs wait on each other).
  if (mp.n_sms > limits.sm_count || int64_t(mp.n_sms) > int64_t(blocks_per_sm) * limits.sm_count)
    throw CudaVmError(
        CudaStatus::Rejected,
        fmt::format("the program needs {} co-resident CTAs; the device has {} SMs and fits {} CTA(s) "
                    "of {} threads + {} bytes of shared memory per SM",
                    mp.n_sms, limits.sm_count, blocks_per_sm, cuda::megakernel_cta_threads(mp.layout),
                    cuda::megakernel_smem_bytes(mp.layout)));

  // A cluster launch (docs/CLUSTER_TP.md stage 3): whole clusters, every one resident.
  if (options.cluster_size > 1) {
    if (mp.n_sms % options.cluster_size != 0)
      throw CudaVmError(CudaStatus::Rejected,
                        fmt::format("the program's {} CTAs are not whole clusters of {}", mp.n_sms,
                                    options.cluster_size));
    int clusters = 0;
    check(cuda::megakernel_resident_clusters(mp.layout, options.cluster_size, &clusters),
          fmt::format("cudaOccupancyMaxActiveClusters(clusters of {})", options.cluster_size));
    if (int64_t(clusters) * options.cluster_size < mp.n_sms)
      throw CudaVmError(
          CudaStatus::Rejected,
          fmt::format("the program needs {} resident clusters of {} CTAs; the device keeps {} "
                      "of {} threads + {} bytes of shared memory a CTA",
                      mp.n_sms / options.cluster_size, options.cluster_size, clusters,
                      cuda::megakernel_cta_threads(mp.layout), cuda::megakernel_smem_bytes(mp.layout)));
  }

  check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreateWithFlags(launch)");
  check(cudaStreamCreateWithFlags(&abort_stream, cudaStreamNonBlocking),
        "cudaStreamCreateWithFlags(abort)");
  check(cudaEventCreateWithFlags(&done, cudaEventDisableTiming), "cudaEventCreateWithFlags");
  check(cudaMallocHost(reinterpret_cast<void**>(&h_abort_value), sizeof(uint32_t)),
        "cudaMallocHost(abort value)");

  // ---- buffers ----
  const size_t n = mp.buffers.size();
  for (size_t i = 0; i < n; ++i) position_of_id[mp.buffer_ids[i]] = i;
  // Multi-step launches feed each step's argmax to the next step's EMBED: the token buffer IS
  // the next_token buffer's memory (docs/CUDA_VM.md "Multi-step launches").
  const bool alias_token = mp.token_buffer >= 0 && mp.next_token_buffer >= 0 && mp.sink_instruction >= 0;
  own.assign(n, nullptr);
  for (size_t i = 0; i < n; ++i) {
    const Buffer& b = record(mp.buffer_ids[i]);
    if (b.kind == BufferKind::KV_CACHE && max_seq < 0) max_seq = kv_cache_positions(b);
    if (mp.placement[i].where != cuda::BufferPlacement::Where::Own) continue;
    if (alias_token && int32_t(i) == mp.token_buffer) continue;
    own[i] = alloc<void>(mp.placement[i].nbytes, fmt::format("buffer '{}'", b.name));
    if (own[i])  // weights and caches start at zero: a forgotten set_buffer reads zeros, not junk
      check(cudaMemsetAsync(own[i], 0, size_t(mp.placement[i].nbytes), stream),
            fmt::format("cudaMemsetAsync(buffer '{}')", b.name));
  }
  arena = alloc<void>(mp.arena_bytes, "scratch arena");
  // 0xFF bytes are a NaN in F32 and BF16 and -1 as an I32: a read before its write shows.
  if (arena) check(cudaMemsetAsync(arena, 0xFF, size_t(mp.arena_bytes), stream), "cudaMemsetAsync(arena)");
  for (size_t i = 0; i < n; ++i) {
    const cuda::BufferPlacement& pl = mp.placement[i];
    mp.buffers[i].ptr = pl.where == cuda::BufferPlacement::Where::Own
                            ? own[i]
                            : static_cast<char*>(arena) + pl.arena_offset;
  }
  if (alias_token) mp.buffers[size_t(mp.token_buffer)].ptr = mp.buffers[size_t(mp.next_token_buffer)].ptr;

  // ---- tables, counters, flag ----
  d_buffers = upload(mp.buffers, "buffer table");
  d_instructions = upload(mp.instructions, "instructions");
  d_queue_offset = upload(mp.sm_queue_offset, "sm_queue_offset");
  d_queue = upload(mp.sm_queue, "sm_queue");
  records = cuda::task_records(mp, mp.buffers);  // after every descriptor has its pointer
  d_records = upload(records, "task records");
  d_increment = upload(mp.counter_step_increment, "counter_step_increment");
  for (uint32_t inc : mp.counter_step_increment) max_increment = std::max(max_increment, inc);
  d_counters = alloc<amk_counter_t>(int64_t(mp.counter_step_increment.size() * sizeof(amk_counter_t)),
                                    "counters");
  d_abort = alloc<uint32_t>(sizeof(uint32_t), "abort flag");
  zero_counters_and_flag();  // synchronises the stream: everything above has landed
}

void CudaVM::Impl::zero_counters_and_flag() {
  if (d_counters)
    check(cudaMemsetAsync(d_counters, 0, mp.counter_step_increment.size() * sizeof(amk_counter_t), stream),
          "cudaMemsetAsync(counters)");
  check(cudaMemsetAsync(d_abort, 0, sizeof(uint32_t), stream), "cudaMemsetAsync(abort flag)");
  sync("zeroing counters and the abort flag");
  epoch = 0;
}

const Buffer& CudaVM::Impl::record(int64_t id) const {
  for (const Buffer& b : program.buffers)
    if (b.id == id) return b;
  throw std::invalid_argument(fmt::format("the program has no buffer {}", id));
}

size_t CudaVM::Impl::position(int64_t id) const {
  const auto it = position_of_id.find(id);
  if (it == position_of_id.end()) throw std::invalid_argument(fmt::format("the program has no buffer {}", id));
  return it->second;
}

CudaRunResult CudaVM::Impl::launch(int64_t position, int n_steps, std::vector<int32_t>* tokens) {
  CudaRunResult result;
  const Clock::time_point t0 = Clock::now();
  auto finish = [&](CudaStatus status, std::string message) {
    result.status = status;
    result.message = std::move(message);
    result.wall_ms = seconds_since(t0) * 1e3;
    return result;
  };
  if (hung)
    return finish(CudaStatus::LaunchError,
                  "an earlier launch did not stop after the abort flag; the GPU is still busy");
  if (!broken.empty()) return finish(CudaStatus::LaunchError, "an earlier launch failed: " + broken);
  use_device();

  // Counters grow by increment per step and are never reset between steps: zero them (epoch 0)
  // before any threshold of this launch could leave the signed 32-bit range.
  if ((uint64_t(epoch) + uint64_t(n_steps) + 1) * max_increment >= kCounterLimit) zero_counters_and_flag();

  if (mp.sink_instruction >= 0 && token_history_capacity < n_steps) {
    cudaFree(d_token_history);
    d_token_history = nullptr;
    token_history_capacity = 0;
    d_token_history = alloc<int32_t>(int64_t(n_steps) * int64_t(sizeof(int32_t)), "token_history");
    token_history_capacity = n_steps;
  }
  if (mp.pos_buffer >= 0) {
    const int32_t pos = int32_t(position);
    check(cudaMemcpyAsync(mp.buffers[size_t(mp.pos_buffer)].ptr, &pos, sizeof(pos),
                          cudaMemcpyHostToDevice, stream),
          "cudaMemcpyAsync(pos)");
  }

  amk_program_t prog{};
  prog.buffers = d_buffers;
  prog.counters = d_counters;
  prog.instructions = d_instructions;
  prog.sm_queue_offset = d_queue_offset;
  prog.sm_queue = d_queue;
  prog.scratch = arena;
  prog.scratch_bytes = mp.arena_bytes;
  prog.abort_flag = d_abort;
  prog.n_buffers = int32_t(mp.buffers.size());
  prog.n_counters = int32_t(mp.counter_step_increment.size());
  prog.n_instructions = int32_t(mp.instructions.size());
  prog.n_sms = mp.n_sms;
  prog.counter_step_increment = d_increment;
  prog.token_history = mp.sink_instruction >= 0 ? d_token_history : nullptr;
  prog.epoch = epoch;
  prog.n_steps = n_steps;
  prog.pos_buffer = mp.pos_buffer;
  prog.next_token_buffer = mp.next_token_buffer;
  prog.sink_instruction = mp.sink_instruction;
  prog.pad0 = 0;
  prog.profile = d_profile;
  prog.task_records = d_records;
  if (d_profile != nullptr)
    check(cudaMemsetAsync(d_profile, 0, AMK_PROFILE_STAMPS * mp.instructions.size() * sizeof(uint64_t), stream),
          "cudaMemsetAsync(profile)");
  if (options.testing_poison_each_launch && arena != nullptr)
    check(cudaMemsetAsync(arena, 0xFF, size_t(mp.arena_bytes), stream), "cudaMemsetAsync(arena poison)");

  const cudaError_t launch_err =
      cuda::megakernel_launch(prog, mp.layout, stream, options.cluster_size);
  if (launch_err != cudaSuccess) {
    // A refused launch (bad configuration, too many CTAs) is not sticky; a sticky error is.
    cudaGetLastError();
    return finish(CudaStatus::LaunchError, fmt::format("megakernel_launch ({} CTAs): {} ({})", mp.n_sms,
                                                       cudaGetErrorString(launch_err),
                                                       cudaGetErrorName(launch_err)));
  }
  check(cudaEventRecord(done, stream), "cudaEventRecord(launch done)");

  // ---- the watchdog ----
  cudaError_t state = cudaEventQuery(done);
  while (state == cudaErrorNotReady && seconds_since(t0) < options.timeout_s) {
    std::this_thread::sleep_for(kPollInterval);
    state = cudaEventQuery(done);
  }
  if (state == cudaErrorNotReady) {
    const double waited = seconds_since(t0);
    // Raise the flag from a second stream: `stream` is blocked behind the kernel.
    *h_abort_value = kAbortByWatchdog;
    check(cudaMemcpyAsync(const_cast<uint32_t*>(d_abort), h_abort_value, sizeof(uint32_t),
                          cudaMemcpyHostToDevice, abort_stream),
          "cudaMemcpyAsync(abort flag)");
    const Clock::time_point abort_t0 = Clock::now();
    while (state == cudaErrorNotReady && seconds_since(abort_t0) < kAbortGraceSeconds) {
      std::this_thread::sleep_for(kPollInterval);
      state = cudaEventQuery(done);
    }
    if (state == cudaErrorNotReady) {
      hung = true;
      return finish(CudaStatus::LaunchError,
                    fmt::format("watchdog: no progress after {:.3g} s, and the GPU did not stop after "
                                "the abort flag ({:.3g} s more); this VM is unusable",
                                waited, kAbortGraceSeconds));
    }
    if (state != cudaSuccess) {
      broken = fmt::format("{} ({})", cudaGetErrorString(state), cudaGetErrorName(state));
      return finish(CudaStatus::LaunchError, "the megakernel failed after the abort flag: " + broken);
    }
    check(cudaStreamSynchronize(abort_stream), "cudaStreamSynchronize(abort)");
    zero_counters_and_flag();
    return finish(CudaStatus::Timeout,
                  fmt::format("watchdog: no progress after {:.3g} s; every CTA left on the abort flag",
                              waited));
  }
  if (state != cudaSuccess) {
    broken = fmt::format("{} ({})", cudaGetErrorString(state), cudaGetErrorName(state));
    return finish(CudaStatus::LaunchError, "the megakernel failed: " + broken);
  }
  const cudaError_t last = cudaGetLastError();
  if (last != cudaSuccess)
    return finish(CudaStatus::LaunchError, fmt::format("the megakernel failed: {} ({})",
                                                       cudaGetErrorString(last), cudaGetErrorName(last)));

  uint32_t flag = 0;
  check(cudaMemcpyAsync(&flag, d_abort, sizeof(flag), cudaMemcpyDeviceToHost, stream),
        "cudaMemcpyAsync(abort flag back)");
  sync("reading the abort flag");
  if (flag != 0) {
    // The step did not complete: the counters stand wherever the CTAs left them.
    zero_counters_and_flag();
    if (flag >= kOpErrorBase)
      return finish(CudaStatus::OpError,
                    fmt::format("instruction error code {} (abort flag 0x{:x})", flag - kOpErrorBase, flag));
    return finish(CudaStatus::OpError,
                  fmt::format("the abort flag was {} after the launch though the watchdog never raised it",
                              flag));
  }
  epoch += uint32_t(n_steps);
  if (uint64_t(epoch) * max_increment >= kCounterLimit) zero_counters_and_flag();

  if (tokens != nullptr) {
    tokens->clear();
    if (mp.sink_instruction >= 0) {
      tokens->resize(size_t(n_steps));
      check(cudaMemcpyAsync(tokens->data(), d_token_history, size_t(n_steps) * sizeof(int32_t),
                            cudaMemcpyDeviceToHost, stream),
            "cudaMemcpyAsync(token_history)");
      sync("reading token_history");
    }
  }
  return finish(CudaStatus::Ok, {});
}

CudaVM::CudaVM(Program program, const CudaVmOptions& options) : impl_(std::make_unique<Impl>()) {
  impl_->program = std::move(program);
  impl_->options = options;
  impl_->load();  // on a throw, ~Impl frees whatever was allocated
}

CudaVM::~CudaVM() = default;

void CudaVM::set_profiling(bool on) {
  Impl& m = *impl_;
  if (on == (m.d_profile != nullptr)) return;
  m.use_device();
  if (on) {
    m.d_profile = m.alloc<uint64_t>(int64_t(AMK_PROFILE_STAMPS * m.mp.instructions.size() * sizeof(uint64_t)),
                                    "profile");
  } else {
    m.sync("set_profiling");
    cudaFree(m.d_profile);
    m.d_profile = nullptr;
  }
}

std::vector<CudaVM::TaskTiming> CudaVM::last_profile() const {
  Impl& m = *impl_;
  std::vector<TaskTiming> out;
  if (m.d_profile == nullptr) return out;
  constexpr size_t k = AMK_PROFILE_STAMPS;
  std::vector<uint64_t> raw(k * m.mp.instructions.size());
  m.use_device();
  check(cudaMemcpyAsync(raw.data(), m.d_profile, raw.size() * sizeof(uint64_t),
                        cudaMemcpyDeviceToHost, m.stream),
        "cudaMemcpyAsync(profile)");
  m.sync("reading the profile");
  out.resize(m.mp.instructions.size());
  for (size_t i = 0; i < out.size(); ++i)
    out[i] = {raw[k * i], raw[k * i + 1], raw[k * i + 2], raw[k * i + 3], raw[k * i + 4]};
  return out;
}

const Program& CudaVM::program() const { return impl_->program; }

const Buffer* CudaVM::find_buffer(std::string_view name) const {
  for (const Buffer& b : impl_->program.buffers)
    if (b.name == name) return &b;
  return nullptr;
}

void CudaVM::set_buffer(int64_t id, const Tensor& value) {
  Impl& m = *impl_;
  const Buffer& b = m.record(id);
  if (!is_settable(b.kind))
    throw std::invalid_argument(fmt::format("buffer {} '{}' is {}: only WEIGHT, CONST, IO_INPUT and "
                                            "KV_CACHE buffers are set by the host",
                                            id, b.name, name_of(b.kind)));
  if (value.shape != b.shape)
    throw std::invalid_argument(fmt::format("buffer {} '{}' has shape {}; the value has {}", id, b.name,
                                            shape_str(b.shape), shape_str(value.shape)));
  const Tensor converted = convert_to(value, b.dtype);
  const size_t pos = m.position(id);
  if (converted.bytes.size() != size_t(m.mp.placement[pos].nbytes))
    throw std::invalid_argument(fmt::format("buffer {} '{}' holds {} bytes; the value has {}", id, b.name,
                                            m.mp.placement[pos].nbytes, converted.bytes.size()));
  if (m.hung) throw CudaVmError(CudaStatus::LaunchError, "the GPU is still running a launch that ignored the abort flag");
  m.use_device();
  if (converted.bytes.empty()) return;
  check(cudaMemcpyAsync(m.mp.buffers[pos].ptr, converted.bytes.data(), converted.bytes.size(),
                        cudaMemcpyHostToDevice, m.stream),
        fmt::format("cudaMemcpyAsync(set buffer '{}')", b.name));
  m.sync("set_buffer");
}

Tensor CudaVM::read_buffer(int64_t id) const {
  Impl& m = *impl_;
  const Buffer& b = m.record(id);
  const size_t pos = m.position(id);
  Tensor out = Tensor::zeros(b.dtype, b.shape);
  if (m.hung) throw CudaVmError(CudaStatus::LaunchError, "the GPU is still running a launch that ignored the abort flag");
  m.use_device();
  if (out.bytes.empty()) return out;
  check(cudaMemcpyAsync(out.bytes.data(), m.mp.buffers[pos].ptr, out.bytes.size(), cudaMemcpyDeviceToHost,
                        m.stream),
        fmt::format("cudaMemcpyAsync(read buffer '{}')", b.name));
  m.sync("read_buffer");
  return out;
}

void CudaVM::zero_kv_cache() {
  Impl& m = *impl_;
  if (m.hung) throw CudaVmError(CudaStatus::LaunchError, "the GPU is still running a launch that ignored the abort flag");
  m.use_device();
  for (size_t i = 0; i < m.mp.buffers.size(); ++i) {
    const Buffer& b = m.record(m.mp.buffer_ids[i]);
    if (b.kind != BufferKind::KV_CACHE || m.mp.placement[i].nbytes == 0) continue;
    check(cudaMemsetAsync(m.mp.buffers[i].ptr, 0, size_t(m.mp.placement[i].nbytes), m.stream),
          fmt::format("cudaMemsetAsync(KV cache '{}')", b.name));
  }
  m.sync("zero_kv_cache");
}

CudaRunResult CudaVM::run(int64_t position, int n_steps, std::vector<int32_t>* tokens) {
  Impl& m = *impl_;
  if (n_steps < 1) throw std::invalid_argument(fmt::format("run: n_steps {} must be >= 1", n_steps));
  if (n_steps > 1 && m.mp.sink_instruction < 0)
    throw CudaVmError(CudaStatus::Rejected,
                      fmt::format("run: {} steps in one launch need the program's sink (a SAMPLE_ARGMAX "
                                  "every task happens-before); this program has none",
                                  n_steps));
  if (position < 0 || position > INT32_MAX)
    throw std::invalid_argument(fmt::format("run: position {} is out of range", position));
  if (m.max_seq >= 0 && position + n_steps > m.max_seq)
    throw std::invalid_argument(fmt::format("run: positions {}..{} do not fit the KV cache's {} rows",
                                            position, position + n_steps - 1, m.max_seq));
  if (uint64_t(n_steps + 1) * m.max_increment >= kCounterLimit)
    throw CudaVmError(CudaStatus::Rejected,
                      fmt::format("run: {} steps would take a counter past 2^31", n_steps));
  return m.launch(position, n_steps, tokens);
}


}  // namespace amk
