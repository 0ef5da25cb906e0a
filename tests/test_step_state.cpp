// The step state (docs/RUNTIME_POSITION.md): KV_APPEND flags bit 0 and ATTENTION_TILE flags
// bit 2 take the position from the launch, so one program serves every step; without those bits
// the ops mean exactly what they meant.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "amk/op_flags.h"
#include "amk/reference_ops.h"

namespace {

using namespace amk;

Tensor ramp(std::vector<int64_t> shape, float step) {
  Tensor t = Tensor::zeros(DType::F32, std::move(shape));
  for (int64_t i = 0; i < t.numel(); ++i) t.set(i, std::sin(float(i) * step));
  return t;
}

Params attention(int64_t start, int64_t len, int64_t flags) {
  Params p;
  p.set_int("head_dim", 4);
  p.set_int("kv_start", start);
  p.set_int("kv_len", len);
  p.set_real("scale", 0.5);
  p.set_int("n_heads", 2);
  p.set_int("n_kv_heads", 1);
  p.set_int("flags", flags);
  return p;
}

std::vector<float> run_attention(const Params& p, const Tensor& q, const Tensor& k, const Tensor& v,
                                 std::vector<int64_t> out_shape, std::optional<int64_t> pos) {
  Tensor out = Tensor::zeros(DType::F32, std::move(out_shape));
  const Tensor* in[] = {&q, &k, &v};
  Tensor* outs[] = {&out};
  run_reference_op(Op::ATTENTION_TILE, p, in, outs, StepState{pos});
  return out.to_floats();
}

TEST(OpStepState, KvAppendWritesAtTheStepPositionPlusTheOffset) {
  Tensor cache = Tensor::zeros(DType::F32, {1, 6, 2});
  const Tensor fresh = Tensor::from_floats(DType::F32, {1, 2}, std::vector<float>{7, 8});
  Params p;
  p.set_int("pos", 1);
  p.set_int("flags", kv_append_flags::kRuntimePos);
  const Tensor* in[] = {&fresh, &cache};
  Tensor* out[] = {&cache};
  run_reference_op(Op::KV_APPEND, p, in, out, StepState{3});
  EXPECT_EQ(cache.get(2 * 4), 7);  // row 1 + 3
  EXPECT_EQ(cache.get(2 * 4 + 1), 8);
  EXPECT_THROW(run_reference_op(Op::KV_APPEND, p, in, out, StepState{5}), OpError);  // row 6
  EXPECT_THROW(run_reference_op(Op::KV_APPEND, p, in, out), OpError);  // no step state
  p.set_int("flags", 2);
  EXPECT_THROW(run_reference_op(Op::KV_APPEND, p, in, out, StepState{0}), OpError);  // unknown bit
}

TEST(OpStepState, RuntimeWindowIsTheStaticWindowClippedToThePosition) {
  const Tensor q = ramp({2, 4}, 0.7f), k = ramp({1, 8, 4}, 0.3f), v = ramp({1, 8, 4}, 0.45f);
  for (int64_t pos = 0; pos < 8; ++pos) {
    // The whole cache clipped to [0, pos] is the static window of pos + 1 keys.
    EXPECT_EQ(run_attention(attention(0, 8, attention_flags::kRuntimeWindow), q, k, v, {2, 4}, pos),
              run_attention(attention(0, pos + 1, 0), q, k, v, {2, 4}, std::nullopt));
    // A block [4, 8) is clipped likewise, and is empty (l = 0) before the position reaches it.
    const int64_t flags = attention_flags::kRuntimeWindow | attention_flags::kPartial;
    const std::vector<float> part = run_attention(attention(4, 4, flags), q, k, v, {2, 6}, pos);
    if (pos < 4) {
      EXPECT_EQ(part[5], 0.0f) << pos;  // l of head 0
    } else {
      EXPECT_EQ(part, run_attention(attention(4, pos - 3, attention_flags::kPartial), q, k, v,
                                    {2, 6}, std::nullopt));
    }
  }
}

}  // namespace
