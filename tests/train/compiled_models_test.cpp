// CompiledStep on the other workloads, at test sizes: a CNN with
// BatchNorm (train steps, then eval steps on the running statistics) and a
// PPO update (the clipped surrogate, value MSE and entropy of an actor-critic
// MLP with gradient clipping and Adam, as bench/train_rl_bench.cpp's
// ppo_update_b64). 100 recorded-then-replayed steps give eager's bits.
#include <gtest/gtest.h>

#include <cstring>

#include "kiln/core/parallel.h"
#include "kiln/nn/activation.h"
#include "kiln/nn/containers.h"
#include "kiln/nn/conv.h"
#include "kiln/nn/linear.h"
#include "kiln/nn/norm.h"
#include "kiln/nn/pool.h"
#include "kiln/optim/adam.h"
#include "kiln/optim/clip.h"
#include "kiln/optim/sgd.h"
#include "kiln/train/compiled_step.h"
#include "tests/support/train_testing.h"

namespace kiln::train {
namespace {

uint32_t bits(float v) {
  uint32_t u;
  std::memcpy(&u, &v, 4);
  return u;
}

void expect_same_state(nn::Module& a, nn::Module& b) {
  auto sa = a.state_dict(), sb = b.state_dict();
  ASSERT_EQ(sa.keys(), sb.keys());
  for (const std::string& k : sa.keys()) {
    const Tensor &x = sa.at(k), &y = sb.at(k);
    if (x.dtype() == kI64) {
      EXPECT_EQ(x.to_vector<int64_t>(), y.to_vector<int64_t>()) << k;
      continue;
    }
    std::vector<float> vx = x.to_vector<float>(), vy = y.to_vector<float>();
    ASSERT_EQ(vx.size(), vy.size()) << k;
    for (size_t j = 0; j < vx.size(); ++j) ASSERT_EQ(bits(vx[j]), bits(vy[j])) << k << "[" << j << "]";
  }
}

struct Cnn {
  Cnn()
      : rngs(4),
        // The second block is cnn_b64's Conv-ReLU-MaxPool: its convolution
        // and ReLU are fused into one launch (the first conv feeds BatchNorm).
        net(nn::Conv2d(1, 16, 3, rngs, {.padding = 1}), nn::BatchNorm2d(16), nn::ReLU(), nn::MaxPool2d(2),
            nn::Conv2d(16, 16, 3, rngs, {.padding = 1}), nn::ReLU(), nn::MaxPool2d(2), nn::Flatten(),
            nn::Linear(16 * 2 * 2, 5, rngs)),
        opt(net.parameters(), {.lr = 0.05, .momentum = 0.9}) {}
  std::vector<Tensor> train_step(const std::vector<Tensor>& in) {
    Tensor loss = cross_entropy(net.forward(in[0]), in[1]);
    loss.backward();
    opt.step();
    opt.zero_grad();
    return {loss};
  }
  std::vector<Tensor> eval_step(const std::vector<Tensor>& in) {
    NoGradGuard no_grad;
    Tensor logits = net.forward(in[0]);
    return {cross_entropy(logits, in[1]), argmax(logits, -1)};
  }
  Rngs rngs;
  nn::Sequential net;
  optim::SGD opt;
};

std::vector<Tensor> images(int64_t i) {
  Generator gen(500 + uint64_t(i));
  return {randn({6, 1, 8, 8}, gen), randint(0, 5, {6}, gen)};
}

TEST(CompiledStepModels, CnnWithBatchNormTrainThenEvalIsBitwiseEager) {
  set_num_threads(1);  // oneDNN's convolution weight gradient splits by thread
  Cnn eager, compiled;
  CompiledStep train([&](const std::vector<Tensor>& in) { return compiled.train_step(in); },
                     {.modules = {&compiled.net}});
  CompiledStep eval([&](const std::vector<Tensor>& in) { return compiled.eval_step(in); },
                    {.modules = {&compiled.net}});
  for (int64_t i = 0; i < 100; ++i) {
    float le = eager.train_step(images(i))[0].item<float>();
    float lc = train(images(i))[0].item<float>();
    ASSERT_EQ(bits(le), bits(lc)) << "step " << i << "\n" << train.evidence().str();
  }
  EXPECT_EQ(train.replays(), 99) << train.evidence().str();
  const PassReport* fusion = train.evidence().find("Fusion");
  ASSERT_NE(fusion, nullptr);
  EXPECT_NE(fusion->detail.find("1 convolution + activation pairs fused into one launch each (conv2d+relu x1)"),
            std::string::npos)
      << fusion->detail;
  expect_same_state(eager.net, compiled.net);  // running statistics and num_batches_tracked included
  eager.net.eval();
  compiled.net.eval();
  for (int64_t i = 0; i < 10; ++i) {
    auto oe = eager.eval_step(images(1000 + i));
    auto oc = eval(images(1000 + i));
    ASSERT_EQ(bits(oe[0].item<float>()), bits(oc[0].item<float>())) << "eval " << i;
    EXPECT_EQ(oe[1].to_vector<int64_t>(), oc[1].to_vector<int64_t>());
  }
  EXPECT_EQ(eval.replays(), 9) << eval.evidence().str();
  // No backward in eval: the pair is fused there too (nothing saves the pre-activation).
  EXPECT_NE(eval.evidence().find("Fusion")->detail.find("(conv2d+relu x1)"), std::string::npos)
      << eval.evidence().str();
  expect_same_state(eager.net, compiled.net);  // eval changed nothing
  use_default_threads();
}

// bench/train_rl_bench.cpp's actor-critic: trunk 4-64-64 tanh, policy head 2, value head 1.
struct ActorCritic : nn::Module {
  explicit ActorCritic(const nn::Init& init)
      : l1(register_module("l1", nn::Linear(4, 64, init))),
        l2(register_module("l2", nn::Linear(64, 64, init))),
        pi(register_module("pi", nn::Linear(64, 2, init))),
        v(register_module("v", nn::Linear(64, 1, init))) {}
  std::pair<Tensor, Tensor> forward(const Tensor& obs) const {
    Tensor h = tanh(l2(tanh(l1(obs))));
    return {pi(h), squeeze(v(h), -1)};
  }
  nn::Shared<nn::Linear> l1, l2, pi, v;
};

struct Ppo {
  Ppo() : rngs(0), net(nn::Init(rngs)), opt(net.parameters(), {.lr = 3e-4}) {}
  // in: obs [B, 4], actions [B, 1] i64, old log-probs [B], advantages [B], returns [B].
  std::vector<Tensor> step(const std::vector<Tensor>& in) {
    auto [logits, value] = net.forward(in[0]);
    Tensor logp_all = log_softmax(logits, -1);
    Tensor logp = squeeze(gather(logp_all, 1, in[1]), 1);
    Tensor ratio = exp(logp - in[2]);
    Tensor adv = (in[3] - mean(in[3])) / (kiln::std(in[3]) + 1e-8);
    Tensor surr = minimum(ratio * adv, clamp(ratio, 0.8, 1.2) * adv);
    Tensor entropy = mean(neg(sum(exp(logp_all) * logp_all, {-1})));
    Tensor loss = neg(mean(surr)) + 0.5 * mse_loss(value, in[4]) - 0.01 * entropy;
    loss.backward();
    optim::clip_grad_norm_(opt.params(), 0.5);
    opt.step();
    opt.zero_grad();
    return {loss, entropy};
  }
  Rngs rngs;
  ActorCritic net;
  optim::Adam opt;
};

std::vector<Tensor> rollout(int64_t i) {
  Generator gen(900 + uint64_t(i));
  return {randn({64, 4}, gen), unsqueeze(randint(0, 2, {64}, gen), 1), randn({64}, gen) * 0.1 - 0.7,
          randn({64}, gen), randn({64}, gen)};
}

TEST(CompiledStepModels, PpoUpdateIsBitwiseEagerOver100Steps) {
  Ppo eager, compiled;
  CompiledStep step([&](const std::vector<Tensor>& in) { return compiled.step(in); }, {.modules = {&compiled.net}});
  for (int64_t i = 0; i < 100; ++i) {
    auto oe = eager.step(rollout(i));
    auto oc = step(rollout(i));
    ASSERT_EQ(bits(oe[0].item<float>()), bits(oc[0].item<float>())) << "step " << i << "\n" << step.evidence().str();
    ASSERT_EQ(bits(oe[1].item<float>()), bits(oc[1].item<float>())) << "step " << i;
  }
  EXPECT_EQ(step.replays(), 99) << step.evidence().str();
  expect_same_state(eager.net, compiled.net);
  EXPECT_EQ(compiled.opt.step_count(), 100);
}

}  // namespace
}  // namespace kiln::train
