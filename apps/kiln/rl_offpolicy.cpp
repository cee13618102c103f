// `kiln rl dqn` and `kiln rl sac` (apps/kiln/rl_offpolicy.h).
#include "apps/kiln/rl_offpolicy.h"

#include <fmt/format.h>
#include <fmt/ostream.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <utility>
#include <vector>

#include "apps/kiln/job_run.h"
#include "apps/kiln/job_support.h"
#include "apps/kiln/rl_run.h"
#include "kiln/core/error.h"
#include "kiln/io/checkpoint.h"
#include "kiln/optim/optimizer.h"
#include "kiln/rl/dqn.h"
#include "kiln/rl/evaluate.h"
#include "kiln/rl/make_env.h"
#include "kiln/rl/sac.h"
#include "kiln/train/compiled_step.h"
#include "kiln/train/signal_guard.h"

namespace kiln::app {

namespace {

using nlohmann::json;

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
  KILN_CHECK(o.max_steps >= 0, op, "max_steps must be non-negative, got {}", o.max_steps);
  const int64_t total = o.total_steps > 0 ? o.total_steps : rc.total_steps;
  const int64_t eval_every = std::min(o.eval_every > 0 ? o.eval_every : rc.eval_every, total);

  auto env = rl::make_vector_env(rc.env_id, 1);
  auto eval_env = rl::make_vector_env(rc.env_id, 1);
  const rl::EvaluationOptions eval_options{.episodes = o.eval_episodes, .seed = 10'000 + o.seed};
  io::Checkpoint ckpt;

  // One loop for both: learn(on_stats, every), the deterministic policy, and
  // what a checkpoint, live control and the CSV need of each.
  std::unique_ptr<rl::DQN> dqn;
  std::unique_ptr<rl::SAC> sac;
  std::function<void(const std::function<bool(const Window&)>&)> learn;
  std::function<void()> restart_episodes;
  std::function<int64_t()> global_step;
  std::vector<std::pair<std::string, optim::Optimizer*>> optimizers;  // live control's set NAME=VALUE
  const int64_t poll = poll_every(eval_every);
  rl::Policy policy;
  if (o.algo == "dqn") {
    // A buffer larger than the run never fills: capped at the run's steps, it
    // samples and trains the same, and checkpoints only what it can hold.
    dqn = std::make_unique<rl::DQN>(
        *env, rl::DQNOptions{.total_timesteps = total,
                             .buffer_size = std::min(rl::DQNOptions{}.buffer_size, total),
                             .seed = o.seed,
                             .compile = o.compile});  // not a hyper-parameter: the same results, a run resumes either way
    dqn->checkpoint(ckpt);
    policy = dqn->greedy_policy();
    learn = [&](const std::function<bool(const Window&)>& f) {
      dqn->learn([&](const rl::DQNStats& s) { return f({s.global_step, s.episodes, s.mean_return}); }, poll);
    };
    restart_episodes = [&] { dqn->restart_episodes(); };
    global_step = [&] { return dqn->global_step(); };
    optimizers = {{"", &dqn->optimizer()}};
  } else {
    sac = std::make_unique<rl::SAC>(
        *env, rl::SACOptions{.total_timesteps = total,
                             .buffer_size = std::min(rl::SACOptions{}.buffer_size, total),
                             .seed = o.seed,
                             .compile = o.compile});
    sac->checkpoint(ckpt);
    policy = sac->deterministic_policy();
    learn = [&](const std::function<bool(const Window&)>& f) {
      sac->learn([&](const rl::SACStats& s) { return f({s.global_step, s.episodes, s.mean_return}); }, poll);
    };
    restart_episodes = [&] { sac->restart_episodes(); };
    global_step = [&] { return sac->global_step(); };
    optimizers = {{"policy_", &sac->actor_optimizer()}, {"q_", &sac->q_optimizer()}};
  }
  // The learning rates, one column each ("learning_rate" for DQN's; "policy_lr", "q_lr" for SAC's).
  std::string lr_columns;
  for (const auto& [prefix, opt] : optimizers) lr_columns += prefix.empty() ? ",learning_rate" : "," + prefix + "lr";

  // Locked for the whole run; a folder holding another run is refused unless
  // resuming it or --overwrite, which moves it aside until this run's first checkpoint.
  JobRun run(job_run_options(op, o.algo, o.out.empty() ? "runs/" + o.algo + "-" + rc.env_name : o.out, o));
  std::ostream& log = run.log();
  const json hyper = {{"seed", o.seed}, {"total_steps", total}};
  const json overrides = run.check_hyper_parameters(run.saved_config(), hyper);
  json config = hyper;
  config["job"] = o.algo;
  config["env"] = rc.env_id;
  config["eval_every"] = eval_every;
  config["eval_episodes"] = o.eval_episodes;
  if (!overrides.empty()) config["overrides"] = overrides;  // --override's record (apps/kiln/resume_check.h)

  RlRun loop(run, ckpt, "global_step,seconds,train_return,eval_return,eval_std" + lr_columns, eval_every);
  RlJobState& job = loop.job();
  auto evaluate = [&] {
    rl::EvaluationResult e = rl::evaluate_policy(policy, *eval_env, eval_options);
    loop.logs()["val/return"] = e.mean_return;
    loop.logs()["val/return_std"] = e.std_return;
    return e;
  };
  // NOTE [exact resume] (rl.cpp): every checkpoint starts fresh episodes, as
  // a resume from it does, so a resumed run continues as the uninterrupted one.
  loop.hooks = {.before_save = restart_episodes, .evaluate = [&] { evaluate(); }, .optimizers = optimizers};
  loop.start(config);
  for (const auto& [prefix, opt] : optimizers) loop.logs()[prefix + "lr"] = opt->get("lr");

  fmt::print(log, "{} {}: {} steps · evaluation every {} steps on {} episode{} · seed {} · {}\n", o.algo, rc.env_id,
             total, eval_every, o.eval_episodes, o.eval_episodes == 1 ? "" : "s", o.seed, threads_and_cpu());
  if (run.resuming()) fmt::print(log, "continuing at step {} of {}\n", global_step(), total);
  OffPolicyJobResult r;
  r.target_return = rc.target;
  r.csv = run.csv();
  r.global_step = global_step();
  r.eval_return = job.eval_return;
  r.eval_std = job.eval_std;
  r.solved_step = job.solved_step;
  // The episodes that ended since the last evaluation (the windows are shorter).
  double return_sum = 0;
  int64_t episodes = 0;
  const int64_t first_step = global_step();
  // A safe point every `poll` steps: live control, SIGINT/SIGTERM (save, exit 130/143).
  learn([&](const Window& w) {
    if (w.episodes > 0) {
      return_sum += w.mean_return * double(w.episodes);
      episodes += w.episodes;
    }
    const bool go_on = loop.poll(w.global_step);
    if (w.global_step < job.next_eval && w.global_step < total && go_on) return true;
    while (job.next_eval <= w.global_step) job.next_eval += eval_every;
    const int64_t step = w.global_step;
    const double train_return = episodes > 0 ? return_sum / double(episodes) : std::nan("");
    return_sum = 0;
    episodes = 0;
    const rl::EvaluationResult e = evaluate();
    r.global_step = step;
    r.eval_return = job.eval_return = e.mean_return;
    r.eval_std = job.eval_std = e.std_return;
    const bool solved_now = job.solved_step < 0 && e.mean_return >= rc.target;
    if (solved_now) job.solved_step = step;
    fmt::print(log, "step {} · train return {} · eval {:.1f} ± {:.1f} · {:.1f} s{}\n", step,
               std::isnan(train_return) ? std::string("-") : fmt::format("{:.1f}", train_return), e.mean_return,
               e.std_return, loop.elapsed(), solved_now ? fmt::format(" · solved (≥ {})", rc.target) : "");
    fmt::print(loop.csv(), "{},{},{},{},{}", step, loop.elapsed(),
               std::isnan(train_return) ? "" : fmt::format("{}", train_return), e.mean_return, e.std_return);
    for (const auto& [prefix, opt] : optimizers) fmt::print(loop.csv(), ",{}", opt->get("lr"));
    loop.csv() << '\n';
    r.checkpoint = loop.save(step);
    const bool enough = o.max_steps > 0 && step - first_step >= o.max_steps;
    return go_on && !enough;
  });
  r.solved_step = job.solved_step;
  r.seconds = loop.elapsed();
  if (r.checkpoint.empty() && run.resuming()) r.checkpoint = run.resume_path();
  r.signal = loop.finish();
  if (r.signal != 0)
    fmt::print(log, "stopped by {} at step {}: resume with --resume (from {})\n", train::SignalGuard::name(r.signal),
               r.global_step, r.checkpoint);
  fmt::print(log, "{} after {} steps in {:.1f} s: eval {:.1f} ± {:.1f}; {}\n", rc.env_id, r.global_step, r.seconds,
             r.eval_return, r.eval_std,
             r.solved_step >= 0 ? fmt::format("first reached {} at step {}", rc.target, r.solved_step)
                                : fmt::format("never reached {}", rc.target));
  // --compile: how each compiled step ran, and its evidence (a rejected one names the op and stage).
  auto print_compiled = [&](const char* what, const train::CompiledStep* c) {
    if (!c || c->recordings() == 0) return;
    fmt::print(log, "compiled {}: {} recording{}, {} replays, {} eager steps\n{}", what, c->recordings(),
               c->recordings() == 1 ? "" : "s", c->replays(), c->eager_calls(), c->evidence().str());
  };
  if (dqn) print_compiled("step", dqn->compiled_step());
  if (sac) {
    print_compiled("critic step", sac->compiled_critic_step());
    print_compiled("actor step", sac->compiled_actor_step());
  }
  fmt::print(log, "wrote {} and {}\n", r.csv, r.checkpoint);
  return r;
}

}  // namespace kiln::app
