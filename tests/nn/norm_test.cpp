// BatchNorm1d/2d, LayerNorm, RMSNorm against PyTorch (tests/goldens/nn_layers_norm.json),
// running statistics (spec 000's population variance and PyTorch's unbiased
// one), train/eval, gradchecks, errors.
#include "kiln/nn/norm.h"

#include <gtest/gtest.h>

#include "tests/nn/layer_testing.h"
#include "tests/nn/parity.h"

namespace kiln::nn {
namespace {
using namespace testing;

// Runs a BatchNorm golden case and checks the buffers after the forward.
void batchnorm_parity(BatchNormBase& bn, const char* name, bool unbiased) {
  SCOPED_TRACE(name);
  const auto& c = parity_case("nn_layers_norm", name);
  bn.train(c["train"].get<bool>());
  expect_parity(bn, c, [&](const auto& in) { return std::vector{bn.forward(in[0])}; });
  EXPECT_TRUE(all_close(bn.running_mean, golden_tensor(c["running_mean"]), 1e-5, 1e-6));
  Tensor expect_var = golden_tensor(c[unbiased ? "running_var_unbiased" : "running_var_population"]);
  EXPECT_TRUE(all_close(bn.running_var, expect_var, 1e-5, 1e-6));
  EXPECT_EQ(bn.num_batches_tracked.item<int64_t>(), c["num_batches_tracked"].get<int64_t>());
}

TEST(NormLayers, BatchNormMatchesPyTorch) {
  for (bool unbiased : {false, true}) {
    SCOPED_TRACE(unbiased ? "unbiased running var" : "population running var");
    const BatchNormOptions o{.unbiased_running_var = unbiased};
    BatchNorm1d nc(4, o);
    batchnorm_parity(nc, "batchnorm1d_nc_train", unbiased);
    BatchNorm1d ncl(4, o);
    batchnorm_parity(ncl, "batchnorm1d_ncl_train", unbiased);
    BatchNorm1d ncl_eval(4, o);
    batchnorm_parity(ncl_eval, "batchnorm1d_ncl_eval", unbiased);
    BatchNorm2d b2(3, o);
    batchnorm_parity(b2, "batchnorm2d_train", unbiased);
    BatchNorm2d b2_eval(3, o);
    batchnorm_parity(b2_eval, "batchnorm2d_eval", unbiased);
  }
}

TEST(NormLayers, BatchNormBuffersAndModes) {
  BatchNorm2d bn(3);
  auto names = bn.state_dict().keys();
  EXPECT_EQ(names, (std::vector<std::string>{"weight", "bias", "running_mean", "running_var", "num_batches_tracked"}));
  EXPECT_EQ(bn.num_batches_tracked.dtype(), kI64);
  EXPECT_EQ(bn.num_parameters(), 6);
  EXPECT_FALSE(bn.weight.decay());
  EXPECT_FALSE(bn.bias.decay());
  Generator g(1);
  Tensor x = randn({4, 3, 2, 2}, g) * 2.0 + 1.0;
  bn.forward(x);
  bn.forward(x);
  EXPECT_EQ(bn.num_batches_tracked.item<int64_t>(), 2);
  // Eval uses (and keeps) the running stats.
  bn.eval();
  Tensor rm = bn.running_mean.clone();
  Tensor y = bn.forward(x);
  EXPECT_TRUE(equal(bn.running_mean, rm));
  EXPECT_EQ(bn.num_batches_tracked.item<int64_t>(), 2);
  Tensor expect = (x - rm.reshape({1, 3, 1, 1})) / sqrt(bn.running_var.reshape({1, 3, 1, 1}) + 1e-5);
  EXPECT_TRUE(all_close(y, expect, 1e-5, 1e-5));
  // momentum = nullopt: cumulative average; after one batch the running mean is the batch mean.
  BatchNorm1d cum(2, {.momentum = std::nullopt});
  Tensor z = randn({5, 2}, g);
  cum.forward(z);
  EXPECT_TRUE(all_close(cum.running_mean, mean(z, {0}), 1e-5, 1e-6));
  // track_running_stats = false: no buffers, batch statistics in eval too.
  BatchNorm1d plain(2, {.affine = false, .track_running_stats = false});
  EXPECT_TRUE(plain.state_dict().keys().empty());
  plain.eval();
  EXPECT_TRUE(all_close(mean(plain.forward(z), {0}), zeros({2}), 0, 1e-6));
}

TEST(NormLayers, BatchNormForwardIsConstAndUpdatesItsRegisteredBuffers) {
  // Through a const reference: the running statistics are the registered
  // buffers (the same tensors state_dict and named_buffers see), updated in
  // place in training, with the numbers of a plain BatchNorm.
  BatchNorm1d bn(2), ref(2);
  const BatchNorm1d& cbn = bn;
  Tensor x = tensor<float>({1, 2, 3, 5, 4, 9}, {3, 2});  // channel means 8/3, 16/3
  cbn.forward(x);
  ref.forward(x);
  for (const auto& [name, buffer] : bn.named_buffers()) {
    const Tensor& member = name == "running_mean" ? bn.running_mean
                           : name == "running_var" ? bn.running_var
                                                   : bn.num_batches_tracked;
    EXPECT_TRUE(buffer.is_same(member)) << name;
  }
  // momentum 0.1 from zeros / ones: 0.1 * batch mean; 0.9 + 0.1 * population variance (spec 000),
  // 14/9 and 74/9.
  EXPECT_TRUE(all_close(bn.running_mean, tensor<float>({8.0f / 30, 16.0f / 30}, {2}), 1e-6, 1e-7));
  EXPECT_TRUE(all_close(bn.running_var, tensor<float>({0.9f + 0.1f * 14 / 9, 0.9f + 0.1f * 74 / 9}, {2}), 1e-6, 1e-7));
  EXPECT_TRUE(equal(bn.state_dict().at("running_var"), ref.state_dict().at("running_var")));
  EXPECT_EQ(bn.state_dict().at("num_batches_tracked").item<int64_t>(), 1);
  // After load_state_dict and to() the members are still the registered buffers.
  bn.load_state_dict(ref.state_dict());
  bn.to(kF64);
  cbn.forward(to(x, kF64));
  EXPECT_EQ(bn.named_buffers()[0].second.dtype(), kF64);
  EXPECT_TRUE(bn.named_buffers()[0].second.is_same(bn.running_mean));
  EXPECT_EQ(bn.state_dict().at("num_batches_tracked").item<int64_t>(), 2);
  // momentum = nullopt reads the counter it incremented: 1 / 2 at the second batch.
  BatchNorm1d cum(2, {.momentum = std::nullopt});
  const BatchNorm1d& ccum = cum;
  ccum.forward(x);
  ccum.forward(x * 3.0f);
  EXPECT_TRUE(all_close(cum.running_mean, tensor<float>({16.0f / 3, 32.0f / 3}, {2}), 1e-6, 1e-6));
}

TEST(NormLayers, LayerNormAndRMSNormMatchPyTorch) {
  LayerNorm ln(Shape{5});
  expect_parity(ln, parity_case("nn_layers_norm", "layer_norm"), [&](const auto& in) { return std::vector{ln.forward(in[0])}; });
  LayerNorm ln2(Shape{3, 4}, 1e-5, false);
  EXPECT_EQ(ln2.num_parameters(), 0);
  expect_parity(ln2, parity_case("nn_layers_norm", "layer_norm_2d_no_affine"),
                [&](const auto& in) { return std::vector{ln2.forward(in[0])}; });
  RMSNorm rms(Shape{8});
  expect_parity(rms, parity_case("nn_layers_norm", "rms_norm"), [&](const auto& in) { return std::vector{rms.forward(in[0])}; });
  RMSNorm rms2(Shape{2, 4});
  expect_parity(rms2, parity_case("nn_layers_norm", "rms_norm_2d"), [&](const auto& in) { return std::vector{rms2.forward(in[0])}; });
  EXPECT_FALSE(rms.weight.decay());
  EXPECT_FALSE(ln.weight.decay());
  EXPECT_FALSE(ln.bias.decay());
}

TEST(NormLayers, Gradcheck) {
  BatchNorm1d bn1(3);
  bn1.to(kF64);
  expect_module_gradcheck(bn1, leaf({4, 3}, 1));
  BatchNorm2d bn2(2, {.unbiased_running_var = true});
  bn2.to(kF64);
  expect_module_gradcheck(bn2, noncontiguous(leaf({2, 2, 2, 2}, 2)));
  bn2.eval();
  expect_module_gradcheck(bn2, leaf({2, 2, 2, 2}, 3));
  LayerNorm ln(Shape{4});
  ln.to(kF64);
  expect_module_gradcheck(ln, leaf({3, 4}, 4));
  RMSNorm rms(Shape{2, 3});
  rms.to(kF64);
  expect_module_gradcheck(rms, noncontiguous(leaf({2, 2, 3}, 5)));
}

TEST(NormLayers, Repr) {
  EXPECT_EQ(BatchNorm2d(16).repr(), "BatchNorm2d(16, eps=1e-05, momentum=0.1, affine=true, track_running_stats=true)");
  EXPECT_EQ(LayerNorm(Shape{768}).repr(), "LayerNorm((768,), eps=1e-05, elementwise_affine=true)");
  EXPECT_EQ(RMSNorm(Shape{2, 4}).repr(), "RMSNorm((2, 4), eps=1e-06, elementwise_affine=true)");
}

TEST(NormLayers, BadArgumentsAndInputs) {
  EXPECT_KILN_ERROR(BatchNorm2d(0), "[BatchNorm2d] num_features must be positive, got 0");
  EXPECT_KILN_ERROR(BatchNorm1d(3, {.momentum = 1.5}), "[BatchNorm1d] momentum must be in [0, 1], got 1.5");
  BatchNorm2d bn(3);
  EXPECT_KILN_ERROR(bn.forward(ones({2, 4, 5, 5})), "[BatchNorm2d] input [2, 4, 5, 5] has 4 channels, expected 3 (num_features)");
  EXPECT_KILN_ERROR(bn.forward(ones({2, 3, 5})), "[BatchNorm2d] input [2, 3, 5] must be [B, C, H, W]");
  EXPECT_KILN_ERROR(bn.forward(ones({1, 3, 1, 1})), "[BatchNorm2d] input [1, 3, 1, 1] has 1 value per channel");
  BatchNorm1d b1(3);
  EXPECT_KILN_ERROR(b1.forward(ones({2, 3, 4, 5})), "[BatchNorm1d] input [2, 3, 4, 5] must be [B, C] or [B, C, L]");
  EXPECT_KILN_ERROR(b1.forward(ones({2, 3}, {.dtype = kI64})), "[BatchNorm1d] input [2, 3] has dtype i64, expected a floating dtype");
  EXPECT_KILN_ERROR(LayerNorm(Shape{}), "[LayerNorm] normalized_shape must have at least one dim");
  EXPECT_KILN_ERROR(LayerNorm(Shape{4, 0}), "[LayerNorm] normalized_shape [4, 0] must be positive");
  EXPECT_KILN_ERROR(LayerNorm(Shape{8}).forward(ones({2, 3, 7})), "[LayerNorm] input [2, 3, 7] does not end in normalized_shape [8]");
  EXPECT_KILN_ERROR(RMSNorm(Shape{2, 4}).forward(ones({4})), "[RMSNorm] input [4] does not end in normalized_shape [2, 4]");
  EXPECT_KILN_ERROR(RMSNorm(Shape{4}, -1.0), "[RMSNorm] eps must be non-negative, got -1");
  // f32 parameters, f64 input: the op's dtype check, named after the layer.
  EXPECT_KILN_ERROR(LayerNorm(Shape{4}).forward(ones({2, 4}, {.dtype = kF64})), "[LayerNorm] [layer_norm]");
  BatchNorm2d eval_bn(3);
  eval_bn.eval();
  EXPECT_KILN_ERROR(eval_bn.forward(ones({2, 3, 2, 2}, {.dtype = kF64})), "[BatchNorm2d] [batch_norm]");
}

}  // namespace
}  // namespace kiln::nn

namespace kiln::nn {
namespace {

// M10: one Init threaded down puts the norms in its dtype too.
TEST(NormInit, NormsFollowTheInitDtype) {
  Rngs rngs(0);
  Init init(rngs);
  init.dtype = kF64;
  Sequential net(Conv2d(1, 4, 3, init), BatchNorm2d(4, init), Flatten(), Linear(4 * 2 * 2, 6, init),
                 BatchNorm1d(6, init), LayerNorm({6}, init), RMSNorm({6}, init));
  for (const auto& [path, p] : net.named_parameters()) EXPECT_EQ(p.dtype(), kF64) << path;
  for (const auto& [path, b] : net.named_buffers())
    EXPECT_EQ(b.dtype(), path.ends_with("num_batches_tracked") ? kI64 : kF64) << path;
  EXPECT_EQ(net.forward(ones({2, 1, 4, 4}, {.dtype = kF64})).dtype(), kF64);
  EXPECT_EQ(rngs.state().at("params").count, 4u);  // conv and linear weights and biases; norms draw nothing
}

}  // namespace
}  // namespace kiln::nn
