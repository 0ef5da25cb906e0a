// amk/kv_window.h against a plain enumeration of the window's positions.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "amk/kv_window.h"

namespace {

using amk::KvWindow;

// The window's positions in order, by the definition: runs [start + i stride, + len) while a
// whole run fits max_seq (stride 0: the one run).
std::vector<int64_t> positions(const KvWindow& w) {
  std::vector<int64_t> out;
  for (int64_t run_start = w.start; run_start + w.len <= w.max_seq; run_start += w.stride) {
    for (int64_t t = 0; t < w.len; ++t) out.push_back(run_start + t);
    if (w.stride == 0) break;
  }
  return out;
}

TEST(KvWindow, MatchesTheEnumeratedPositions) {
  int checked = 0;
  for (int64_t max_seq : {1, 7, 16, 24})
    for (int64_t len = 1; len <= max_seq; ++len)
      for (int64_t start = 0; start + len <= max_seq; ++start)
        for (int64_t stride : {int64_t(0), len, len + 1, 2 * len, 3 * len + 2}) {
          const KvWindow w{start, len, stride, max_seq};
          const std::vector<int64_t> want = positions(w);
          ASSERT_EQ(w.keys(), int64_t(want.size())) << start << " " << len << " " << stride;
          for (int64_t j = 0; j < w.keys(); ++j) ASSERT_EQ(w.position(j), want[size_t(j)]);
          for (int64_t pos = -2; pos < max_seq + 2; ++pos) {
            int64_t seen = 0, index = -1;
            for (size_t j = 0; j < want.size(); ++j) {
              seen += want[j] <= pos;
              if (want[j] == pos) index = int64_t(j);
            }
            ASSERT_EQ(w.seen(pos), seen) << start << " " << len << " " << stride << " pos " << pos;
            ASSERT_EQ(w.index_of(pos), index) << start << " " << len << " " << stride << " pos " << pos;
          }
          ++checked;
        }
  EXPECT_GT(checked, 500);
}

// The lowering's strided blocks tile the context: 16 blocks of 4 runs of 64 at 4,096 keys.
TEST(KvWindow, StridedBlocksPartitionTheContext) {
  std::vector<int> owner(4096, -1);
  for (int b = 0; b < 16; ++b) {
    const KvWindow w{b * 64, 64, 16 * 64, 4096};
    ASSERT_EQ(w.keys(), 256);
    for (int64_t j = 0; j < w.keys(); ++j) {
      ASSERT_EQ(owner[size_t(w.position(j))], -1);
      owner[size_t(w.position(j))] = b;
    }
  }
  for (int o : owner) ASSERT_GE(o, 0);
  // Position 300 (block 4 of 64 keys) reaches blocks 0..4, one run each.
  for (int b = 0; b < 16; ++b)
    EXPECT_EQ((KvWindow{b * 64, 64, 1024, 4096}.seen(300)), b < 4 ? 64 : b == 4 ? 45 : 0) << b;
}

}  // namespace
