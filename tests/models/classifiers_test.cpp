// The Fashion-MNIST classifiers: the same layers, names and parameter counts
// as the PyTorch nn.Sequential they mirror (the expected keys and counts were
// printed by PyTorch 1.13 for nn.Sequential(Conv2d(1, 32, 3, padding=1,
// bias=False), BatchNorm2d(32), ReLU(), MaxPool2d(2), ..., Linear(128, 10))
// and the MLP Flatten, Linear(784, 256), ReLU(), Dropout(0.2), ...), so
// weights move between the two by name.
#include <gtest/gtest.h>

#include "kiln/models/classifiers.h"
#include "kiln/ops/random.h"
#include "tests/support/models_testing.h"

namespace kiln::models {
namespace {

TEST(Classifiers, CnnMatchesPyTorchLayout) {
  Rngs rngs(0);
  auto cnn = image_cnn(rngs);
  EXPECT_EQ(cnn->num_parameters(), 421738);
  EXPECT_EQ(testing::state_dict_keys(*cnn), (std::vector<std::string>{"0.weight", "1.weight", "1.bias", "1.running_mean", "1.running_var",
                                                  "1.num_batches_tracked", "4.weight", "5.weight", "5.bias",
                                                  "5.running_mean", "5.running_var", "5.num_batches_tracked",
                                                  "10.weight", "10.bias", "13.weight", "13.bias"}));
  Generator g(1);
  cnn->eval();
  EXPECT_EQ(cnn(randn({3, 1, 28, 28}, g)).shape(), (Shape{3, 10}));
}

TEST(Classifiers, MlpMatchesPyTorchLayout) {
  Rngs rngs(0);
  auto mlp = image_mlp(rngs);
  EXPECT_EQ(mlp->num_parameters(), 247766);
  EXPECT_EQ(testing::state_dict_keys(*mlp), (std::vector<std::string>{"1.weight", "1.bias", "4.weight", "4.bias", "7.weight", "7.bias",
                                                  "10.weight", "10.bias"}));
  Generator g(1);
  EXPECT_EQ(mlp(randn({5, 1, 28, 28}, g)).shape(), (Shape{5, 10}));
  // Without dropout: Flatten, then Linear + ReLU per hidden width, then the head.
  auto plain = image_mlp(rngs, {.hidden = {32}, .dropout = 0});
  EXPECT_EQ(plain->size(), 4u);
  EXPECT_EQ(plain->num_parameters(), 784 * 32 + 32 + 32 * 10 + 10);
}

TEST(Classifiers, Errors) {
  Rngs rngs(0);
  EXPECT_KILN_ERROR(image_mlp(rngs, {.hidden = {16, 0}}), "[image_mlp] hidden widths must be positive, got 0");
  EXPECT_KILN_ERROR(image_mlp(rngs, {.in_features = 0}), "in_features and classes must be positive, got 0 and 10");
  EXPECT_KILN_ERROR(image_mlp(rngs, {.dropout = 1.0}), "dropout must be in [0, 1), got 1");
  EXPECT_KILN_ERROR(image_cnn(rngs, {.image_size = 30}),
                    "[image_cnn] image_size must be a positive multiple of 4 (two 2x2 poolings), got 30");
  EXPECT_KILN_ERROR(image_cnn(rngs, {.channels2 = 0}), "channels, hidden and classes must be positive");
  EXPECT_KILN_ERROR(image_cnn(rngs, {.dropout = -0.1}), "dropout must be in [0, 1), got -0.1");
}

}  // namespace
}  // namespace kiln::models
