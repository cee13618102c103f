// What DQN and SAC share (internal): target-network updates, episode
// bookkeeping, the learn() loop over stats windows, the run's counters and
// generators in an io::State, and resume seeds.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <string>
#include <utility>
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

/// learn()'s loop: checks stats_every, calls `begin` (a fresh window), then
/// `step` until `done`, and after every `stats_every`-th vector step (and the
/// last) `report(seconds since the previous report)`, which closes the window
/// and returns false to stop.
void learn_windows(const char* op, int64_t stats_every, const std::function<void()>& begin,
                   const std::function<bool()>& done,
                   const std::function<int64_t()>& step, const std::function<bool(double)>& report);

/// A run's io::State: its vector step, updates and num_envs, and each named
/// generator's seed and offset.
io::State run_state(int64_t step, int64_t updates, int64_t num_envs,
                    std::initializer_list<std::pair<std::string, const Generator*>> generators);

struct RunCounters {
  int64_t step = 0, updates = 0;
};

/// Reads run_state's fields back, checking them against this run (`algo` with
/// num_envs environments and num_steps vector steps), and only then sets the
/// generators: a bad state changes nothing.
RunCounters load_run_state(const io::State& state, const char* op, const char* algo, int64_t num_envs,
                           int64_t num_steps, std::initializer_list<std::pair<std::string, Generator*>> generators);

}  // namespace kiln::rl::offpolicy
