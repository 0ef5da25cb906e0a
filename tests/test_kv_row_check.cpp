// eval::kv_row_errors (what `amk bench` prints when a GPU step fails its check): two reference
// decoders that ran the same steps agree on every layer's K and V rows; a row changed in one
// layer of one cache (as a corrupted GPU step would leave it) is found in that layer and no
// earlier one, a NaN counts as an infinite error, and a program or position it cannot read is
// refused by name.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "amk/checkpoint.h"
#include "amk/decoder.h"
#include "amk/kv_row_check.h"
#include "amk/lowering.h"

namespace {

using namespace amk;
using eval::KvRowError;

const std::filesystem::path kFixtures = std::filesystem::path(AMK_TESTDATA_DIR) / "fixtures";

int64_t buffer_id(const Program& p, const std::string& name) {
  for (const Buffer& b : p.buffers)
    if (b.name == name) return b.id;
  ADD_FAILURE() << "no buffer " << name;
  return -1;
}

class KvRowCheck : public ::testing::Test {
 protected:
  void SetUp() override {
    ck_.emplace(Checkpoint::open(kFixtures / "tiny-qwen3"));
    program_ = lower(ck_->config(), {}, *find_target("h100"), 64);
    a_.emplace(*ck_, program_);
    b_.emplace(*ck_, program_);
    for (ReferenceDecoder* d : {&*a_, &*b_})
      for (int64_t t : {3, 17, 5}) d->step(t);  // positions 0, 1, 2
  }
  eval::BufferReader reader(const ReferenceDecoder& d) {
    return [&d](int64_t id) { return d.vm().buffer(id); };
  }
  std::optional<Checkpoint> ck_;
  Program program_;
  std::optional<ReferenceDecoder> a_, b_;
};

TEST_F(KvRowCheck, DecodersThatRanTheSameStepsAgreeOnEveryLayer) {
  const std::vector<KvRowError> e = eval::kv_row_errors(program_, reader(*a_), reader(*b_), 2);
  ASSERT_EQ(int64_t(e.size()), ck_->config().num_hidden_layers);
  for (const KvRowError& x : e) {
    EXPECT_EQ(x.k_error, 0.0) << "layer " << x.layer;
    EXPECT_EQ(x.v_error, 0.0) << "layer " << x.layer;
  }
  EXPECT_EQ(eval::first_diverging_layer(e, 1e-3), -1);
  EXPECT_NE(eval::kv_row_report(e, 1e-3).find("every layer's K and V rows agree"),
            std::string::npos);
}

TEST_F(KvRowCheck, AChangedRowIsFoundInItsLayer) {
  ASSERT_GE(ck_->config().num_hidden_layers, 2);
  const int64_t v1 = buffer_id(program_, kv_cache_name(1, 'v'));
  const Buffer& cache = *std::find_if(program_.buffers.begin(), program_.buffers.end(),
                                      [&](const Buffer& b) { return b.id == v1; });
  const int64_t context = cache.shape[1], dim = cache.shape[2];
  // Position 1 of KV head 0, element 3, doubled in layer 1's V cache only.
  const eval::BufferReader corrupted = [&](int64_t id) {
    Tensor t = a_->vm().buffer(id);
    if (id != v1) return t;
    std::vector<float> f = t.to_floats();
    f[size_t(0 * context * dim + 1 * dim + 3)] *= 2.0f;
    f[size_t(0 * context * dim + 1 * dim + 3)] += 1.0f;
    return Tensor::from_floats(t.dtype, t.shape, f);
  };
  const std::vector<KvRowError> at1 = eval::kv_row_errors(program_, corrupted, reader(*b_), 1);
  EXPECT_EQ(at1[0].k_error, 0.0);
  EXPECT_EQ(at1[0].v_error, 0.0);
  EXPECT_EQ(at1[1].k_error, 0.0);
  EXPECT_GT(at1[1].v_error, 1e-2);
  EXPECT_EQ(eval::first_diverging_layer(at1, 1e-3), 1);
  EXPECT_NE(eval::kv_row_report(at1, 1e-3).find("differs beyond 0.001: 1"), std::string::npos);
  // Another position's rows do not see it.
  EXPECT_EQ(eval::first_diverging_layer(eval::kv_row_errors(program_, corrupted, reader(*b_), 2),
                                        1e-3),
            -1);
}

TEST_F(KvRowCheck, ANonFiniteValueIsAnInfiniteError) {
  const int64_t k0 = buffer_id(program_, kv_cache_name(0, 'k'));
  const eval::BufferReader with_nan = [&](int64_t id) {
    Tensor t = a_->vm().buffer(id);
    if (id != k0) return t;
    std::vector<float> f = t.to_floats();
    const Buffer& b = *std::find_if(program_.buffers.begin(), program_.buffers.end(),
                                    [&](const Buffer& x) { return x.id == k0; });
    f[size_t(2 * b.shape[2])] = std::numeric_limits<float>::quiet_NaN();  // head 0, position 2
    return Tensor::from_floats(t.dtype, t.shape, f);
  };
  const std::vector<KvRowError> e = eval::kv_row_errors(program_, with_nan, reader(*b_), 2);
  EXPECT_TRUE(std::isinf(e[0].k_error));
  EXPECT_EQ(eval::first_diverging_layer(e, 1e-3), 0);
}

TEST_F(KvRowCheck, AnUnreadablePositionOrProgramIsRefusedByName) {
  try {
    eval::kv_row_errors(program_, reader(*a_), reader(*b_), 64);
    ADD_FAILURE() << "position 64 of a 64-row cache was read";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("position 64 is outside KV cache"), std::string::npos)
        << e.what();
  }
  Program no_caches = program_;
  std::erase_if(no_caches.buffers, [](const Buffer& b) { return b.kind == BufferKind::KV_CACHE; });
  try {
    eval::kv_row_errors(no_caches, reader(*a_), reader(*b_), 0);
    ADD_FAILURE() << "a program without KV caches was read";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("no KV cache"), std::string::npos) << e.what();
  }
}

}  // namespace
