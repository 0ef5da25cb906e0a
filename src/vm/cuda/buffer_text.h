// How the loader's refusals print a buffer descriptor (host only).
#pragma once

#include <string>

#include "amk/abi.h"

namespace amk::cuda {

// The descriptor's shape, "[2, 3]".
inline std::string shape_text(const amk_buffer_t& b) {
  std::string s = "[";
  for (int i = 0; i < b.rank && i < AMK_MAX_RANK; ++i) s += (i ? ", " : "") + std::to_string(b.shape[i]);
  return s + "]";
}

}  // namespace amk::cuda
