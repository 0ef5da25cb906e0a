// WEIGHT buffers bound to checkpoint tensors (amk/decoder.h): the tensor itself, or the box of
// it a buffer holds (IR 0.12.0 source_box). One implementation for every decoder and for
// `amk compile`'s check.
#include <fmt/format.h>

#include <algorithm>

#include "amk/decoder.h"

namespace amk {

const TensorView& weight_tensor(const Buffer& b, const Checkpoint& checkpoint) {
  if (!b.source) throw DecodeError(fmt::format("WEIGHT buffer '{}' has no source", b.name));
  if (!b.source_box) return checkpoint.tensor(*b.source, b.shape);
  const SourceBox& x = *b.source_box;
  const TensorView& t = checkpoint.tensor(*b.source);
  // validate() proved x's offsets >= 0, sizes >= 1 and the ends free of overflow; a program
  // bound without validation gets the same refusal here.
  if (t.shape.size() != 2 || x.row0 < 0 || x.col0 < 0 || x.rows < 1 || x.cols < 1 ||
      x.row0 > t.shape[0] - x.rows || x.col0 > t.shape[1] - x.cols ||
      b.shape != std::vector<int64_t>{x.rows, x.cols})
    throw DecodeError(fmt::format(
        "WEIGHT buffer '{}' (shape [{}]) holds the box rows [{}, +{}) x columns [{}, +{}) of "
        "'{}', which is [{}]: the box must lie inside a rank-2 tensor and be the buffer's shape",
        b.name, fmt::join(b.shape, ", "), x.row0, x.rows, x.col0, x.cols, *b.source,
        fmt::join(t.shape, ", ")));
  return t;
}

Tensor weight_value(const Buffer& b, const Checkpoint& checkpoint) {
  const TensorView& t = weight_tensor(b, checkpoint);
  std::vector<float> values = t.to_floats();
  if (b.source_box) {
    const SourceBox& x = *b.source_box;
    const int64_t width = t.shape[1];
    std::vector<float> box(size_t(x.rows * x.cols));
    for (int64_t r = 0; r < x.rows; ++r) {
      const auto from = values.begin() + (x.row0 + r) * width + x.col0;
      std::copy(from, from + x.cols, box.begin() + r * x.cols);
    }
    values = std::move(box);
  }
  return Tensor::from_floats(b.dtype, b.shape, values);
}

}  // namespace amk
