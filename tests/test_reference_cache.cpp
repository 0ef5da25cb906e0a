// eval::ReferenceCache (amk bench --reference-cache): what it stores reads back bit for bit, and
// anything that is not a whole entry of this key (another key, another vocabulary, a truncated,
// padded or foreign file, a FIFO, a folder) reads as a miss, never as numbers; the key follows
// the checkpoint's files (names, sizes, contents), the weight dtype, the context and the plain
// lowering.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "amk/checkpoint.h"
#include "amk/decoder.h"
#include "amk/logit_check.h"
#include "amk/evaluate.h"
#include "amk/lowering.h"
#include "amk/random_checkpoint.h"
#include "amk/reference_cache.h"

namespace {

namespace fs = std::filesystem;
using amk::eval::ReferenceCache;

class ReferenceCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("amk_refcache_" + std::to_string(getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

std::vector<float> some_logits(size_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> d(0.f, 3.f);
  std::vector<float> v(n);
  for (float& x : v) x = d(gen);
  return v;
}

TEST_F(ReferenceCacheTest, WhatIsStoredReadsBackBitForBit) {
  const ReferenceCache cache(dir_ / "cache", "model-a|weights=BF16|context=512");
  EXPECT_FALSE(cache.load("65:7", 1000).has_value());  // nothing there yet
  const std::vector<float> logits = some_logits(1000, 1);
  std::string why;
  ASSERT_TRUE(cache.store("65:7", logits, &why)) << why;
  const auto back = cache.load("65:7", 1000);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(0, std::memcmp(back->data(), logits.data(), logits.size() * sizeof(float)));
  // Another step of the same key is another entry.
  EXPECT_FALSE(cache.load("65:8", 1000).has_value());
  EXPECT_FALSE(cache.load("66:7", 1000).has_value());
  // No temporary file is left beside the entry.
  int files = 0;
  for (const auto& e : fs::directory_iterator(dir_ / "cache")) ++files, (void)e;
  EXPECT_EQ(files, 1);
}

// A step's logits depend on the steps before it: position 1 stepped from position 0 is not
// position 1 seek()ed to a seeded cache. Entries are named by the check list's prefix, and a list
// is served all from the cache or not at all.
TEST_F(ReferenceCacheTest, AStepIsNamedByItsHistoryAndAListIsServedWhole) {
  const std::vector<int64_t> positions{0, 1, 65}, tokens{1, 7920, 15839};
  EXPECT_EQ(amk::eval::check_step_name(positions, tokens, 0), "0:1");
  EXPECT_EQ(amk::eval::check_step_name(positions, tokens, 2), "0:1,1:7920,65:15839");
  const ReferenceCache cache(dir_, "k");
  ASSERT_TRUE(cache.store("0:1", some_logits(64, 1), nullptr));
  ASSERT_TRUE(cache.store("0:1,1:7920", some_logits(64, 2), nullptr));
  // Two of three steps kept: nothing is served.
  EXPECT_FALSE(cache.load_all(positions, tokens, 64).has_value());
  ASSERT_TRUE(cache.store("0:1,1:7920,65:15839", some_logits(64, 3), nullptr));
  const auto all = cache.load_all(positions, tokens, 64);
  ASSERT_TRUE(all.has_value());
  ASSERT_EQ(all->size(), 3u);
  EXPECT_EQ((*all)[1], some_logits(64, 2));
  EXPECT_EQ((*all)[2], some_logits(64, 3));
  // Position 1 checked first (a seek, not a step from 0) is another entry.
  EXPECT_FALSE(cache.load_all({1}, {7920}, 64).has_value());
  // The first step is shared with a list that starts the same way.
  EXPECT_TRUE(cache.load_all({0}, {1}, 64).has_value());
}

TEST_F(ReferenceCacheTest, AnythingButAWholeEntryOfThisKeyIsAMiss) {
  const ReferenceCache a(dir_, "key-a"), b(dir_, "key-b");
  const std::vector<float> logits = some_logits(256, 2);
  ASSERT_TRUE(a.store("0:1", logits, nullptr));
  EXPECT_FALSE(a.load("0:1", 255).has_value());  // another vocabulary
  // Another key's entry under this key's name (what a hash collision would look like).
  fs::copy_file(a.entry_path("0:1"), b.entry_path("0:1"));
  EXPECT_FALSE(b.load("0:1", 256).has_value());
  // Truncated, padded, foreign.
  const fs::path entry = a.entry_path("0:1");
  const auto size = fs::file_size(entry);
  fs::resize_file(entry, size - 1);
  EXPECT_FALSE(a.load("0:1", 256).has_value());
  ASSERT_TRUE(a.store("0:1", logits, nullptr));
  { std::ofstream(entry, std::ios::app | std::ios::binary) << 'x'; }
  EXPECT_FALSE(a.load("0:1", 256).has_value());
  { std::ofstream(entry, std::ios::trunc) << "not an entry at all"; }
  EXPECT_FALSE(a.load("0:1", 256).has_value());
  // A FIFO or a folder where the entry would be: a miss at once, no hang.
  fs::remove(entry);
  ASSERT_EQ(mkfifo(entry.c_str(), 0600), 0);
  EXPECT_FALSE(a.load("0:1", 256).has_value());
  fs::remove(entry);
  fs::create_directory(entry);
  EXPECT_FALSE(a.load("0:1", 256).has_value());
  // And a store that cannot replace it says why.
  std::string why;
  EXPECT_FALSE(a.store("0:1", logits, &why));
  EXPECT_NE(why.find(entry.filename().string()), std::string::npos) << why;
}

TEST_F(ReferenceCacheTest, AStoreWhereNoFolderCanBeSaysWhy) {
  { std::ofstream(dir_ / "file") << "x"; }
  const ReferenceCache cache(dir_ / "file" / "cache", "k");
  std::string why;
  EXPECT_FALSE(cache.store("0:1", some_logits(8, 3), &why));
  EXPECT_NE(why.find("cannot create"), std::string::npos) << why;
  EXPECT_FALSE(cache.load("0:1", 8).has_value());
}

TEST_F(ReferenceCacheTest, TheKeyFollowsTheCheckpointTheDtypeTheContextAndTheLowering) {
  const fs::path ckpt = dir_ / "tiny";
  amk::write_random_checkpoint(ckpt, "tiny", amk::DType::BF16, 7);
  const amk::Checkpoint c = amk::Checkpoint::open(ckpt);
  const auto& target = *amk::find_target("h100");
  const auto plain = [&](int64_t context) {
    return amk::lower(c.config(), amk::eval::plain_schedule_config(), target, context,
                      amk::DType::BF16);
  };
  const amk::Program p256 = plain(256);
  const std::string key = amk::eval::reference_cache_key(ckpt, amk::DType::BF16, 256, p256);
  EXPECT_EQ(key, amk::eval::reference_cache_key(ckpt, amk::DType::BF16, 256, p256));
  EXPECT_NE(key, amk::eval::reference_cache_key(ckpt, amk::DType::F32, 256, p256));
  EXPECT_NE(key, amk::eval::reference_cache_key(ckpt, amk::DType::BF16, 512, plain(512)));
  // A program lowered another way (a derived schedule) is another key.
  const amk::Program derived =
      amk::lower(c.config(), amk::default_schedule_config(c.config(), target, 256), target, 256,
                 amk::DType::BF16);
  EXPECT_NE(key, amk::eval::reference_cache_key(ckpt, amk::DType::BF16, 256, derived));
  // The same bytes written again (a preset regenerated on a fresh machine): the same key.
  const fs::path weights = ckpt / "model.safetensors";
  ASSERT_TRUE(fs::exists(weights));
  const fs::path again = dir_ / "again";
  amk::write_random_checkpoint(again, "tiny", amk::DType::BF16, 7);
  EXPECT_EQ(key, amk::eval::reference_cache_key(again, amk::DType::BF16, 256, p256));
  // Other weights (another seed), a byte more in the config, a file added: another key each.
  const fs::path other = dir_ / "other";
  amk::write_random_checkpoint(other, "tiny", amk::DType::BF16, 8);
  EXPECT_NE(key, amk::eval::reference_cache_key(other, amk::DType::BF16, 256, p256));
  { std::ofstream(again / "config.json", std::ios::app) << "\n"; }
  const std::string edited = amk::eval::reference_cache_key(again, amk::DType::BF16, 256, p256);
  EXPECT_NE(key, edited);
  { std::ofstream(again / "extra.txt") << "x"; }
  EXPECT_NE(edited, amk::eval::reference_cache_key(again, amk::DType::BF16, 256, p256));
  // One byte of a large file's first block.
  {
    std::fstream f(weights, std::ios::in | std::ios::out | std::ios::binary);
    char c = 0;
    f.seekg(100);
    f.get(c);
    f.seekp(100);
    f.put(char(c ^ 1));
  }
  EXPECT_NE(key, amk::eval::reference_cache_key(ckpt, amk::DType::BF16, 256, p256));
  // What cannot be read is named.
  try {
    (void)amk::eval::checkpoint_fingerprint(dir_ / "missing");
    FAIL() << "no throw";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("missing"), std::string::npos) << e.what();
  }
}

// reference_check_logits, the one path of amk bench --reference-cache and a campaign's
// Evaluator: a first call computes every step (position 1 stepped from 0, 65 seek()ed to, as
// a ReferenceDecoder driven by hand gives them) and keeps them; a second reads the same bits
// back without a decoder; a store that fails says why and the logits are still returned.
TEST_F(ReferenceCacheTest, CheckLogitsAreComputedOnceThenReadWhole) {
  const fs::path ckpt = dir_ / "tiny";
  amk::write_random_checkpoint(ckpt, "tiny", amk::DType::BF16, 11);
  const amk::Checkpoint c = amk::Checkpoint::open(ckpt);
  const auto& target = *amk::find_target("h100");
  const amk::Program plain = amk::lower(c.config(), amk::eval::plain_schedule_config(), target,
                                        128, amk::DType::BF16);
  const std::vector<int64_t> positions{0, 1, 65};
  const std::vector<int64_t> tokens =
      amk::eval::check_prompt(int(positions.size()), c.config().vocab_size);
  const ReferenceCache cache(dir_ / "refs", "k");
  const auto first = amk::eval::reference_check_logits(c, plain, positions, tokens, &cache, 60);
  EXPECT_FALSE(first.from_cache);
  EXPECT_EQ(first.not_kept, "");
  ASSERT_EQ(first.logits.size(), 3u);
  amk::ReferenceDecoder by_hand(c, plain);
  EXPECT_EQ(first.logits[0], by_hand.step(tokens[0]));
  EXPECT_EQ(first.logits[1], by_hand.step(tokens[1]));
  by_hand.seek(65, 66);
  EXPECT_EQ(first.logits[2], by_hand.step(tokens[2]));
  const auto second = amk::eval::reference_check_logits(c, plain, positions, tokens, &cache, 60);
  EXPECT_TRUE(second.from_cache);
  EXPECT_EQ(second.logits, first.logits);
  { std::ofstream(dir_ / "file") << "x"; }
  const ReferenceCache unwritable(dir_ / "file" / "refs", "k");
  const auto third = amk::eval::reference_check_logits(c, plain, positions, tokens, &unwritable, 60);
  EXPECT_FALSE(third.from_cache);
  EXPECT_NE(third.not_kept.find("cannot create"), std::string::npos) << third.not_kept;
  EXPECT_EQ(third.logits, first.logits);
}

}  // namespace
