// `kiln rl ppo`: a PPO preset trained, evaluated, logged and checkpointed (apps/kiln/rl.h).
#include "apps/kiln/rl.h"

#include <fmt/format.h>
#include <fmt/ostream.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "apps/kiln/job_run.h"
#include "apps/kiln/job_support.h"
#include "apps/kiln/rl_run.h"
#include "kiln/core/error.h"
#include "kiln/core/rngs.h"
#include "kiln/io/checkpoint.h"
#include "kiln/rl/evaluate.h"
#include "kiln/rl/make_env.h"
#include "kiln/rl/presets.h"
#include "kiln/train/signal_guard.h"

namespace kiln::app {

namespace {

constexpr const char* kOp = "kiln rl ppo";

constexpr const char* kCsvHeader =
    "iteration,global_step,seconds,learning_rate,episodes,mean_return,mean_length,policy_loss,value_loss,entropy,"
    "approx_kl,clipfrac,explained_variance,steps_per_second,eval_return,eval_std";

// A double for the CSV: shortest exact form, empty for NaN (no evaluation,
// no finished episode).
std::string cell(double x) { return std::isnan(x) ? "" : fmt::format("{}", x); }

using nlohmann::json;

// What a resume must agree with; the evaluation cadence may change.
json hyper_parameters(const PPOJobOptions& o, const rl::PPOPreset& p) {
  return {{"seed", o.seed}, {"total_steps", p.ppo.total_timesteps}, {"envs", p.num_envs}};
}

json config_json(const PPOJobOptions& o, const rl::PPOPreset& p, const json& overrides) {
  json j = hyper_parameters(o, p);
  j["job"] = "ppo";
  j["env"] = p.env;
  j["eval_every"] = o.eval_every;
  j["eval_episodes"] = o.eval_episodes;
  if (!overrides.empty()) j["overrides"] = overrides;  // --override's record (apps/kiln/resume_check.h)
  return j;
}

void check_options(const PPOJobOptions& o) {
  KILN_CHECK(o.total_steps >= 0, kOp, "--total-steps must be positive, got {}", o.total_steps);
  KILN_CHECK(o.envs >= 0, kOp, "--envs must be positive, got {}", o.envs);
  KILN_CHECK(o.threads >= 0, kOp, "--threads must be non-negative, got {}", o.threads);
  KILN_CHECK(o.eval_every >= 0, kOp, "--eval-every must be non-negative, got {}", o.eval_every);
  KILN_CHECK(o.eval_episodes > 0, kOp, "--eval-episodes must be positive, got {}", o.eval_episodes);
  KILN_CHECK(o.max_iterations >= 0, kOp, "max_iterations must be non-negative, got {}", o.max_iterations);
}

}  // namespace

PPOJobResult run_ppo(const PPOJobOptions& o) {
  check_options(o);
  rl::PPOPreset p = rl::ppo_preset(o.env);
  if (o.total_steps > 0) p.ppo.total_timesteps = o.total_steps;
  if (o.envs > 0) p.num_envs = o.envs;
  p.ppo.seed = o.seed;
  p.ppo.compile = o.compile;  // not a hyper-parameter: the same results, so a run resumes either way
  auto env = rl::make_vector_env(p.env, p.num_envs);
  auto eval_env = rl::make_vector_env(p.env, o.eval_episodes);  // one episode per copy
  Rngs rngs{{"params", o.seed}};
  rl::MlpActorCritic agent(env->spec(), nn::Init(rngs), p.agent);
  rl::PPO ppo(*env, agent, p.ppo);  // checks the PPO options (minibatches dividing the rollout, ...)
  const int64_t rollout = p.ppo.num_steps * p.num_envs;
  // Evaluation episodes are the same at every evaluation of a run: a fixed
  // reset seed apart from the training seeds.
  const rl::EvaluationOptions eval_options{.episodes = o.eval_episodes, .seed = 1'000'000 + o.seed};

  // Locked for the whole run; refuses a folder holding another run unless
  // resuming or overwriting it.
  JobRun run(job_run_options(kOp, "ppo", o.out.empty() ? "runs/ppo-" + p.name : o.out, o));
  std::ostream& log = run.log();
  if (run.resuming()) {
    const std::string saved_env = run.saved_config().value("env", "");
    KILN_CHECK(saved_env == p.env, kOp, "--resume: {} is a run of {}, not {}", run.resume_path(),
               saved_env.empty() ? "no known environment" : saved_env, p.env);
  }
  const json overrides = run.check_hyper_parameters(run.saved_config(), hyper_parameters(o, p));


  io::Checkpoint ckpt;
  ckpt.model(agent).optimizer(ppo.optimizer()).state("ppo", ppo);
  const int64_t eval_every = o.eval_every > 0 ? o.eval_every : p.ppo.total_timesteps;
  RlRun loop(run, ckpt, kCsvHeader, eval_every);
  RlJobState& job = loop.job();
  // NOTE [exact resume]: the environments' state is not checkpointed, so
  // every checkpoint starts fresh episodes (PPO::restart_episodes) before it
  // is written, in an uninterrupted run as in a resumed one: resuming from it
  // continues exactly. Checkpoints fall at evaluations and at the end; a run
  // stopped by max_iterations also saves where it stops, and resuming there
  // gives another (equally valid) run than an uninterrupted one, as does a
  // checkpoint asked for over live control.
  auto evaluate = [&] {
    rl::EvaluationResult e = rl::evaluate_policy(agent, *eval_env, eval_options);
    loop.logs()["val/return"] = e.mean_return;
    loop.logs()["val/return_std"] = e.std_return;
    return e;
  };
  loop.hooks = {.before_save = [&] { ppo.restart_episodes(); },
                .evaluate = [&] { evaluate(); },
                .optimizers = {{"", &ppo.optimizer()}}};
  loop.start(config_json(o, p, overrides));

  fmt::print(log, "ppo {}: {} parameters · {} envs x {} steps · {} iterations of {} steps · seed {} · {}\n",
             p.env, agent.num_parameters(), p.num_envs, p.ppo.num_steps, ppo.num_iterations(), rollout, o.seed,
             threads_and_cpu());

  PPOJobResult r;
  r.target_return = p.target_return;
  r.csv = run.csv();
  int64_t this_process = 0;
  bool go_on = true;  // false after SIGINT/SIGTERM (exit 130/143) or a stop over live control: save and end
  while (go_on && !ppo.done() && (o.max_iterations == 0 || this_process < o.max_iterations)) {
    rl::PPOStats s = ppo.iterate();
    ++this_process;
    // A diverged update is not checkpointed: the run stops at it.
    KILN_CHECK(std::isfinite(s.policy_loss) && std::isfinite(s.value_loss), kOp,
               "non-finite loss at iteration {} (policy {}, value {}): training stopped there, and no checkpoint of "
               "it was written; the last good checkpoint is {}",
               s.iteration, s.policy_loss, s.value_loss,
               loop.last_checkpoint().empty() ? "none (the run had not saved one)" : loop.last_checkpoint());
    loop.logs()["lr"] = s.learning_rate;
    loop.logs()["policy_loss"] = s.policy_loss;
    loop.logs()["value_loss"] = s.value_loss;
    const double sps = double(rollout) / (s.collect_seconds + s.update_seconds);
    double eval_return = std::nan(""), eval_std = std::nan("");
    const bool evaluated = s.global_step >= job.next_eval || ppo.done();
    if (evaluated) {
      rl::EvaluationResult e = evaluate();
      eval_return = job.eval_return = e.mean_return;
      eval_std = job.eval_std = e.std_return;
      if (job.solved_step < 0 && e.mean_return >= p.target_return) job.solved_step = s.global_step;
      while (job.next_eval <= s.global_step) job.next_eval += eval_every;
    }
    fmt::print(log, "iter {}/{} · step {} · return {} ({} episode{}) · pg {:.4f} · v {:.4f} · ent {:.3f} · kl {:.2g} · "
               "{:.0f} steps/s\n",
               s.iteration, ppo.num_iterations(), s.global_step,
               std::isnan(s.mean_return) ? std::string("-") : fmt::format("{:.1f}", s.mean_return), s.episodes,
               s.episodes == 1 ? "" : "s", s.policy_loss, s.value_loss, s.entropy, s.approx_kl, sps);
    if (evaluated)
      fmt::print(log, "eval step {}: {:.1f} ± {:.1f} over {} episodes{}\n", s.global_step, eval_return, eval_std,
                 o.eval_episodes,
                 job.solved_step == s.global_step ? fmt::format(" · solved (≥ {})", p.target_return) : "");
    fmt::print(loop.csv(), "{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}\n", s.iteration, s.global_step, loop.elapsed(),
               s.learning_rate, s.episodes, cell(s.mean_return), cell(s.mean_length), s.policy_loss, s.value_loss,
               s.entropy, s.approx_kl, s.clipfrac, cell(s.explained_variance), sps, cell(eval_return), cell(eval_std));
    go_on = loop.poll(ppo.global_step());  // live control's safe point, between two iterations
    if (evaluated || ppo.done() || this_process == o.max_iterations || !go_on)
      r.checkpoint = loop.save(ppo.global_step());
  }
  log.flush();
  r.iterations = ppo.iteration();
  r.global_step = ppo.global_step();
  r.eval_return = job.eval_return;
  r.eval_std = job.eval_std;
  r.solved_step = job.solved_step;
  r.seconds = loop.elapsed();
  if (r.checkpoint.empty() && run.resuming()) r.checkpoint = run.resume_path();
  r.signal = loop.finish();
  if (r.signal != 0)
    fmt::print(log, "stopped by {} at iteration {}: resume with --resume (from {})\n",
               train::SignalGuard::name(r.signal), r.iterations, r.checkpoint);
  if (ppo.done())
    fmt::print(log, "{} after {} steps in {:.1f} s: eval {:.1f} ± {:.1f}; {}\n", p.env, r.global_step, r.seconds,
               r.eval_return, r.eval_std,
               r.solved_step >= 0 ? fmt::format("first reached {} at step {}", p.target_return, r.solved_step)
                                  : fmt::format("never reached {}", p.target_return));
  fmt::print(log, "wrote {} and {}\n", r.csv, r.checkpoint);
  return r;
}

}  // namespace kiln::app
