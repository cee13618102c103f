// models::DiT (kiln/models/dit.h): forward and backward against DiT's
// models.py re-implemented in PyTorch (tools/goldens/flow.py), AdaLN-Zero's
// start (output exactly 0, every block the identity), classifier-free
// guidance and label dropout, sampling, and the errors.
#include <algorithm>
#include <cmath>

#include <gtest/gtest.h>

#include "kiln/autograd/gradcheck.h"
#include "kiln/core/grad_mode.h"
#include "kiln/models/dit.h"
#include "kiln/ops/binary.h"
#include "kiln/ops/creation.h"
#include "kiln/ops/random.h"
#include "kiln/ops/reduce.h"
#include "kiln/ops/shape.h"
#include "tests/support/models_testing.h"

namespace kiln::models {
namespace {

using testing::all_close;
using testing::golden_tensor;

DiTConfig golden_config(const nlohmann::json& c, bool learned) {
  return {.image_size = c.at("image_size").get<int64_t>(),
          .in_channels = c.at("in_channels").get<int64_t>(),
          .patch_size = c.at("patch_size").get<int64_t>(),
          .hidden_size = c.at("hidden_size").get<int64_t>(),
          .depth = c.at("depth").get<int64_t>(),
          .num_heads = c.at("num_heads").get<int64_t>(),
          .mlp_ratio = c.at("mlp_ratio").get<double>(),
          .num_classes = c.at("num_classes").get<int64_t>(),
          .class_dropout = 0.1,
          .learned_pos_embed = learned,
          .frequency_dim = c.at("frequency_dim").get<int64_t>()};
}

DiTConfig tiny(int64_t classes = 3, double dropout = 0.1) {
  return {.image_size = 8, .in_channels = 1, .patch_size = 4, .hidden_size = 16, .depth = 2, .num_heads = 2,
          .num_classes = classes, .class_dropout = dropout, .frequency_dim = 16};
}

TEST(DiT, GoldenForwardBackward) {
  const auto& j = testing::golden("flow_dit");
  for (const auto& c : j.at("cases")) {
    const bool learned = c.at("learned_pos").get<bool>();
    SCOPED_TRACE(learned ? "learned pos_embed" : "sincos pos_embed");
    Rngs rngs(0);
    nn::Init init(rngs);
    init.dtype = kF64;
    DiT dit(golden_config(j.at("config"), learned), init);
    nn::StateDict state;
    for (const auto& [k, v] : c.at("state").items()) state.insert(k, golden_tensor(v));
    if (!learned) {  // DiT's get_2d_sincos_pos_embed, computed by kiln
      EXPECT_TRUE(all_close(dit.pos_embed, golden_tensor(c.at("state").at("pos_embed")), 0, 1e-12));
    }
    std::vector<std::string> keys = testing::state_dict_keys(dit), want;
    for (const auto& [k, v] : c.at("state").items()) want.push_back(k);
    std::sort(keys.begin(), keys.end());
    std::sort(want.begin(), want.end());
    EXPECT_EQ(keys, want);
    dit.load_state_dict(state);

    Tensor x = golden_tensor(c.at("x"));
    x.requires_grad_(true);
    Tensor out = dit.forward(x, golden_tensor(c.at("t")), golden_tensor(c.at("y")));
    EXPECT_TRUE(all_close(out, golden_tensor(c.at("out")), 1e-5, 1e-9));
    sum(mul(out, golden_tensor(c.at("c")))).backward();
    EXPECT_TRUE(all_close(x.grad(), golden_tensor(c.at("grad_x")), 1e-5, 1e-9));
    auto params = dit.named_parameters();
    int checked = 0;
    for (const auto& [name, g] : c.at("grads").items()) {
      auto it = std::find_if(params.begin(), params.end(), [&](const auto& p) { return p.first == name; });
      ASSERT_NE(it, params.end()) << name;
      EXPECT_TRUE(all_close(it->second.grad(), golden_tensor(g), 1e-5, 1e-9)) << name;
      ++checked;
    }
    EXPECT_GT(checked, 0);
  }
}

// Finite differences in f64 through the whole model: the input and the
// AdaLN-Zero weights (given random values so that every branch is live).
TEST(DiT, Gradcheck) {
  Rngs rngs(2);
  nn::Init init(rngs);
  init.dtype = kF64;
  DiT dit({.image_size = 4, .in_channels = 1, .patch_size = 2, .hidden_size = 8, .depth = 1, .num_heads = 2,
           .mlp_ratio = 1.0, .num_classes = 2, .class_dropout = 0.1, .frequency_dim = 8},
          init);
  Generator g(3);
  {
    NoGradGuard ng;
    for (auto& [name, p] : dit.named_parameters())
      if (name.find("adaLN") != std::string::npos || name.find("final_layer.linear") != std::string::npos)
        copy_(p, mul(randn(p.shape(), g, {.dtype = kF64}), 0.3));
  }
  Tensor x = randn({2, 1, 4, 4}, g, {.dtype = kF64}).requires_grad_(true);
  Tensor t = tensor<double>({0.2, 0.7});
  Tensor y = tensor<int64_t>({1, 2});
  const Tensor& ada = dit.blocks->at<DiTBlock>(0)->adaLN_modulation->at<nn::Linear>(1)->weight;
  const Tensor& fin = dit.final_layer->linear->weight;
  auto fn = [&](const std::vector<Tensor>& in) { return dit.forward(in[0], t, y); };
  GradcheckResult r = gradcheck(fn, {x, ada, fin});
  EXPECT_TRUE(r.ok) << r.message;
}

// bf16 compute (f32 master weights): the velocity comes back in f32, close to
// the f32 model's, and gradients reach the f32 parameters.
TEST(DiT, Bf16Compute) {
  Rngs rngs(4);
  DiT dit(tiny(), rngs);
  Generator g(6);
  {
    NoGradGuard ng;
    for (auto& [name, p] : dit.named_parameters())
      if (name.find("adaLN") != std::string::npos || name.find("final_layer.linear") != std::string::npos)
        copy_(p, mul(randn(p.shape(), g), 0.1));
  }
  Tensor x = randn({3, 1, 8, 8}, g), t = rand({3}, g);
  Tensor y = tensor<int64_t>({0, 1, 3});
  Tensor ref = dit.forward(x, t, y);
  dit.set_compute_dtype(kBF16);
  Tensor v = dit.forward(x, t, y);
  EXPECT_EQ(v.dtype(), kF32);
  const double scale = amax(abs(ref), {0, 1, 2, 3}).item<float>();
  EXPECT_LT(amax(abs(sub(v, ref)), {0, 1, 2, 3}).item<float>(), 0.05 * scale);
  sum(mul(v, x)).backward();
  EXPECT_EQ(dit.final_layer->linear->weight.grad().dtype(), kF32);
  EXPECT_EQ(sample_dit(dit, y, {.steps = 2, .guidance = 2.0}).dtype(), kF32);
}

TEST(DiT, KeysAreDiTs) {
  Rngs rngs(0);
  DiT dit(tiny(), rngs);
  std::vector<std::string> k = testing::state_dict_keys(dit);
  auto has = [&](const std::string& s) { return std::find(k.begin(), k.end(), s) != k.end(); };
  for (const char* s : {"x_embedder.proj.weight", "t_embedder.mlp.0.weight", "t_embedder.mlp.2.bias",
                        "y_embedder.embedding_table.weight", "pos_embed", "blocks.0.attn.in_proj_weight",
                        "blocks.1.mlp.0.weight", "blocks.1.mlp.2.bias", "blocks.0.adaLN_modulation.1.weight",
                        "final_layer.linear.weight", "final_layer.adaLN_modulation.1.bias"})
    EXPECT_TRUE(has(s)) << s;
  EXPECT_EQ(dit.y_embedder->embedding_table->num_embeddings, 4);  // 3 classes + the null class
  // DiT's xavier_uniform on 2-D views: qkv [3D, D] as a whole, the patch conv as [D, C*p*p].
  auto max_abs = [](const Tensor& w) { return amax(abs(w.flatten()), {0}).item<float>(); };
  const double qkv_bound = std::sqrt(6.0 / (16 + 48)), patch_bound = std::sqrt(6.0 / (16 + 16));
  const Tensor& qkv = dit.blocks->at<DiTBlock>(0)->attn->in_proj_weight;
  EXPECT_LE(max_abs(qkv), qkv_bound);
  EXPECT_GT(max_abs(qkv), 0.95 * qkv_bound);
  EXPECT_LE(max_abs(dit.x_embedder->proj->weight), patch_bound);
  EXPECT_GT(max_abs(dit.x_embedder->proj->weight), 0.95 * patch_bound);
  // The fixed position embedding is state, not a parameter; the learned one is a parameter.
  for (const auto& [name, p] : dit.named_parameters()) EXPECT_NE(name, "pos_embed");
  DiTConfig lc = tiny();
  lc.learned_pos_embed = true;
  DiT learned(lc, rngs);
  bool found = false;
  for (const auto& [name, p] : learned.named_parameters()) found = found || name == "pos_embed";
  EXPECT_TRUE(found);
  DiT uncond(tiny(0, 0.0), rngs);
  EXPECT_FALSE(uncond.y_embedder);
}

TEST(DiT, ZeroAtInitialisationAndBlocksAreIdentity) {
  Rngs rngs(3);
  DiT dit(tiny(), rngs);
  Generator g(1);
  Tensor x = randn({4, 1, 8, 8}, g);
  Tensor t = rand({4}, g);
  Tensor y = tensor<int64_t>({0, 1, 2, 3});
  Tensor out = dit.forward(x, t, y);
  EXPECT_EQ(out.shape(), x.shape());
  EXPECT_EQ(amax(abs(out), {0, 1, 2, 3}).item<float>(), 0.0f);
  Tensor h = randn({4, 4, 16}, g), c = randn({4, 16}, g);
  for (size_t i = 0; i < dit.blocks->size(); ++i) {
    const auto& block = static_cast<const DiTBlock&>((*dit.blocks)[i]);
    EXPECT_TRUE(all_close(block.forward(h, c), h, 0, 0)) << "block " << i;
  }
  // The zero start still trains: gradients reach the final layer.
  sum(mul(dit.forward(x, t, y), x)).backward();
  EXPECT_GT(amax(abs(dit.final_layer->linear->weight.grad()), {0, 1}).item<float>(), 0.0f);
}

// The MoE variant: only blocks.i.mlp.* differ from the dense model's keys, the
// AdaLN-Zero start still gives exactly 0, and the experts get gradients.
TEST(DiT, MoEFeedForwardReplacesOnlyTheMlp) {
  Rngs rngs(3);
  DiTConfig c = tiny();
  DiT dense(c, rngs);
  c.moe_experts = 4;
  c.moe_top_k = 2;
  c.moe_balance = nn::MoEBalance::aux;
  DiT moe(c, rngs);
  ASSERT_EQ(moe.moe_layers().size(), 2u);
  EXPECT_EQ(moe.moe_layers()[0]->hidden, 16 * 4 / 2);  // F / k: the dense FFN's active FLOPs
  auto without_mlp = [](const nn::Module& m) {
    std::vector<std::string> keys;
    for (const std::string& k : testing::state_dict_keys(m))
      if (k.find(".mlp.") == std::string::npos || k.rfind("t_embedder", 0) == 0) keys.push_back(k);
    return keys;
  };
  EXPECT_EQ(without_mlp(moe), without_mlp(dense));
  std::vector<std::string> k = testing::state_dict_keys(moe);
  EXPECT_NE(std::find(k.begin(), k.end(), "blocks.1.mlp.router.weight"), k.end());

  Generator g(1);
  Tensor x = randn({4, 1, 8, 8}, g), t = rand({4}, g), y = tensor<int64_t>({0, 1, 2, 3});
  Tensor out = moe.forward(x, t, y);
  EXPECT_EQ(amax(abs(out), {0, 1, 2, 3}).item<float>(), 0.0f);
  // Past the zero start (a non-zero final layer and gates), the experts learn.
  for (const auto& [name, p] : moe.named_parameters())
    if (name.find("adaLN_modulation") != std::string::npos || name.rfind("final_layer", 0) == 0) {
      NoGradGuard ng;
      copy_(p.value(), mul(randn(p.value().shape(), g), 0.1));
    }
  Tensor v = moe.forward(x, t, y);
  Tensor aux = moe.aux_loss();
  EXPECT_GT(aux.item<double>(), 0.0);  // balance = aux: alpha E sum f P > 0
  add(sum(mul(v, x)), aux).backward();
  const nn::MoE& layer = *moe.moe_layers()[0];
  EXPECT_GT(amax(abs(layer.w1.grad()), {0, 1, 2}).item<float>(), 0.0f);
  EXPECT_GT(amax(abs(layer.router->weight.grad()), {0, 1}).item<float>(), 0.0f);
  // Dense: aux_loss is an untracked 0.
  EXPECT_EQ(dense.aux_loss().item<double>(), 0.0);
  EXPECT_FALSE(dense.aux_loss().requires_grad());
}

TEST(DiT, UnpatchifyInvertsPatchOrder) {
  Rngs rngs(0);
  DiTConfig cfg = tiny();
  cfg.in_channels = 2;
  DiT dit(cfg, rngs);
  // Token (i, j) holds the p x p x C patch of rows 4i.., columns 4j.., channel last.
  Tensor img = arange(0, 2 * 8 * 8, 1, {.dtype = kF32}).reshape({1, 2, 8, 8});
  Tensor tokens = permute(img.reshape({1, 2, 2, 4, 2, 4}), {0, 2, 4, 3, 5, 1}).reshape({1, 4, 32});
  EXPECT_TRUE(all_close(dit.unpatchify(tokens), img, 0, 0));
}

TEST(DiT, GuidanceAndLabelDropout) {
  Rngs rngs(5);
  DiT dit(tiny(), rngs);
  // Nonzero modulations, so the labels matter.
  {
    NoGradGuard ng;
    Generator g(2);
    for (auto& [name, p] : dit.named_parameters())
      if (name.find("adaLN") != std::string::npos || name.find("final_layer.linear") != std::string::npos)
        copy_(p, mul(randn(p.shape(), g), 0.1));
  }
  Generator g(7);
  Tensor x = randn({3, 1, 8, 8}, g), t = rand({3}, g);
  Tensor y = tensor<int64_t>({0, 2, 1}), null = tensor<int64_t>({3, 3, 3});
  NoGradGuard ng;
  Tensor vc = dit.forward(x, t, y), vu = dit.forward(x, t, null);
  EXPECT_FALSE(all_close(vc, vu, 0, 1e-6));
  EXPECT_TRUE(all_close(dit.guided(x, t, y, 1.0), vc, 0, 0));
  EXPECT_TRUE(all_close(dit.guided(x, t, y, 3.0), add(vu, mul(sub(vc, vu), 3.0)), 1e-5, 1e-6));

  // Training mode drops labels to the null class from "label_dropout"; eval does not.
  DiTConfig cfg = tiny(3, 0.5);
  DiT drop(cfg, rngs);
  Tensor many = zeros({2000}, {.dtype = kI64});
  Generator dg(4);
  Tensor dropped = drop.y_embedder->drop(many, dg);
  const double frac = mean(to(eq(dropped, 3), kF64)).item<double>();
  EXPECT_NEAR(frac, 0.5, 0.05);
  EXPECT_EQ(sum(to(eq(dropped, 0), kI64)).item<int64_t>() + sum(to(eq(dropped, 3), kI64)).item<int64_t>(), 2000);
  Rngs r1{{"label_dropout", 1}}, r2{{"label_dropout", 1}};
  drop.train();
  Generator same = r2.next("label_dropout");
  Tensor expect = drop.forward(x, t, drop.y_embedder->drop(y, same));
  EXPECT_TRUE(all_close(drop.forward(x, t, y, r1), expect, 0, 0));
  drop.eval();
  Rngs none{{"params", 0}};  // eval draws nothing
  EXPECT_TRUE(all_close(drop.forward(x, t, y, none), drop.forward(x, t, y), 0, 0));
}

TEST(DiT, SampleIsSeededAndStartsFromNoise) {
  Rngs rngs(0);
  DiT dit(tiny(), rngs);
  dit.train();
  Tensor labels = tensor<int64_t>({0, 1, 2, 0});
  Tensor a = sample_dit(dit, labels, {.steps = 3, .guidance = 2.0, .seed = 4});
  Tensor b = sample_dit(dit, labels, {.steps = 3, .solver = FlowSolver::heun, .guidance = 2.0, .seed = 4});
  EXPECT_TRUE(dit.is_training());  // the mode is restored
  // Untrained, the velocity is 0: the samples are the noise itself.
  Generator g(4);
  Tensor noise = randn({4, 1, 8, 8}, g);
  EXPECT_TRUE(all_close(a, noise, 0, 0));
  EXPECT_TRUE(all_close(b, noise, 0, 0));
  DiT uncond(tiny(0, 0.0), rngs);
  EXPECT_EQ(sample_dit(uncond, {}, {.steps = 2}, 5).shape(), (Shape{5, 1, 8, 8}));
}

TEST(DiT, Errors) {
  Rngs rngs(0);
  DiTConfig bad = tiny();
  bad.image_size = 10;
  EXPECT_KILN_ERROR(DiT(bad, rngs), "[DiT] image_size 10 is not divisible by patch_size 4");
  bad = tiny();
  bad.moe_experts = 4;
  bad.moe_top_k = 5;
  EXPECT_KILN_ERROR(DiT(bad, rngs), "[DiT] moe_top_k 5 must be in [1, moe_experts = 4]");
  bad = tiny();
  bad.hidden_size = 15;
  EXPECT_KILN_ERROR(DiT(bad, rngs), "hidden_size 15 must be a positive multiple of num_heads 2");
  bad.hidden_size = 18;
  EXPECT_KILN_ERROR(DiT(bad, rngs), "the fixed sincos position embedding needs hidden_size divisible by 4, got 18");
  bad.learned_pos_embed = true;
  EXPECT_EQ(DiT(bad, rngs).forward(zeros({1, 1, 8, 8}), zeros({1}), tensor<int64_t>({0})).shape(), (Shape{1, 1, 8, 8}));
  EXPECT_KILN_ERROR(DiT(tiny(0, 0.1), rngs), "class_dropout 0.1 needs a class-conditional model");

  DiT dit(tiny(), rngs);
  Tensor x = zeros({2, 1, 8, 8}), t = zeros({2});
  EXPECT_KILN_ERROR(dit.forward(x, t, tensor<int64_t>({0, 4})), "[DiT] class id 4 out of range [0, 3) (or 3, the null class)");
  EXPECT_KILN_ERROR(dit.forward(x, t, tensor<int64_t>({-1, 0})), "class id -1 out of range");
  EXPECT_KILN_ERROR(dit.forward(x, t), "[DiT] labels y undefined must be i64 [B = 2]");
  EXPECT_KILN_ERROR(dit.forward(zeros({2, 1, 12, 12}), t, tensor<int64_t>({0, 1})),
                    "[DiT] x [2, 1, 12, 12] must be [B, C = 1, H = 8, W = 8]");
  EXPECT_KILN_ERROR(dit.forward(x, zeros({3}), tensor<int64_t>({0, 1})), "[DiT] t [3] must be a floating [B = 2]");
  DiT no_null(tiny(3, 0.0), rngs);
  EXPECT_KILN_ERROR(no_null.forward(x, t, tensor<int64_t>({3, 0})), "class id 3 out of range [0, 3)");
  EXPECT_KILN_ERROR(no_null.guided(x, t, tensor<int64_t>({1, 0}), 2.0),
                    "[DiT] guidance 2 needs a class-conditional model trained with label dropout");
  DiT uncond(tiny(0, 0.0), rngs);
  EXPECT_KILN_ERROR(uncond.guided(x, t, {}, 4.0), "guidance 4 needs a class-conditional model");
  EXPECT_KILN_ERROR(uncond.forward(x, t, tensor<int64_t>({0, 1})), "[DiT] labels y [2] given to an unconditional model");
  EXPECT_KILN_ERROR(sample_dit(dit, {}, {}), "[DiT] sample_dit: a class-conditional model needs labels");
}

}  // namespace
}  // namespace kiln::models
