// The off-policy jobs of the command line: `kiln rl dqn cartpole` (DQN,
// kiln/rl/dqn.h) and `kiln rl sac pendulum` (SAC, kiln/rl/sac.h) with
// CleanRL's defaults, evaluating the deterministic policy every eval_every
// environment steps, logging each evaluation to CSV and checkpointing the
// whole run (networks, optimizers, replay buffer, generators) at each one;
// --resume continues from the newest checkpoint exactly (the run ends as an
// uninterrupted one does). The command line is a thin layer over
// run_offpolicy, which tests call.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <limits>
#include <string>
#include <vector>

namespace kiln::app {

struct OffPolicyJobOptions {
  std::string algo = "dqn";      // dqn (CartPole-v1) or sac (Pendulum-v1)
  std::string env = "";          // "": the algorithm's environment; else cartpole or pendulum, which must match it
  uint64_t seed = 1;             // parameters, exploration, replay sampling, resets
  int64_t total_steps = 0;       // environment steps; 0: 200k for DQN, 30k for SAC (the budgets)
  std::string out = "";          // metrics.csv and checkpoints/ go here; "": runs/<algo>-<env>
  std::string resume = "";       // "": a new run; "latest": the newest checkpoint in out; else a path
  bool overwrite = false;        // a new run may replace the run in out (moved aside until its first checkpoint)
  std::vector<std::string> overrides = {};  // hyper-parameters a resume may change ("seed", ...; "all": any)
  int threads = 1;               // 1 by default: batch-1 steps and 256-row updates of small MLPs
  int64_t eval_every = 0;        // environment steps between evaluations (0: 10k for DQN, 2k for SAC)
  int64_t eval_episodes = 10;    // deterministic episodes per evaluation
  int64_t max_steps = 0;         // stop at the first evaluation after this many steps in this process (0: run to the end)
  bool compile = false;          // gradient steps recorded once and replayed (docs/compile.md); same results
  std::ostream* log = nullptr;   // where output goes; nullptr: std::cout
};

struct OffPolicyJobResult {
  int64_t global_step = 0;
  double eval_return = std::numeric_limits<double>::quiet_NaN();  // the last evaluation's mean and std
  double eval_std = std::numeric_limits<double>::quiet_NaN();
  double target_return = 0;      // 475 (CartPole) or -200 (Pendulum)
  int64_t solved_step = -1;      // the first evaluation at or above target_return (-1: none)
  double seconds = 0;
  std::string checkpoint;        // the newest checkpoint
  std::string csv;               // one row per evaluation
  int signal = 0;                // the SIGINT or SIGTERM that stopped the run early; 0: none
};

/// Runs the job; kiln::Error on bad options, a folder holding another run
/// (without resume or overwrite) or a checkpoint that does not match.
/// SIGINT, SIGTERM and a stop over live control end it within a few hundred
/// steps with a checkpoint (result.signal says which signal).
OffPolicyJobResult run_offpolicy(const OffPolicyJobOptions& options);

}  // namespace kiln::app
