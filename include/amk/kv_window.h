// An attention task's KV window (docs/OPCODES.md, ATTENTION_TILE): kv_len keys from kv_start, or,
// with param kv_stride D > 0, that run of kv_len keys repeated every D positions for as long as
// whole runs fit in the cache's max_seq rows (a strided window). The window's keys are indexed in
// position order, 0 .. keys() - 1. Plain constexpr C++: the reference ops, the validator's write
// regions, the lowering, the timing simulator and the CUDA VM (--expt-relaxed-constexpr) all read
// this one definition.
//
// Why strided windows: split-KV tasks of kv_len contiguous keys leave every task but the first
// few empty at short positions, and the first one walks all of its blocks one after another
// (llama-3.2-1b at a 4,096 context: 16 tasks of 256 keys, 4 blocks walked at position 300). With
// runs of 64 keys every 16 x 64 positions each task still covers 256 keys, and the live keys of
// a short position land one block a task.
#pragma once

#include <cstdint>

namespace amk {

// I: the position type. The host uses int64_t; the CUDA VM int32_t (positions < 2^31: the ABI's
// int32 params), whose divisions cost a fraction of 64-bit ones in the megakernel's code.
template <typename I>
struct BasicKvWindow {
  I start = 0, len = 0;  // the first run: [start, start + len)
  I stride = 0;          // 0: one run; else the runs start every `stride` positions
  I max_seq = 0;         // the cache's rows: the last run ends at or before it

  constexpr bool strided() const { return stride > 0; }
  // Runs in the window (a strided window needs len >= 1, stride >= len, start + len <= max_seq).
  constexpr I runs() const {
    if (!strided()) return 1;
    return start + len <= max_seq ? (max_seq - start - len) / stride + 1 : 0;
  }
  constexpr I keys() const { return runs() * len; }
  // The cache position of the window's key j (0 <= j < keys()).
  constexpr I position(I j) const {
    return strided() ? start + (j / len) * stride + j % len : start + j;
  }
  // How many of the window's keys lie at positions <= pos: the runtime window (flags bit 2),
  // the window's first seen() keys.
  constexpr I seen(I pos) const {
    const I after = pos + 1 - start;  // positions start .. pos
    if (after <= 0) return 0;
    if (!strided()) return after < len ? after : len;
    const I whole = after / stride, rest = after % stride, n = runs();
    if (whole >= n) return n * len;
    return whole * len + (rest < len ? rest : len);
  }
  // The window's index of cache position pos, or -1 when the window does not hold it.
  constexpr I index_of(I pos) const {
    const I off = pos - start;
    if (off < 0) return -1;
    if (!strided()) return off < len ? off : -1;
    const I run = off / stride, at = off % stride;
    return run < runs() && at < len ? run * len + at : -1;
  }
};
using KvWindow = BasicKvWindow<int64_t>;

}  // namespace amk
