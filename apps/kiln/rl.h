// The reinforcement-learning jobs of the command line: `kiln rl ppo
// cartpole|pendulum` trains a PPO preset (kiln/rl/presets.h), evaluates the
// deterministic policy every eval_every environment steps, logs every
// iteration to CSV, checkpoints at every evaluation and resumes exactly. The
// command line is a thin layer over run_ppo, which tests call directly.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <limits>
#include <string>
#include <vector>

namespace kiln::app {

struct PPOJobOptions {
  std::string env = "cartpole";  // a PPO preset: cartpole or pendulum
  uint64_t seed = 1;             // parameters, actions, minibatch order, resets
  int64_t total_steps = 0;       // environment steps of the run (the LR schedule's length); 0: the preset's
  int64_t envs = 0;              // training environments; 0: the preset's
  std::string out = "";          // metrics.csv and checkpoints/ go here; "": runs/ppo-<env>
  std::string resume = "";       // "": a new run; "latest": the newest checkpoint in out; else a path
  bool overwrite = false;        // a new run may replace the run in out (moved aside until its first checkpoint)
  std::vector<std::string> overrides = {};  // hyper-parameters a resume may change ("seed", ...; "all": any)
  int threads = 1;               // 1 by default: batch-8 forwards are faster on one core than split
  int64_t eval_every = 10'000;   // environment steps between evaluations and checkpoints (0: only at the end)
  int64_t eval_episodes = 10;    // episodes per evaluation (on as many environments)
  int64_t max_iterations = 0;    // stop after this many iterations in this process (0: run to the end)
  bool compile = false;          // minibatch updates recorded once and replayed (docs/compile.md); same results
  std::ostream* log = nullptr;   // where output goes; nullptr: std::cout
};

struct PPOJobResult {
  int64_t iterations = 0;        // PPO iterations completed (resumed runs count the earlier ones)
  int64_t global_step = 0;       // environment steps so far
  double eval_return = std::numeric_limits<double>::quiet_NaN();  // the last evaluation's mean and std
  double eval_std = std::numeric_limits<double>::quiet_NaN();
  double target_return = 0;      // the preset's
  int64_t solved_step = -1;      // global_step of the first evaluation with mean >= target_return (-1: none)
  double seconds = 0;            // training and evaluation time over the whole run, resumes included
  std::string checkpoint;        // the newest checkpoint
  std::string csv;               // the per-iteration log
  int signal = 0;                // the SIGINT or SIGTERM that stopped the run early; 0: none
};

/// Runs the job; kiln::Error on bad options, a folder holding another run
/// (without resume or overwrite), a checkpoint that does not match, or a
/// non-finite loss. SIGINT and SIGTERM end it after the current iteration with
/// a checkpoint (result.signal says which).
PPOJobResult run_ppo(const PPOJobOptions& options);

}  // namespace kiln::app
