// Tiny vector environments for the tests of the on-policy code, with known
// optimal behaviour and episode structure: a one-step bandit (Discrete), a
// one-step continuous bandit (Box), and a chain that ends by termination at
// its far end or by truncation at a horizon. Each follows the VectorEnv
// contract: same-step automatic reset, final_obs, errors for bad actions.
#pragma once

#include <vector>

#include "tests/support/rl_testing.h"
#include "kiln/rl/env.h"

namespace kiln::rl::toy {

/// Every step ends the episode (terminated); reward 1 for action `best`, else 0.
/// Observations [E, 2] are the constant [1, 0.5].
class BanditEnv : public VectorEnv {
 public:
  BanditEnv(int64_t num_envs, int64_t num_actions = 3, int64_t best = 2) : e_(num_envs), best_(best) {
    spec_ = {.name = "Bandit",
             .observation = Space::box({2}, {-1, -1}, {1, 1}),
             .action = Space::discrete(num_actions),
             .max_episode_steps = 1,
             .reward_threshold = 1};
  }
  const EnvSpec& spec() const override { return spec_; }
  int64_t num_envs() const override { return e_; }
  Tensor reset(uint64_t) override { return obs(); }
  Transition step(const Tensor& actions) override {
    KILN_CHECK(spec_.action.batch_matches(actions) && actions.size(0) == e_, "BanditEnv.step", "bad actions {}",
               describe(actions));
    Tensor o = obs();
    return {o, eq(actions, best_).to(kF32), ones({e_}, {.dtype = kBool}), zeros({e_}, {.dtype = kBool}), o.clone()};
  }

 private:
  Tensor obs() const { return tensor<float>({1.0f, 0.5f}, {1, 2}).expand({e_, 2}).contiguous(); }
  int64_t e_, best_;
  EnvSpec spec_;
};

/// One step per episode; reward -(a - target)^2 for a in [-2, 2]; obs [E, 1] = 1.
class ContinuousBanditEnv : public VectorEnv {
 public:
  ContinuousBanditEnv(int64_t num_envs, double target) : e_(num_envs), target_(target) {
    spec_ = {.name = "ContinuousBandit",
             .observation = Space::box({1}, {-1}, {1}),
             .action = Space::box({1}, {-2}, {2}),
             .max_episode_steps = 1};
  }
  const EnvSpec& spec() const override { return spec_; }
  int64_t num_envs() const override { return e_; }
  Tensor reset(uint64_t) override { return ones({e_, 1}); }
  Transition step(const Tensor& actions) override {
    KILN_CHECK(spec_.action.batch_matches(actions) && actions.size(0) == e_, "ContinuousBanditEnv.step",
               "bad actions {}", describe(actions));
    KILN_CHECK(all(ge(actions, -2.0) && le(actions, 2.0)).item<bool>(), "ContinuousBanditEnv.step",
               "actions outside [-2, 2]");
    Tensor r = neg(square(actions.squeeze(1) - target_));
    return {ones({e_, 1}), r, ones({e_}, {.dtype = kBool}), zeros({e_}, {.dtype = kBool}), ones({e_, 1})};
  }

 private:
  int64_t e_;
  double target_;
  EnvSpec spec_;
};

/// Position p in [0, L): action 1 moves right, 0 stays. Reaching L - 1 gives
/// reward 1 and terminates; otherwise the episode is truncated after H steps.
/// Reward 0 elsewhere. Observation [p / L, steps / H]. Copy i starts at
/// position (seed + i) % (L - 1) after reset(seed) (and 0 after each episode).
class ChainEnv : public VectorEnv {
 public:
  ChainEnv(int64_t num_envs, int64_t length, int64_t horizon)
      : e_(num_envs), l_(length), h_(horizon), pos_(size_t(num_envs), 0), steps_(size_t(num_envs), 0) {
    spec_ = {.name = "Chain",
             .observation = Space::box({2}, {0, 0}, {1, 1}),
             .action = Space::discrete(2),
             .max_episode_steps = horizon,
             .reward_threshold = 1};
  }
  const EnvSpec& spec() const override { return spec_; }
  int64_t num_envs() const override { return e_; }
  Tensor reset(uint64_t seed) override {
    for (int64_t i = 0; i < e_; ++i) pos_[i] = int64_t((seed + uint64_t(i)) % uint64_t(l_ - 1)), steps_[i] = 0;
    reset_ = true;
    return obs();
  }
  Transition step(const Tensor& actions) override {
    KILN_CHECK(reset_, "ChainEnv.step", "step before reset");
    KILN_CHECK(spec_.action.batch_matches(actions) && actions.size(0) == e_, "ChainEnv.step", "bad actions {}",
               describe(actions));
    std::vector<int64_t> a = actions.to_vector<int64_t>();
    std::vector<float> r(size_t(e_), 0.0f);
    std::vector<bool> term(static_cast<size_t>(e_)), trunc(static_cast<size_t>(e_));
    for (int64_t i = 0; i < e_; ++i) {
      pos_[i] += a[i] == 1 ? 1 : 0;
      steps_[i] += 1;
      term[i] = pos_[i] == l_ - 1;
      trunc[i] = !term[i] && steps_[i] == h_;
      if (term[i]) r[i] = 1.0f;
    }
    Tensor final_obs = obs();
    for (int64_t i = 0; i < e_; ++i)
      if (term[i] || trunc[i]) pos_[i] = 0, steps_[i] = 0;
    return {obs(), tensor(r), tensor(term), tensor(trunc), final_obs};
  }

 private:
  Tensor obs() const {
    std::vector<float> o;
    for (int64_t i = 0; i < e_; ++i) o.push_back(float(pos_[i]) / float(l_)), o.push_back(float(steps_[i]) / float(h_));
    return tensor(o, {e_, 2});
  }
  int64_t e_, l_, h_;
  std::vector<int64_t> pos_, steps_;
  bool reset_ = false;
  EnvSpec spec_;
};

}  // namespace kiln::rl::toy
