#include "schedule/tensor_parallel.h"

#include <fmt/format.h>

#include <string>
#include <variant>

#include "amk/lowering.h"

namespace amk::schedule {

void check_tensor_parallel(const ModelConfig& m, const Tiling::TensorParallel& tp,
                           const Tiling& tiling, const Fusion& fusion,
                           const ScheduleConfig& config, const GpuTarget& target,
                           int64_t kv_heads) {
  const int64_t P = tp.clusters, C = tp.size, PA = tp.attention, NKV = m.num_key_value_heads;
  if (P * C > target.num_sms)
    throw LoweringError(fmt::format("tiling.tp: {} clusters of {} SMs need {} SMs; {} has {}", P,
                                    C, P * C, target.name, target.num_sms));
  if (PA > P)
    throw LoweringError(fmt::format(
        "tiling.tp.attention {} is more than the {} clusters", PA, P));
  if (NKV % PA != 0 || (NKV / PA) % kv_heads != 0)
    throw LoweringError(fmt::format(
        "tiling.tp.attention {} must divide the model's {} KV heads into whole attention groups "
        "of tiling.attention.kv_heads {}",
        PA, NKV, kv_heads));
  if (m.intermediate_size < P || m.hidden_size < C)
    throw LoweringError(fmt::format(
        "tiling.tp: {} clusters of {} SMs split an MLP of {} features and a hidden vector of {}",
        P, C, m.intermediate_size, m.hidden_size));
  if (m.attention_out_bias || m.mlp_bias)
    throw LoweringError(
        "tiling.tp: the model has a bias on o_proj or the MLP, whose boxed weights have no bias "
        "box yet");
  if (!(fusion.rmsnorm_gemv && fusion.gemv_silu_mul && fusion.gemv_add && fusion.rope_attention &&
        fusion.combine_gemv) ||
      fusion.glu_down)
    throw LoweringError(
        "tiling.tp lowers the fused step: fusion groups [rmsnorm, gemv], [gemv, silu_mul], "
        "[gemv, add], [rope, attention] and [attention_combine, gemv] (which needs a "
        "tiling.attention.kv_block split), and not [gemv, silu_mul, gemv]");
  if (tiling.qkv_by_group)
    throw LoweringError(
        "tiling.attention.qkv_by_group does nothing with tiling.tp: its q/k/v are per head group "
        "already; remove it");
  const auto* policy = std::get_if<std::string>(&config.sm_assignment);
  if (policy == nullptr || *policy != "round_robin")
    throw LoweringError(
        "tiling.tp places every task on its cluster's SMs, round robin: sm_assignment must be "
        "round_robin");
}

}  // namespace amk::schedule
