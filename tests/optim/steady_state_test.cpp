// A steady-state training step reaches neither malloc through kiln's
// allocator nor oneDNN's primitive creation: the PPO update and batch-1
// actor-critic forward of bench/train_rl_bench.cpp and the MLP step of
// bench/train_mlp_bench.cpp (smaller), checked with memory_stats().
#include "tests/support/optim_testing.h"

namespace kiln {
namespace {

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

// malloc_count over `steps` calls of fn after `warmup` calls.
template <class F>
int64_t mallocs_in_steady_state(F&& fn, int warmup = 3, int steps = 5) {
  for (int i = 0; i < warmup; ++i) fn();
  int64_t before = memory_stats().malloc_count;
  for (int i = 0; i < steps; ++i) fn();
  return memory_stats().malloc_count - before;
}

TEST(SteadyState, PpoUpdateAndActorCriticForwardDoNotMalloc) {
  Rngs rngs(0);
  nn::Init init(rngs);
  ActorCritic net(init);
  optim::Adam opt(net.parameters(), {.lr = 3e-4});
  Generator gen(1);
  Tensor obs = randn({64, 4}, gen), actions = unsqueeze(randint(0, 2, {64}, gen), 1);
  Tensor old_logp = randn({64}, gen) * 0.1 - 0.7, adv = randn({64}, gen), returns = randn({64}, gen);
  Tensor first_loss, last_loss;
  auto step = [&] {
    auto [logits, value] = net.forward(obs);
    Tensor logp_all = log_softmax(logits, -1);
    Tensor logp = squeeze(gather(logp_all, 1, actions), 1);
    Tensor ratio = exp(logp - old_logp);
    Tensor surr = minimum(ratio * adv, clamp(ratio, 0.8, 1.2) * adv);
    Tensor entropy = mean(neg(sum(exp(logp_all) * logp_all, {-1})));
    Tensor loss = neg(mean(surr)) + 0.5 * mse_loss(value, returns) - 0.01 * entropy;
    loss.backward();
    opt.step();
    opt.zero_grad();
    if (!first_loss.defined()) first_loss = loss.detach();
    last_loss = loss.detach();
  };
  EXPECT_EQ(mallocs_in_steady_state(step), 0);
  EXPECT_LT(last_loss.item<double>(), first_loss.item<double>());  // it trains
  Tensor obs1 = randn({1, 4}, gen);
  EXPECT_EQ(mallocs_in_steady_state([&] {
              NoGradGuard g;
              auto out = net.forward(obs1);
            }),
            0);
}

TEST(SteadyState, MlpStepDoesNotMalloc) {
  Rngs rngs(0);
  nn::Init init(rngs);
  nn::Sequential net(nn::Linear(64, 32, init), nn::ReLU(), nn::Linear(32, 10, init));
  optim::Adam opt(net.parameters(), {.lr = 1e-3});
  Generator gen(1);
  Tensor x = randn({16, 64}, gen), y = randint(0, 10, {16}, gen);
  EXPECT_EQ(mallocs_in_steady_state([&] {
              Tensor loss = cross_entropy(net.forward(x), y);
              loss.backward();
              opt.step();
              opt.zero_grad();
            }),
            0);
}

}  // namespace
}  // namespace kiln
