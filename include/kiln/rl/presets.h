// PPO presets: the settings that solve kiln's native environments, CleanRL's
// ppo.py (CartPole) and ppo_continuous_action.py (Pendulum) with the changes
// docs/rl.md measures. A preset is plain data: copy it, change a field, pass
// its parts to make_vector_env, MlpActorCritic and PPO.
//
//   rl::PPOPreset p = rl::ppo_preset("cartpole");
//   auto env = rl::make_vector_env(p.env, p.num_envs);
//   rl::MlpActorCritic agent(env->spec(), rngs, p.agent);
//   rl::PPO ppo(*env, agent, p.ppo);
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kiln/rl/actor_critic.h"
#include "kiln/rl/ppo.h"

namespace kiln::rl {

struct PPOPreset {
  std::string name;           // the short name: "cartpole"
  std::string env;            // Gymnasium id for make_vector_env
  int64_t num_envs = 1;       // E, training copies
  PPOOptions ppo;             // total_timesteps is the preset's budget
  MlpActorCriticOptions agent;
  double target_return = 0;   // the mean deterministic evaluation return that counts as solved
};

/// "cartpole" (or "CartPole-v1") and "pendulum" ("Pendulum-v1"); anything
/// else is a kiln::Error listing the known names.
PPOPreset ppo_preset(const std::string& name);

/// The short names ppo_preset knows, in a fixed order.
std::vector<std::string> ppo_preset_names();

}  // namespace kiln::rl
