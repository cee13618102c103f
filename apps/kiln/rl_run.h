// RlRun: what the reinforcement-learning jobs (kiln rl ppo|dqn|sac) share
// around their loops, which have no Trainer: the job's own figures in the
// checkpoint (when to evaluate next, the last evaluation, the clock, the
// CSV's length), metrics.csv started or cut back to the checkpoint's length
// on resume, checkpoints at evaluations, SIGINT/SIGTERM, and live control
// between updates (a train::Controllable: `kiln control RUN_DIR ...`).
//
//   JobRun run({...});
//   io::Checkpoint ckpt;  ppo.checkpoint(...) / dqn->checkpoint(ckpt);
//   RlRun loop(run, ckpt, "global_step,seconds,...", eval_every);
//   loop.hooks = {.before_save = [&] { algo.restart_episodes(); }, .evaluate = ..., .optimizers = {{"", &adam}}};
//   loop.start(config);                 // resume (load, cut the CSV) or a new run; opens control.sock
//   while (... && loop.poll(step)) { ...; if (evaluated) loop.save(step); }
//   loop.finish();
#pragma once

#include <cmath>
#include <cstdint>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "apps/kiln/job_run.h"
#include "kiln/io/checkpoint.h"
#include "kiln/io/checkpoint_manager.h"
#include "kiln/train/control.h"
#include "kiln/train/signal_guard.h"

namespace kiln::optim {
class Optimizer;
}

namespace kiln::app {

/// The job's figures that ride in every checkpoint ("job").
struct RlJobState : io::Stateful {
  int64_t next_eval = 0;   // global_step at or after which the next evaluation runs
  int64_t solved_step = -1;
  double eval_return = std::nan(""), eval_std = std::nan("");
  double seconds = 0;      // training and evaluation time before this process
  int64_t csv_bytes = 0;   // metrics.csv's length when the checkpoint was written

  io::State state() const override;
  void load_state(const io::State& state) override;
};

class RlRun : public train::Controllable {
 public:
  /// What the loop does on request.
  struct Hooks {
    std::function<void()> before_save;  // PPO, DQN, SAC: restart_episodes (NOTE [exact resume], rl.cpp)
    std::function<void()> evaluate;     // an evaluation now: sets logs()["val/return"] and ["val/return_std"]
    // set NAME=VALUE: an optimizer per name prefix ("" for DQN's, "policy_" and "q_" for SAC's).
    std::vector<std::pair<std::string, optim::Optimizer*>> optimizers;
  };

  /// `ckpt` holds the run's objects; the job's figures join it as "job".
  /// first_eval: the global step of the first evaluation of a new run.
  RlRun(JobRun& run, io::Checkpoint& ckpt, std::string csv_header, int64_t first_eval);
  ~RlRun() override;

  Hooks hooks;

  /// Resuming: loads the checkpoint (everything registered in ckpt) and cuts
  /// metrics.csv back to its length then; a new run: moves a previous run
  /// aside (--overwrite) and writes the CSV header. Then sets the config of
  /// the checkpoints to come and opens control.sock; live control begins.
  void start(const nlohmann::json& config);
  RlJobState& job() { return job_; }
  std::ofstream& csv() { return csv_; }
  /// The logs live control shows (status); the job fills them.
  std::map<std::string, double>& logs() { return logs_; }

  /// A safe point between two updates: publishes `global_step` and the logs,
  /// applies queued commands (blocking while paused). Whether the loop goes
  /// on: false after a stop command or SIGINT/SIGTERM.
  bool poll(int64_t global_step);
  /// Writes a checkpoint at `global_step` (before_save first; the CSV flushed
  /// and its length recorded). Returns its path.
  const std::string& save(int64_t global_step);
  const std::string& last_checkpoint() const { return last_checkpoint_; }
  /// Ends live control (completed) and returns the signal that stopped the
  /// run (0: none). The destructor ends it as failed if finish() was not called.
  int finish();

  // ---- train::Controllable ----
  train::RunState state() const override { return state_; }
  void set_state(train::RunState state) override { state_ = state; }
  io::Progress progress() const override { return {.epoch = 0, .global_step = step_, .step_in_epoch = step_}; }
  double elapsed() const override;
  const std::map<std::string, double>& logs() const override { return logs_; }
  void request_stop() override { stop_ = true; }
  bool stop_requested() const override { return stop_; }
  void pause_clock_begin() override;
  void pause_clock_end() override;
  bool save_now() override;
  bool evaluate_now() override;
  std::string set_option(const std::string& name, double value) override;

 private:
  JobRun& run_;
  io::Checkpoint& ckpt_;
  std::string csv_header_;
  RlJobState job_;
  std::ofstream csv_;
  std::unique_ptr<io::CheckpointManager> manager_;
  std::string last_checkpoint_;
  std::shared_ptr<train::Control> control_ = std::make_shared<train::Control>();
  train::SignalGuard signals_;  // SIGINT/SIGTERM: poll() returns false, the job saves and exits 130/143
  std::map<std::string, double> logs_;
  train::RunState state_ = train::RunState::idle;
  bool stop_ = false;
  bool finished_ = false;
  int64_t step_ = 0;
  double start_ = 0;          // steady-clock seconds when start() ran
  double paused_ = 0;         // seconds spent with the clock stopped
  double pause_began_ = 0;
  int pause_depth_ = 0;
};

}  // namespace kiln::app
