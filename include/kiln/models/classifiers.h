// Image classifiers for 28x28 grey images such as Fashion-MNIST: input
// [B, 1, 28, 28] f32, output logits [B, classes]. Both are nn::Sequential, so
// their state-dict keys are PyTorch's for the same nn.Sequential ("0.weight").
//
//   Rngs rngs(0);
//   auto cnn = models::image_cnn(rngs);          // ~0.92 test accuracy on Fashion-MNIST
//   auto mlp = models::image_mlp(rngs);          // 784-256-128-100-10
#pragma once

#include <cstdint>
#include <vector>

#include "kiln/nn/containers.h"
#include "kiln/nn/init.h"

namespace kiln::models {

struct MlpOptions {
  std::vector<int64_t> hidden = {256, 128, 100};  // the MLP of the Fashion-MNIST benchmark table
  int64_t in_features = 28 * 28;
  int64_t classes = 10;
  double dropout = 0.2;  // after each hidden ReLU; 0: none
};

/// Flatten, then Linear + ReLU (+ Dropout) per hidden width, then Linear to classes.
nn::Shared<nn::Sequential> image_mlp(const nn::Init& init, const MlpOptions& options = {});

struct CnnOptions {
  int64_t channels1 = 32, channels2 = 64;  // the two 3x3 convolutions
  int64_t hidden = 128;                    // the fully connected layer
  int64_t classes = 10;
  int64_t image_size = 28;  // square input, divisible by 4
  double dropout = 0.25;    // before each Linear; 0: none
};

/// Two blocks of Conv2d 3x3 (padding 1) + BatchNorm2d + ReLU + MaxPool2d 2,
/// then Flatten, Dropout, Linear + ReLU, Dropout, Linear to classes. The
/// "2 conv + pooling + BN" row of the Fashion-MNIST table (0.934 there).
nn::Shared<nn::Sequential> image_cnn(const nn::Init& init, const CnnOptions& options = {});

}  // namespace kiln::models
