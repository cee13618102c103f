// The layers together: a small CNN in Sequential against PyTorch
// (tests/goldens/nn_layers_model.json), its state-dict keys, and the
// train/eval switch reaching BatchNorm and Dropout inside a container.
#include <gtest/gtest.h>

#include "tests/nn/parity.h"

namespace kiln::nn {
namespace {
using namespace testing;

Sequential small_cnn(Rngs& rngs) {
  return Sequential(Conv2d(1, 2, 3, rngs, {.padding = 1}), BatchNorm2d(2), ReLU(), MaxPool2d(2), Flatten(),
                    Linear(8, 3, rngs));
}

TEST(ComposeLayers, SmallCnnMatchesPyTorch) {
  Rngs rngs(0);
  Sequential cnn = small_cnn(rngs);
  EXPECT_EQ(cnn.state_dict().keys(),
            (std::vector<std::string>{"0.weight", "0.bias", "1.weight", "1.bias", "1.running_mean", "1.running_var",
                                      "1.num_batches_tracked", "5.weight", "5.bias"}));
  expect_parity(cnn, parity_case("nn_layers_model", "cnn"), [&](const auto& in) { return std::vector{cnn.forward(in[0])}; });
}

TEST(ComposeLayers, TrainAndEvalReachChildren) {
  Rngs rngs(0);
  Sequential net(Conv2d(1, 2, 3, rngs), BatchNorm2d(2), Dropout(0.5, 1), Flatten());
  Tensor x = ones({2, 1, 4, 4});
  Tensor a = net.forward(x), b = net.forward(x);
  EXPECT_FALSE(equal(a, b));  // two dropout masks
  net.eval();
  EXPECT_TRUE(equal(net.forward(x), net.forward(x)));
  EXPECT_EQ(net.repr().find("(2): Dropout(p=0.5)") != std::string::npos, true) << net.repr();
}

TEST(ComposeLayers, Bf16MatchesF32) {
  // Module::to(kBF16) casts parameters and float buffers; the ops run bf16 (f32 statistics).
  Rngs rngs(0);
  Sequential net(Conv2d(3, 4, 3, rngs, {.padding = "same"}), BatchNorm2d(4), ReLU(), AvgPool2d(2),
                 ConvTranspose2d(4, 2, 2, rngs, {.stride = 2}), MaxPool2d(2), Flatten(), LayerNorm(Shape{32}),
                 RMSNorm(Shape{32}));
  Generator g(3);
  Tensor x = randn({2, 3, 8, 8}, g);
  Tensor y32 = net.forward(x);
  net.to(kBF16);
  Tensor y16 = net.forward(x.to(kBF16));
  ASSERT_EQ(y16.dtype(), kBF16);
  EXPECT_TRUE(all_close(y16.to(kF32), y32, 5e-2, 5e-2));
  backward({sum(y16.to(kF32))});
  Embedding e(10, 4, rngs);
  e.to(kBF16);
  EXPECT_EQ(e.forward(tensor<int64_t>({1, 2})).dtype(), kBF16);
}

}  // namespace
}  // namespace kiln::nn
