// Dataset: an indexable collection of (input, target) examples, PyTorch's
// map-style Dataset. A DataLoader batches them:
//
//   auto train = std::make_shared<data::TensorDataset>(images, labels);  // [N, 1, 28, 28] f32, [N] i64
//   data::Example e = train->get(0);                                     // input [1, 28, 28], target []
//
// gather() is how a loader fills one batch: it writes the examples at
// `indices` into preallocated batch tensors, so a data set that holds its data
// in memory (TensorDataset, FashionMNIST) copies rows straight into the
// loader's reused buffers, without a tensor per example.
#pragma once

#include <cstdint>
#include <span>

#include "kiln/core/tensor.h"

namespace kiln::data {

struct Example {
  Tensor input;
  Tensor target;
};

// A batch: input [B, ...] and target [B, ...], B = size() (the last batch of an
// epoch may be smaller unless the loader drops it).
struct Batch {
  Tensor input;
  Tensor target;
  int64_t size() const { return input.defined() ? input.size(0) : 0; }
};

class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t size() const = 0;
  /// Example `index` (0 <= index < size(); out of range is a kiln::Error).
  /// Every example has the same input and target shapes and dtypes.
  virtual Example get(int64_t index) const = 0;
  /// Writes examples `indices` into out.input[0..n) and out.target[0..n), whose
  /// shapes are [n, input...] and [n, target...] (n = indices.size()) and whose
  /// dtypes are the examples'. The default calls get() per example and copies.
  virtual void gather(std::span<const int64_t> indices, Batch& out) const;
};

// Examples are rows of two tensors with the same first dimension (PyTorch's
// TensorDataset): example i is (inputs[i], targets[i]).
class TensorDataset : public Dataset {
 public:
  TensorDataset(Tensor inputs, Tensor targets);
  int64_t size() const override { return inputs_.size(0); }
  Example get(int64_t index) const override;
  void gather(std::span<const int64_t> indices, Batch& out) const override;
  const Tensor& inputs() const { return inputs_; }
  const Tensor& targets() const { return targets_; }

 private:
  Tensor inputs_;   // [N, ...], contiguous
  Tensor targets_;  // [N, ...], contiguous
};

}  // namespace kiln::data
