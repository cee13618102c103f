// FashionMNIST: Zalando's 28x28 grey-scale clothing images in 10 classes
// (60,000 for training, 10,000 for testing), read from the gzipped IDX files
// that Debian's dataset-fashion-mnist installs (torchvision's FashionMNIST):
//
//   auto train = std::make_shared<data::FashionMNIST>();                  // [60000, 1, 28, 28] f32, [60000] i64
//   auto test = std::make_shared<data::FashionMNIST>(data::FashionMNIST::default_root(), /*train=*/false);
//   data::FashionMNIST::classes()[train->get(0).target.item<int64_t>()]  // "Ankle boot"
//
// Examples are input [1, 28, 28] f32: pixels / 255, then (x - kMean) / kStd
// with the training set's mean and standard deviation (torchvision's
// Normalize((0.2860,), (0.3530,))); and target [] i64, the class 0..9.
// The set stays in memory as the files' u8 pixels (47 MB for the training
// set, a quarter of f32) and gather() converts a batch's rows straight into
// the loader's buffer (a vectorised loop: tens of us for [64, 1, 28, 28]).
// Like all data sets it is read-only after construction, so a DataLoader's
// worker thread may gather from it.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "kiln/data/dataset.h"

namespace kiln::data {

struct FashionMNISTOptions {
  bool normalize = true;  // (x / 255 - kMean) / kStd; false: x / 255 in [0, 1]
  int64_t limit = 0;      // keep only the first `limit` examples (short runs); 0: all
};

class FashionMNIST : public Dataset {
 public:
  /// The training set's pixel mean and standard deviation after scaling to
  /// [0, 1] (over all 60000 * 784 pixels, population std), rounded to 4
  /// places: 0.286041 and 0.353024 (tests/data/fashion_mnist_test.cpp computes them).
  static constexpr float kMean = 0.2860f;
  static constexpr float kStd = 0.3530f;

  /// Reads <root>/train-* (train) or <root>/t10k-* (test): images-idx3-ubyte.gz
  /// and labels-idx1-ubyte.gz. A missing or malformed file is a kiln::Error
  /// naming the file and the problem.
  explicit FashionMNIST(const std::string& root = default_root(), bool train = true, FashionMNISTOptions options = {});

  int64_t size() const override { return targets_.size(0); }
  /// input [1, 28, 28] f32 (scaled, normalised unless options.normalize is
  /// false), target [] i64.
  Example get(int64_t index) const override;
  /// out.input [n, 1, 28, 28] f32, out.target [n] i64.
  void gather(std::span<const int64_t> indices, Batch& out) const override;

  /// The pixels as in the files: [N, 1, 28, 28] u8 (torchvision's .data).
  const Tensor& images() const { return images_; }
  /// The classes: [N] i64 (torchvision's .targets).
  const Tensor& targets() const { return targets_; }
  bool train() const { return train_; }
  bool normalize() const { return normalize_; }
  const std::string& root() const { return root_; }

  /// $KILN_FASHION_MNIST when set, else /usr/share/datasets/fashion-mnist.
  static std::string default_root();
  /// The class names, by target index: "T-shirt/top", "Trouser", ..., "Ankle boot".
  static const std::vector<std::string>& classes();

 private:
  Tensor images_;   // [N, 1, 28, 28] u8, contiguous
  Tensor targets_;  // [N] i64
  std::string root_;
  bool train_;
  bool normalize_;
};

}  // namespace kiln::data
