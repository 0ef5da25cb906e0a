// The data model: enum names and codes, sizes, the registry, targets and the builder.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "amk/ir.h"

namespace amk {
namespace {

TEST(IrEnums, NamesRoundTripForEveryCode) {
  for (int i = 0; i < kNumDTypes; ++i)
    EXPECT_EQ(parse_dtype(name_of(static_cast<DType>(i))), static_cast<DType>(i));
  for (int i = 0; i < kNumMemSpaces; ++i)
    EXPECT_EQ(parse_memspace(name_of(static_cast<MemSpace>(i))), static_cast<MemSpace>(i));
  for (int i = 0; i < kNumBufferKinds; ++i)
    EXPECT_EQ(parse_buffer_kind(name_of(static_cast<BufferKind>(i))), static_cast<BufferKind>(i));
  for (int i = 0; i < kNumOps; ++i)
    EXPECT_EQ(parse_op(name_of(static_cast<Op>(i))), static_cast<Op>(i));
}

TEST(IrEnums, CanonicalCodesFromTheSpec) {
  EXPECT_EQ(parse_dtype("BF16"), DType{2});
  EXPECT_EQ(parse_dtype("I4"), DType{7});
  EXPECT_EQ(parse_dtype("BOOL"), DType{9});
  EXPECT_EQ(parse_memspace("SMEM"), MemSpace{2});
  EXPECT_EQ(parse_buffer_kind("KV_CACHE"), BufferKind{2});
  EXPECT_EQ(parse_buffer_kind("CONST"), BufferKind{5});
  EXPECT_EQ(parse_op("GEMV_TILE"), Op{5});
  EXPECT_EQ(parse_op("KV_APPEND"), Op{16});
  EXPECT_EQ(parse_op("ATTENTION_COMBINE"), Op{18});
}

TEST(IrEnums, UnknownNamesAndCodesAreRefusedNotGuessed) {
  EXPECT_FALSE(parse_dtype("bf16").has_value());  // names are case-sensitive, as in the format
  EXPECT_FALSE(parse_op("GEMV").has_value());
  EXPECT_FALSE(parse_op("").has_value());
  EXPECT_EQ(name_of(static_cast<Op>(77)), "<invalid>");
  EXPECT_EQ(name_of(static_cast<DType>(-1)), "<invalid>");
}

TEST(IrDType, SizesRoundUpForPackedTypes) {
  EXPECT_EQ(dtype_nbytes(DType::F32, 3), 12);
  EXPECT_EQ(dtype_nbytes(DType::BF16, 3), 6);
  EXPECT_EQ(dtype_nbytes(DType::I4, 3), 2);  // 12 bits -> 2 bytes
  EXPECT_EQ(dtype_nbytes(DType::I4, 4), 2);
  EXPECT_EQ(dtype_nbytes(DType::F8E4M3, 5), 5);
  EXPECT_EQ(dtype_nbytes(DType::F32, 0), 0);
}

TEST(IrBuffer, NumelStridesAndSaturation) {
  Buffer b{0, "w", BufferKind::WEIGHT, DType::BF16, {4, 8, 16}};
  EXPECT_EQ(b.numel(), 512);
  EXPECT_EQ(b.nbytes(), 1024);
  EXPECT_EQ(b.contiguous_strides(), (std::vector<int64_t>{128, 16, 1}));
  Buffer huge{0, "h", BufferKind::WEIGHT, DType::F32, {1LL << 40, 1LL << 40}};
  EXPECT_EQ(huge.numel(), std::numeric_limits<int64_t>::max());  // saturates, never wraps
  EXPECT_EQ(huge.nbytes(), std::numeric_limits<int64_t>::max());
}

TEST(IrRegistry, ArityAndRequiredParamsMatchTheSpec) {
  const OpSpec& gemv = op_spec(Op::GEMV_TILE);
  EXPECT_EQ(gemv.min_inputs, 2);
  EXPECT_EQ(gemv.max_inputs, 3);
  EXPECT_EQ(gemv.n_outputs, 1);
  EXPECT_EQ(gemv.required_params, (std::vector<std::string_view>{"K", "N_tile", "n_off"}));
  const OpSpec& attn = op_spec(Op::ATTENTION_TILE);
  EXPECT_EQ(attn.required_params.size(), 6u);
  EXPECT_EQ(op_spec(Op::NOP).n_outputs, 0);
  EXPECT_EQ(op_spec(Op::ALLREDUCE_SHARD).max_inputs, 8);
  EXPECT_EQ(op_spec(Op::ATTENTION_COMBINE).min_inputs, 2);
  for (int i = 0; i < kNumOps; ++i) EXPECT_EQ(op_spec(static_cast<Op>(i)).op, static_cast<Op>(i));
}

TEST(IrRegistry, ParamFieldsInAbiOrder) {
  const auto& f = param_fields();
  ASSERT_EQ(f.size(), 23u);
  EXPECT_EQ(f.front().name, "K");
  EXPECT_EQ(f[18].name, "dim");
  EXPECT_EQ(f[19].name, "kv_stride");  // IR 0.11.0: the last int32
  EXPECT_EQ(f[20].name, "eps");
  EXPECT_EQ(f.back().name, "theta");
  EXPECT_EQ(param_field_type("pos"), ParamType::Int32);
  EXPECT_EQ(param_field_type("scale"), ParamType::Real);
  EXPECT_FALSE(param_field_type("kv_block").has_value());
}

TEST(IrParams, KeepInsertionOrderAndOverwrite) {
  Params p{{"n_off", ParamValue::integer(0)}, {"K", ParamValue::integer(16)}};
  p.set_real("eps", 1e-6);
  p.set_int("n_off", 32);
  ASSERT_EQ(p.items().size(), 3u);
  EXPECT_EQ(p.items()[0].first, "n_off");
  EXPECT_EQ(p.get_int("n_off", -1), 32);
  EXPECT_DOUBLE_EQ(p.get_real("eps", 0), 1e-6);
  EXPECT_EQ(p.get_int("missing", 7), 7);
  p.set("flag", ParamValue::other("true"));
  EXPECT_EQ(p.get_int("flag", 5), 5);  // a non-number is never read as a number
}

TEST(IrTargets, BuiltinsAndFloors) {
  for (const char* name : {"h100", "h200", "b200", "a100", "rtx5090"})
    ASSERT_NE(find_target(name), nullptr) << name;
  EXPECT_EQ(find_target("mi300x"), nullptr);
  const GpuTarget& h100 = *find_target("h100");
  EXPECT_EQ(h100.sm_arch, 90);
  EXPECT_EQ(h100.num_sms, 132);
  EXPECT_EQ(h100.smem_bytes_per_block_optin, 232448);
  // 3.35 GB at 3350 GB/s is exactly one millisecond.
  EXPECT_NEAR(h100.bandwidth_bound_us(3'350'000'000), 1000.0, 1e-9);
  // The shared README's measured floor: Llama-3.2-1B (2.472 GB) at 4.45 TB/s is ~555 us on h200.
  EXPECT_NEAR(find_target("h200")->measured_bandwidth_bound_us(2'472'000'000), 555.5, 0.5);
  EXPECT_TRUE(find_target("rtx5090")->wddm_tdr);
  GpuTarget unknown;
  EXPECT_TRUE(std::isnan(unknown.bandwidth_bound_us(1000)));
  EXPECT_TRUE(std::isnan(unknown.measured_bandwidth_bound_us(1000)));
}

TEST(IrBuilder, DenseIdsAndTotals) {
  Program p;
  const int64_t x = p.new_buffer("x", BufferKind::IO_INPUT, DType::F32, {1, 16});
  const int64_t w = p.new_buffer("w", BufferKind::WEIGHT, DType::BF16, {16, 16}, MemSpace::HBM,
                                 "proj.weight");
  const int64_t y = p.new_buffer("y", BufferKind::IO_OUTPUT, DType::F32, {1, 16});
  const int64_t c = p.new_counter("proj done");
  Task& t = p.add_task(Op::GEMV_TILE, {x, w}, {y}, c, {},
                       {{"K", ParamValue::integer(16)}, {"N_tile", ParamValue::integer(16)},
                        {"n_off", ParamValue::integer(0)}},
                       "proj");
  t.est_bytes = 512;
  EXPECT_EQ(x, 0);
  EXPECT_EQ(w, 1);
  EXPECT_EQ(y, 2);
  EXPECT_EQ(c, 0);
  EXPECT_EQ(p.tasks.at(0).id, 0);
  EXPECT_EQ(p.buffers[1].source, "proj.weight");
  EXPECT_EQ(p.total_weight_bytes(), 512);
  EXPECT_EQ(p.total_est_bytes(), 512);
  EXPECT_EQ(p.ir_version, "0.12.0");
  EXPECT_EQ(p.abi_version, "0.12");
}

}  // namespace
}  // namespace amk
