// PPO presets (kiln/rl/presets.h).
#include "kiln/rl/presets.h"

#include "kiln/core/error.h"

namespace kiln::rl {

namespace {

// CleanRL's ppo.py on CartPole-v1: 2.5e-4 annealed, 128 steps, 4 minibatches
// of 4 epochs, clip 0.2, entropy 0.01. Changes (docs/rl.md): 8 environments
// (the benchmark's setting, a rollout of 1024) and the schedule annealed over
// 200k steps, the target budget, instead of 500k.
PPOPreset cartpole() {
  PPOPreset p;
  p.name = "cartpole";
  p.env = "CartPole-v1";
  p.num_envs = 8;
  p.ppo = {.total_timesteps = 200'000, .learning_rate = 2.5e-4, .num_steps = 128, .num_minibatches = 4,
           .update_epochs = 4, .ent_coef = 0.01};
  p.target_return = 475;
  return p;
}

// CleanRL's ppo_continuous_action.py on Pendulum-v1: 3e-4 annealed, 2048
// steps, 32 minibatches of 10 epochs, no entropy bonus, observations and
// rewards normalised (NormalizeObservation / NormalizeReward, clipped at 10).
// Changes (docs/rl.md): 4 environments of 512 steps (the same 2048 rows).
PPOPreset pendulum() {
  PPOPreset p;
  p.name = "pendulum";
  p.env = "Pendulum-v1";
  p.num_envs = 4;
  p.ppo = {.total_timesteps = 1'000'000, .learning_rate = 3e-4, .num_steps = 512, .num_minibatches = 32,
           .update_epochs = 10, .ent_coef = 0.0, .norm_reward = true};
  p.agent = {.normalize_obs = true};
  p.target_return = -350;
  return p;
}

struct Entry {
  const char* short_name;
  const char* id;
  PPOPreset (*make)();
};

constexpr Entry kPresets[] = {{"cartpole", "CartPole-v1", cartpole}, {"pendulum", "Pendulum-v1", pendulum}};

}  // namespace

PPOPreset ppo_preset(const std::string& name) {
  for (const Entry& e : kPresets)
    if (name == e.short_name || name == e.id) return e.make();
  KILN_FAIL("ppo_preset", "no PPO preset for '{}'; known: cartpole, pendulum", name);
}

std::vector<std::string> ppo_preset_names() {
  std::vector<std::string> out;
  for (const Entry& e : kPresets) out.push_back(e.short_name);
  return out;
}

}  // namespace kiln::rl
