// `kiln rl dqn` and `kiln rl sac` (apps/kiln/rl_offpolicy.h).
#include "apps/kiln/rl_offpolicy.h"

#include <fmt/format.h>
#include <fmt/ostream.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <algorithm>
#include <functional>
#include <iostream>
#include <memory>

#include "apps/kiln/job_support.h"
#include "apps/kiln/run_folder.h"
#include "kiln/core/error.h"
#include "kiln/core/parallel.h"
#include "kiln/io/checkpoint.h"
#include "kiln/io/checkpoint_manager.h"
#include "kiln/rl/dqn.h"
#include "kiln/rl/evaluate.h"
#include "kiln/rl/make_env.h"
#include "kiln/rl/sac.h"
#include "kiln/train/signal_guard.h"

namespace kiln::app {

namespace {

using Clock = std::chrono::steady_clock;

// What each algorithm brings: its environment, budgets and target.
struct Recipe {
  std::string env_name;  // the CLI's short name
  std::string env_id;    // Gymnasium's
  int64_t total_steps, eval_every;
  double target;
};

// Steps between two looks at the signal flag: the largest divisor of
// eval_every up to 250, so evaluations still fall on multiples of eval_every.
int64_t poll_every(int64_t eval_every) {
  for (int64_t d = std::min<int64_t>(eval_every, 250); d > 1; --d)
    if (eval_every % d == 0) return d;
  return 1;
}

// What a window of steps reports: where it ended and the episodes that ended in it.
struct Window {
  int64_t global_step;
  int64_t episodes;
  double mean_return;  // NaN when no episode ended
};

Recipe recipe(const std::string& algo) {
  if (algo == "dqn") return {"cartpole", "CartPole-v1", 200'000, 10'000, 475};
  if (algo == "sac") return {"pendulum", "Pendulum-v1", 30'000, 2'000, -200};
  KILN_FAIL("kiln rl", "algorithm must be dqn or sac, got '{}'", algo);
}

}  // namespace

OffPolicyJobResult run_offpolicy(const OffPolicyJobOptions& o) {
  const Recipe rc = recipe(o.algo);
  const std::string op = "kiln rl " + o.algo;
  KILN_CHECK(o.env.empty() || o.env == rc.env_name, op, "environment must be {} (the one {} is tuned for), got '{}'",
             rc.env_name, o.algo, o.env);
  KILN_CHECK(o.total_steps >= 0, op, "--total-steps must be positive, got {}", o.total_steps);
  KILN_CHECK(o.eval_every >= 0, op, "--eval-every must be non-negative, got {}", o.eval_every);
  KILN_CHECK(o.eval_episodes > 0, op, "--eval-episodes must be positive, got {}", o.eval_episodes);
  KILN_CHECK(o.threads >= 0, op, "--threads must be non-negative, got {}", o.threads);
  const int64_t total = o.total_steps > 0 ? o.total_steps : rc.total_steps;
  const int64_t eval_every = std::min(o.eval_every > 0 ? o.eval_every : rc.eval_every, total);

  struct Threads {  // the thread count is process-wide: set for the job, restored after it
    int before = get_num_threads();
    ~Threads() { set_num_threads(before); }
  } threads_guard;
  if (o.threads > 0) set_num_threads(o.threads);
  std::ostream& log = o.log ? *o.log : std::cout;

  auto env = rl::make_vector_env(rc.env_id, 1);
  auto eval_env = rl::make_vector_env(rc.env_id, 1);
  const rl::EvaluationOptions eval_options{.episodes = o.eval_episodes, .seed = 10'000 + o.seed};
  io::Checkpoint ckpt;
  ckpt.config(fmt::format(R"({{"job":"{}","env":"{}","seed":{},"total_steps":{}}})", o.algo, rc.env_id, o.seed,
                          total));

  // One loop for both: learn(on_stats, every) and the deterministic policy.
  std::unique_ptr<rl::DQN> dqn;
  std::unique_ptr<rl::SAC> sac;
  std::function<void(const std::function<bool(const Window&)>&)> learn;
  const int64_t poll = poll_every(eval_every);
  rl::Policy policy;
  if (o.algo == "dqn") {
    dqn = std::make_unique<rl::DQN>(*env, rl::DQNOptions{.total_timesteps = total, .seed = o.seed});
    dqn->checkpoint(ckpt);
    policy = dqn->greedy_policy();
    learn = [&](const std::function<bool(const Window&)>& f) {
      dqn->learn([&](const rl::DQNStats& s) { return f({s.global_step, s.episodes, s.mean_return}); }, poll);
    };
  } else {
    sac = std::make_unique<rl::SAC>(*env, rl::SACOptions{.total_timesteps = total, .seed = o.seed});
    sac->checkpoint(ckpt);
    policy = sac->deterministic_policy();
    learn = [&](const std::function<bool(const Window&)>& f) {
      sac->learn([&](const rl::SACStats& s) { return f({s.global_step, s.episodes, s.mean_return}); }, poll);
    };
  }

  // Locked for the whole run; a folder holding another run is refused unless
  // --overwrite, which moves it aside until this run's first checkpoint.
  RunFolder folder(op, o.out.empty() ? "runs/" + o.algo + "-" + rc.env_name : o.out, {.overwrite = o.overwrite});
  const std::filesystem::path& out = folder.path();
  const std::string ckpt_dir = (out / "checkpoints").string();
  folder.start(log);
  OffPolicyJobResult r;
  r.target_return = rc.target;
  r.csv = (out / "metrics.csv").string();
  std::ofstream csv(r.csv, std::ios::trunc);
  KILN_CHECK(csv.good(), op, "cannot write {}", r.csv);
  csv << "global_step,seconds,train_return,eval_return,eval_std\n";
  io::CheckpointManager manager(ckpt_dir, {.keep_last = 2});

  fmt::print(log, "{} {}: {} steps · evaluation every {} steps on {} episode{} · seed {} · {}\n", o.algo, rc.env_id,
             total, eval_every, o.eval_episodes, o.eval_episodes == 1 ? "" : "s", o.seed, threads_and_cpu());
  const auto t0 = Clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(Clock::now() - t0).count(); };
  // The episodes that ended since the last evaluation (the windows are shorter).
  double return_sum = 0;
  int64_t episodes = 0, next_eval = eval_every;
  train::SignalGuard signals;  // SIGINT/SIGTERM: save within `poll` steps, exit 130/143
  learn([&](const Window& w) {
    if (w.episodes > 0) {
      return_sum += w.mean_return * double(w.episodes);
      episodes += w.episodes;
    }
    const bool stop = train::SignalGuard::received() != 0;
    if (w.global_step < next_eval && w.global_step < total && !stop) return true;
    while (next_eval <= w.global_step) next_eval += eval_every;
    const int64_t step = w.global_step;
    const double train_return = episodes > 0 ? return_sum / double(episodes) : std::nan("");
    return_sum = 0;
    episodes = 0;
    const rl::EvaluationResult e = rl::evaluate_policy(policy, *eval_env, eval_options);
    r.global_step = step;
    r.eval_return = e.mean_return;
    r.eval_std = e.std_return;
    const bool solved_now = r.solved_step < 0 && e.mean_return >= rc.target;
    if (solved_now) r.solved_step = step;
    fmt::print(log, "step {} · train return {} · eval {:.1f} ± {:.1f} · {:.1f} s{}\n", step,
               std::isnan(train_return) ? std::string("-") : fmt::format("{:.1f}", train_return), e.mean_return,
               e.std_return, elapsed(), solved_now ? fmt::format(" · solved (≥ {})", rc.target) : "");
    fmt::print(csv, "{},{},{},{},{}\n", step, elapsed(), std::isnan(train_return) ? "" : fmt::format("{}", train_return),
               e.mean_return, e.std_return);
    csv.flush();
    r.checkpoint = manager.save(ckpt, step);
    folder.first_checkpoint_written();
    return !stop;
  });
  r.seconds = elapsed();
  r.signal = train::SignalGuard::received();
  if (r.signal != 0)
    fmt::print(log, "stopped by {} at step {} (these jobs do not resume; the checkpoint {} holds the run)\n",
               train::SignalGuard::name(r.signal), r.global_step, r.checkpoint);
  fmt::print(log, "{} after {} steps in {:.1f} s: eval {:.1f} ± {:.1f}; {}\n", rc.env_id, r.global_step, r.seconds,
             r.eval_return, r.eval_std,
             r.solved_step >= 0 ? fmt::format("first reached {} at step {}", rc.target, r.solved_step)
                                : fmt::format("never reached {}", rc.target));
  fmt::print(log, "wrote {} and {}\n", r.csv, r.checkpoint);
  return r;
}

}  // namespace kiln::app
