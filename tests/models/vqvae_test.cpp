// models::VQVAE: shapes, codes decode to the forward's reconstruction
// bitwise, the codebook is state and not a parameter, and a few Adam + EMA
// steps lower the loss on a small image batch.
#include <gtest/gtest.h>

#include <map>

#include "kiln/models/vqvae.h"
#include "kiln/ops/conv_fused.h"
#include "kiln/optim/adam.h"
#include "tests/support/models_testing.h"

namespace kiln::testing {
namespace {

// Eight blurry "images" in [0, 1]: smooth stripes at different angles.
Tensor stripes(int64_t n) {
  std::vector<float> v;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t y = 0; y < 28; ++y)
      for (int64_t x = 0; x < 28; ++x)
        v.push_back(0.5f + 0.5f * std::sin(0.3f * float(x) * std::cos(0.4f * float(i)) + 0.3f * float(y) * std::sin(0.4f * float(i))));
  return tensor<float>(v, {n, 1, 28, 28});
}

TEST(VQVAE, ShapesAndCodesDecodeBitwise) {
  Rngs rngs(0);
  for (int64_t levels : {1, 3}) {
    models::VQVAE model(rngs, {.codebook_size = 16, .dim = 8, .hidden = 4, .levels = levels});
    Tensor x = stripes(2);
    auto out = model.forward(x);  // train mode: seeds the codebook(s) from these 98 latents
    EXPECT_EQ(out.recon.shape(), (Shape{2, 1, 28, 28}));
    EXPECT_EQ(out.z_e.shape(), (Shape{2, 7, 7, 8}));
    EXPECT_EQ(out.indices.shape(), levels == 1 ? (Shape{2, 7, 7}) : (Shape{2, 7, 7, 3}));
    model.eval();
    NoGradGuard g;
    auto again = model.forward(x);
    EXPECT_TRUE(equal(model.decode_indices(again.indices), again.recon));
    // The codebooks are buffers: in the state dict, not in the parameters.
    for (const auto& [name, p] : model.named_parameters())
      EXPECT_TRUE(name.starts_with("encoder.") || name.starts_with("decoder.")) << name;
    const std::string prefix = levels == 1 ? "vq." : "rvq.levels.2.";
    EXPECT_TRUE(model.state_dict().contains(prefix + "codebook"));
    EXPECT_TRUE(model.state_dict().contains(prefix + "cluster_size"));
    EXPECT_TRUE(model.state_dict().contains(prefix + "embed_sum"));
    EXPECT_KILN_ERROR(model.forward(zeros({2, 1, 14, 14})), "must be [B, 1, 28, 28]");
  }
}

TEST(VQVAE, AdamAndEmaStepsLowerTheLoss) {
  Rngs rngs(1);
  models::VQVAE model(rngs, {.codebook_size = 32, .dim = 16, .hidden = 8});
  optim::Adam opt(model.parameters(), {.lr = 2e-3});
  Tensor x = stripes(8);
  double first = 0, last = 0;
  for (int step = 0; step < 40; ++step) {
    auto out = model.forward(x);
    Tensor loss = mse_loss(out.recon, x) + out.commitment_loss;
    if (step == 0) first = loss.item<float>();
    last = loss.item<float>();
    opt.zero_grad();
    loss.backward();
    opt.step();
    model.ema_update(out);
  }
  EXPECT_LT(last, 0.5 * first) << "first " << first << " last " << last;
  EXPECT_GT(model.stats(model.forward(x).indices).used, 1);
}

// NOTE [VQ-VAE fused convs] in src/models/vqvae.cpp: with D and hidden
// multiples of 16 the conv stack runs on channel-blocked activations with the
// ReLUs fused; it gives the modules' own forward up to f32 rounding, in the
// outputs, the codes and every parameter's gradient, and codes still decode
// to the forward's reconstruction bitwise.
TEST(VQVAE, FusedConvPathMatchesTheModules) {
  for (int64_t levels : {1, 2}) {
    SCOPED_TRACE(fmt::format("levels {}", levels));
    Tensor x = stripes(4);
    std::vector<models::VQVAEOutput> outs;
    std::vector<std::map<std::string, Tensor>> grads;
    for (bool fused : {false, true}) {
      Rngs rngs(3);
      models::VQVAE model(rngs, {.codebook_size = 16, .dim = 32, .hidden = 16, .levels = levels, .fused_convs = fused});
      EXPECT_EQ(model.fused_path(x), fused && channel_blocked_native());
      models::VQVAEOutput out = model.forward(x);
      (mse_loss(out.recon, x) + out.commitment_loss).backward();
      std::map<std::string, Tensor> g;
      for (const auto& [name, p] : model.named_parameters()) g[name] = p.grad();
      grads.push_back(g);
      outs.push_back(out);
      if (fused) {
        model.eval();
        NoGradGuard ng;
        auto again = model.forward(x);
        EXPECT_TRUE(equal(model.decode_indices(again.indices), again.recon));
      }
    }
    EXPECT_TRUE(all_close(outs[1].z_e, outs[0].z_e, 1e-5, 1e-6)) << "z_e";
    EXPECT_TRUE(equal(outs[1].indices, outs[0].indices)) << "codes";
    EXPECT_TRUE(all_close(outs[1].recon, outs[0].recon, 1e-5, 1e-6)) << "recon";
    EXPECT_TRUE(all_close(outs[1].commitment_loss, outs[0].commitment_loss, 1e-5, 1e-7)) << "commitment";
    ASSERT_EQ(grads[1].size(), grads[0].size());
    for (const auto& [name, g] : grads[0]) {
      ASSERT_TRUE(g.defined()) << name;
      EXPECT_TRUE(all_close(grads[1].at(name), g, 1e-4, 1e-6)) << name;
    }
  }
}

TEST(VQVAE, FusedPathIsOnlyForF32WithChannelsInSixteens) {
  Rngs rngs(0);
  models::VQVAE small(rngs, {.codebook_size = 16, .dim = 8, .hidden = 4});
  EXPECT_FALSE(small.fused_path(stripes(1)));
  models::VQVAE model(rngs, {.codebook_size = 16, .dim = 16, .hidden = 16});
  EXPECT_EQ(model.fused_path(stripes(1)), channel_blocked_native());  // AVX-512: true
  EXPECT_FALSE(model.fused_path(stripes(1).to(kF64)));
  EXPECT_KILN_ERROR(model.decode(zeros({2, 7, 7, 8})), "[VQVAE.decode] latents");
  model.set_compute_dtype(kBF16);
  EXPECT_FALSE(model.fused_path(stripes(1)));
}

}  // namespace
}  // namespace kiln::testing
