// WEIGHT buffers bound to checkpoint tensors (amk/decoder.h weight_tensor, weight_value): the
// tensor itself, or the box of it a buffer holds (IR 0.12.0), against a naive slice of the
// fixture's tensor; a box outside its tensor, or of the wrong shape, is refused naming both.
// And the CONST values the decoders compute (computed_const_value).
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "amk/decoder.h"
#include "amk/lowering.h"

namespace amk {
namespace {

const std::filesystem::path kFixtures = std::filesystem::path(AMK_TESTDATA_DIR) / "fixtures";
constexpr const char* kQ = "model.layers.0.self_attn.q_proj.weight";

Buffer weight(std::vector<int64_t> shape, std::optional<SourceBox> box = std::nullopt) {
  Buffer b;
  b.name = "q";
  b.kind = BufferKind::WEIGHT;
  b.dtype = DType::F32;
  b.shape = std::move(shape);
  b.source = kQ;
  b.source_box = box;
  return b;
}

std::string decode_error(const Buffer& b, const Checkpoint& ck) {
  try {
    (void)weight_value(b, ck);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

TEST(WeightValue, ABoxIsTheRowsAndColumnsItNames) {
  const Checkpoint ck = Checkpoint::open(kFixtures / "tiny-llama");
  const TensorView& q = ck.tensor(kQ);
  ASSERT_EQ(q.shape.size(), 2u);
  const int64_t rows = q.shape[0], cols = q.shape[1];
  const std::vector<float> all = q.to_floats();
  EXPECT_EQ(weight_value(weight({rows, cols}), ck).to_floats(), all);
  const SourceBox box{rows / 4, rows / 2, 3, cols - 5};
  const std::vector<float> got = weight_value(weight({box.rows, box.cols}, box), ck).to_floats();
  ASSERT_EQ(int64_t(got.size()), box.rows * box.cols);
  for (int64_t r = 0; r < box.rows; ++r)
    for (int64_t c = 0; c < box.cols; ++c)
      ASSERT_EQ(got[size_t(r * box.cols + c)], all[size_t((box.row0 + r) * cols + box.col0 + c)])
          << "row " << r << ", column " << c;
  // The whole tensor as a box is the tensor.
  EXPECT_EQ(weight_value(weight({rows, cols}, SourceBox{0, rows, 0, cols}), ck).to_floats(), all);
}

TEST(WeightValue, ABoxOutsideItsTensorIsRefusedNamingBoth) {
  const Checkpoint ck = Checkpoint::open(kFixtures / "tiny-llama");
  const int64_t rows = ck.tensor(kQ).shape[0], cols = ck.tensor(kQ).shape[1];
  for (const SourceBox& box : {SourceBox{1, rows, 0, cols}, SourceBox{0, rows, cols, 1},
                               SourceBox{0, 1, -1, 2}, SourceBox{INT64_MAX, 2, 0, 2}}) {
    const std::string e = decode_error(weight({box.rows, box.cols}, box), ck);
    EXPECT_NE(e.find("WEIGHT buffer 'q'"), std::string::npos) << e;
    EXPECT_NE(e.find(std::string("of '") + kQ + "', which is [" + std::to_string(rows) + ", " +
                     std::to_string(cols) + "]"),
              std::string::npos)
        << e;
  }
  // A box that is not the buffer's shape, and a misshapen plain weight (the checkpoint's error).
  EXPECT_NE(decode_error(weight({2, 3}, SourceBox{0, 3, 0, 2}), ck).find("be the buffer's shape"),
            std::string::npos);
  EXPECT_NE(decode_error(weight({rows + 1, cols}), ck).find(kQ), std::string::npos);
  Buffer no_source = weight({rows, cols});
  no_source.source.reset();
  EXPECT_NE(decode_error(no_source, ck).find("has no source"), std::string::npos);
}

// CONST buffers no checkpoint holds: zeros of any shape and dtype (a tensor-parallel step's
// residual-free partials add them); an unknown source is refused naming the known ones.
TEST(ConstValue, ZerosAreZerosOfTheBuffersShape) {
  const ModelConfig config = Checkpoint::open(kFixtures / "tiny-llama").config();
  Buffer z;
  z.name = "zeros";
  z.kind = BufferKind::CONST;
  z.dtype = DType::BF16;
  z.shape = {1, 5};
  z.source = std::string(kZerosSource);
  const Tensor t = computed_const_value(z, config);
  EXPECT_EQ(t.dtype, DType::BF16);
  EXPECT_EQ(t.shape, (std::vector<int64_t>{1, 5}));
  EXPECT_EQ(t.to_floats(), std::vector<float>(5, 0.0f));
  z.source = "amk.ones";
  try {
    (void)computed_const_value(z, config);
    ADD_FAILURE() << "an unknown CONST source was bound";
  } catch (const DecodeError& e) {
    EXPECT_NE(std::string(e.what()).find("'amk.ones', which the decoder cannot compute (known: "
                                         "'amk.rope.inv_freq', 'amk.zeros')"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace amk
