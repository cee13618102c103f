// What DQN and SAC share (internal): target-network updates, episode
// bookkeeping, generator state in an io::State and resume seeds.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kiln/core/generator.h"
#include "kiln/io/checkpoint.h"
#include "kiln/nn/module.h"
#include "kiln/rl/env.h"

namespace kiln::rl::offpolicy {

/// target <- tau * online + (1 - tau) * target for every parameter (CleanRL's
/// order of operations; tau = 1 copies). The modules must have the same
/// parameter names and shapes.
void soft_update(nn::Module& target, const nn::Module& online, double tau);

/// Adds one vector step's rewards to the running returns [E] and lengths [E];
/// the episodes that ended go into the sums and the count, and their
/// counters restart.
void track_episodes(const Transition& t, std::vector<double>& running_return, std::vector<int64_t>& running_length,
                    double& return_sum, double& length_sum, int64_t& episodes);

/// The environment's reset seed for a run resumed at `step` (0: the run's seed).
uint64_t env_seed(uint64_t seed, int64_t step);

void put_generator(io::State& state, const std::string& name, const Generator& gen);
GeneratorState get_generator(const io::State& state, const std::string& name, const char* op);

}  // namespace kiln::rl::offpolicy
