// Conv1d, Conv2d, ConvTranspose1d, ConvTranspose2d against PyTorch
// (tests/goldens/nn_layers_conv*.json), gradchecks through the layers, errors.
#include "kiln/nn/conv.h"

#include <gtest/gtest.h>

#include "tests/nn/layer_testing.h"
#include "tests/nn/parity.h"

namespace kiln::nn {
namespace {
using namespace testing;

template <class M>
void parity(M& m, const char* file, const char* name) {
  SCOPED_TRACE(name);
  expect_parity(m, parity_case(file, name), [&](const auto& in) { return std::vector{m.forward(in[0])}; });
}

TEST(ConvLayers, Conv1dMatchesPyTorch) {
  Rngs rngs(0);
  Conv1d a(3, 4, 3, rngs, {.stride = 2, .padding = 1});
  parity(a, "nn_layers_conv", "conv1d");
  Conv1d b(4, 6, 3, rngs, {.dilation = 2, .groups = 2, .bias = false});
  parity(b, "nn_layers_conv", "conv1d_groups_dilation");
  Conv1d c(2, 3, 4, rngs, {.padding = "same"});
  parity(c, "nn_layers_conv", "conv1d_same");
}

TEST(ConvLayers, Conv2dMatchesPyTorch) {
  Rngs rngs(0);
  Conv2d a(3, 4, 3, rngs, {.padding = 1});
  parity(a, "nn_layers_conv", "conv2d");
  Conv2d b(2, 4, {3, 2}, rngs, {.stride = {2, 1}, .padding = {1, 0}, .dilation = {1, 2}, .groups = 2});
  parity(b, "nn_layers_conv", "conv2d_pair_groups");
  Conv2d c(2, 3, {3, 4}, rngs, {.padding = "SAME"});
  parity(c, "nn_layers_conv", "conv2d_same");
  Conv2d d(2, 3, 3, rngs, {.padding = "valid", .bias = false});
  parity(d, "nn_layers_conv", "conv2d_valid");
}

TEST(ConvLayers, ConvTransposeMatchesPyTorch) {
  Rngs rngs(0);
  ConvTranspose1d a(3, 2, 3, rngs, {.stride = 2, .padding = 1, .output_padding = 1});
  parity(a, "nn_layers_conv_transpose", "conv_transpose1d");
  ConvTranspose1d b(4, 6, 3, rngs, {.groups = 2, .bias = false});
  parity(b, "nn_layers_conv_transpose", "conv_transpose1d_groups_no_bias");
  ConvTranspose2d c(3, 2, 3, rngs, {.stride = 2, .padding = 1, .output_padding = 1});
  parity(c, "nn_layers_conv_transpose", "conv_transpose2d");
  ConvTranspose2d d(4, 6, {2, 3}, rngs, {.stride = {2, 1}, .groups = 2, .dilation = {1, 2}});
  parity(d, "nn_layers_conv_transpose", "conv_transpose2d_groups_dilation");
}

TEST(ConvLayers, ConvTransposeStoresWeightOutInAndConvertsPyTorchLayout) {
  Rngs rngs(0);
  ConvTranspose2d up(3, 2, 3, rngs, {.stride = 2, .padding = 1, .output_padding = 1});
  EXPECT_EQ(up.weight.shape(), (Shape{2, 3, 3, 3}));  // [O, I, KH, KW] (spec 000)
  // Loading PyTorch's [I, O, KH, KW] by its key transposes: weight[o][i] == torch[i][o].
  const auto& c = parity_case("nn_layers_conv_transpose", "conv_transpose2d");
  Tensor torch_w = golden_tensor(c["state"]["weight"]);
  StateDict sd;
  sd.insert("weight", torch_w);
  sd.insert("bias", golden_tensor(c["state"]["bias"]));
  up.load_state_dict(sd, {.torch_layout = true});
  EXPECT_TRUE(equal(up.weight.value(), contiguous(transpose(torch_w, 0, 1))));
  // Without torch_layout the PyTorch shape is a mismatch.
  EXPECT_KILN_ERROR(up.load_state_dict(sd), "'weight' expects");
  // Grouped: kiln [O, I/g, K] holds group j's [I/g, O/g] block transposed.
  ConvTranspose1d g(4, 6, 3, rngs, {.groups = 2});
  EXPECT_EQ(g.weight.shape(), (Shape{6, 2, 3}));
  Tensor tw = arange(0, 4 * 3 * 3).to(kF32).reshape({4, 3, 3});  // PyTorch [I, O/g, K]
  Tensor kw = g.from_torch("weight", tw);
  EXPECT_EQ(kw.shape(), (Shape{6, 2, 3}));
  // kiln row o = j * 3 + oo, col ii  <-  torch row i = j * 2 + ii, col oo.
  EXPECT_TRUE(equal(kw.select(0, 4).select(0, 1), tw.select(0, 3).select(0, 1)));
}

TEST(ConvLayers, OutputSizes) {
  Rngs rngs(0);
  // Spec 000: (in - 1) * stride - 2 * padding + K + output_padding.
  ConvTranspose2d up(4, 2, 3, rngs, {.stride = 2, .padding = 1, .output_padding = 1});
  EXPECT_EQ(up.forward(ones({1, 4, 5, 7})).shape(), (Shape{1, 2, 10, 14}));
  ConvTranspose1d up1(4, 2, 4, rngs, {.stride = 3, .bias = false});
  EXPECT_EQ(up1.forward(ones({2, 4, 5})).shape(), (Shape{2, 2, 16}));
  // SAME with stride 2: ceil(in / stride).
  Conv2d same(3, 5, 3, rngs, {.stride = 2, .padding = "SAME"});
  EXPECT_EQ(same.forward(ones({2, 3, 7, 8})).shape(), (Shape{2, 5, 4, 4}));
  // Unbatched input.
  Conv1d c1(3, 2, 3, rngs);
  EXPECT_EQ(c1.forward(ones({3, 9})).shape(), (Shape{2, 7}));
}

TEST(ConvLayers, InitFanInAndDecay) {
  Rngs rngs(0);
  Conv2d c(4, 8, 3, rngs, {.groups = 2});
  // fan_in = I/g * KH * KW = 18: U(-1/sqrt(18), 1/sqrt(18)).
  const double bound = 1.0 / std::sqrt(18.0);
  EXPECT_LE(max(abs(c.weight.value())).item<float>(), bound);
  EXPECT_GT(max(abs(c.weight.value())).item<float>(), 0.8 * bound);
  EXPECT_TRUE(c.weight.decay());
  EXPECT_FALSE(c.bias.decay());
  EXPECT_TRUE(equal(c.bias.value(), zeros({8})));
  // Transposed: PyTorch's fan_in = O/g * prod(K) = 2 * 4 = 8.
  ConvTranspose2d t(3, 2, 2, rngs);
  EXPECT_LE(max(abs(t.weight.value())).item<float>(), 1.0 / std::sqrt(8.0));
  EXPECT_GT(max(abs(t.weight.value())).item<float>(), 0.5 / std::sqrt(8.0));
}

TEST(ConvLayers, Gradcheck) {
  Rngs rngs(0);
  Init init = f64_init(rngs);
  Conv1d c1(4, 2, 3, init, {.stride = 2, .padding = 1, .groups = 2});
  expect_module_gradcheck(c1, leaf({2, 4, 5}, 1));
  Conv2d c2(2, 2, {2, 3}, init, {.padding = "same", .dilation = {1, 2}});
  expect_module_gradcheck(c2, noncontiguous(leaf({1, 2, 3, 4}, 2)));
  ConvTranspose1d t1(2, 4, 3, init, {.stride = 2, .output_padding = 1, .groups = 2});
  expect_module_gradcheck(t1, leaf({1, 2, 3}, 3));
  ConvTranspose2d t2(2, 3, 2, init, {.stride = 2, .padding = 1});
  expect_module_gradcheck(t2, noncontiguous(leaf({1, 2, 2, 3}, 4)));
}

TEST(ConvLayers, Repr) {
  Rngs rngs(0);
  EXPECT_EQ(Conv2d(1, 8, 3, rngs, {.padding = 1}).repr(), "Conv2d(1, 8, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1))");
  EXPECT_EQ(Conv1d(4, 8, 5, rngs, {.stride = 2, .padding = "same", .groups = 4, .bias = false}).repr(),
            "Conv1d(4, 8, kernel_size=(5,), stride=(2,), padding=same, groups=4, bias=false)");
  EXPECT_EQ(ConvTranspose2d(3, 2, 3, rngs, {.stride = 2, .output_padding = 1}).repr(),
            "ConvTranspose2d(3, 2, kernel_size=(3, 3), stride=(2, 2), output_padding=(1, 1))");
}

TEST(ConvLayers, BadArgumentsAndInputs) {
  Rngs rngs(0);
  Conv2d c(1, 8, 3, rngs);
  EXPECT_KILN_ERROR(c.forward(ones({8, 3, 28, 28})), "[Conv2d] input [8, 3, 28, 28] has 3 channels, expected 1 (in_channels)");
  EXPECT_KILN_ERROR(c.forward(ones({28, 28})), "[Conv2d] input [28, 28] must be 4-D (batched) or 3-D (unbatched)");
  // The op's own checks, named after the layer too: an input smaller than the kernel, a dtype mismatch.
  EXPECT_KILN_ERROR(c.forward(ones({1, 1, 2, 2})), "[Conv2d] [conv2d]");
  EXPECT_KILN_ERROR(c.forward(ones({1, 1, 5, 5}, {.dtype = kF64})), "[Conv2d] [conv2d]");
  EXPECT_KILN_ERROR(Conv2d(0, 8, 3, rngs), "[Conv2d] in_channels 0 and out_channels 8 must be positive");
  EXPECT_KILN_ERROR(Conv2d(3, 8, 3, rngs, {.groups = 2}), "[Conv2d] in_channels 3 is not divisible by groups 2");
  EXPECT_KILN_ERROR(Conv2d(4, 6, 3, rngs, {.groups = 4}), "[Conv2d] out_channels 6 is not divisible by groups 4");
  EXPECT_KILN_ERROR(Conv2d(3, 8, {3, 0}, rngs), "[Conv2d] kernel_size (3, 0) must be positive");
  EXPECT_KILN_ERROR(Conv2d(3, 8, 3, rngs, {.stride = 0}), "[Conv2d] stride (0, 0) must be positive");
  EXPECT_KILN_ERROR(Conv2d(3, 8, 3, rngs, {.padding = -1}), "[Conv2d] padding (-1, -1) must be non-negative");
  EXPECT_KILN_ERROR(Conv2d(3, 8, 3, rngs, {.padding = "full"}), "[Conv2d] padding 'full' must be an int");
  // Conv1dOptions' sizes are ints (a {1, 2} stride no longer compiles); a padding pair is refused.
  EXPECT_KILN_ERROR(Conv1d(3, 8, 3, rngs, {.padding = ConvPadding(1, 2)}), "[Conv1d] padding (1, 2) must be a single int");
  EXPECT_KILN_ERROR(Conv1d(3, 8, 3, rngs, {.stride = 0}), "[Conv1d] stride (0, 0) must be positive");
  EXPECT_KILN_ERROR(Conv1d(3, 8, 0, rngs), "[Conv1d] kernel_size must be positive, got 0");
  Conv1d c1(3, 8, 3, rngs);
  EXPECT_KILN_ERROR(c1.forward(ones({2, 4, 9})), "[Conv1d] input [2, 4, 9] has 4 channels, expected 3 (in_channels)");
  EXPECT_KILN_ERROR(c1.forward(ones({1, 2, 3, 9})), "[Conv1d] input [1, 2, 3, 9] must be 3-D (batched) or 2-D");
  EXPECT_KILN_ERROR(ConvTranspose2d(3, 2, 3, rngs, {.stride = 2, .output_padding = 2}),
                    "[ConvTranspose2d] output_padding (2, 2) must be smaller than stride (2, 2) or dilation (1, 1)");
  EXPECT_KILN_ERROR(ConvTranspose1d(3, 2, 3, rngs, {.padding = -1}), "[ConvTranspose1d] padding (-1, -1) must be non-negative");
  ConvTranspose1d t(3, 2, 3, rngs);
  EXPECT_KILN_ERROR(t.forward(ones({1, 2, 5})), "[ConvTranspose1d] input [1, 2, 5] has 2 channels, expected 3 (in_channels)");
}

}  // namespace
}  // namespace kiln::nn
