// Native environments by name, for the command line and configs:
//
//   std::unique_ptr<rl::VectorEnv> env = rl::make_vector_env("CartPole-v1", 8);
//   rl::make_vector_env("pendulum", 4);   // short names work too
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kiln/rl/env.h"

namespace kiln::rl {

/// E = num_envs copies of the environment with Gymnasium id `name`
/// ("CartPole-v1", "Pendulum-v1") or its short name ("cartpole",
/// "pendulum"). An unknown name is a kiln::Error listing the known ones.
std::unique_ptr<VectorEnv> make_vector_env(const std::string& name, int64_t num_envs);

/// The Gymnasium ids make_vector_env knows, in a fixed order.
std::vector<std::string> vector_env_names();

}  // namespace kiln::rl
