// `kiln rl ppo`: a PPO preset trained, evaluated, logged and checkpointed (apps/kiln/rl.h).
#include "apps/kiln/rl.h"

#include <fmt/format.h>
#include <fmt/ostream.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "apps/kiln/job_support.h"
#include "apps/kiln/resume_check.h"
#include "apps/kiln/run_folder.h"
#include "kiln/core/error.h"
#include "kiln/core/parallel.h"
#include "kiln/core/rngs.h"
#include "kiln/io/checkpoint.h"
#include "kiln/io/checkpoint_manager.h"
#include "kiln/rl/evaluate.h"
#include "kiln/rl/make_env.h"
#include "kiln/rl/presets.h"
#include "kiln/train/signal_guard.h"

namespace kiln::app {

namespace {

constexpr const char* kOp = "kiln rl ppo";
using Clock = std::chrono::steady_clock;

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

std::string config_json(const PPOJobOptions& o, const rl::PPOPreset& p, const json& overrides) {
  json j = hyper_parameters(o, p);
  j["job"] = "ppo";
  j["env"] = p.env;
  j["eval_every"] = o.eval_every;
  j["eval_episodes"] = o.eval_episodes;
  if (!overrides.empty()) j["overrides"] = overrides;  // --override's record (apps/kiln/resume_check.h)
  return j.dump();
}

// What the job itself carries across a resume: when to evaluate next, what the
// evaluations found, the time spent, and how long the CSV was.
struct JobState : io::Stateful {
  int64_t next_eval = 0;   // global_step at or after which the next evaluation runs
  int64_t solved_step = -1;
  double eval_return = std::nan(""), eval_std = std::nan("");
  double seconds = 0;      // before this process
  int64_t csv_bytes = 0;

  io::State state() const override {
    return {{"next_eval", std::to_string(next_eval)},     {"solved_step", std::to_string(solved_step)},
            {"eval_return", fmt::format("{}", eval_return)}, {"eval_std", fmt::format("{}", eval_std)},
            {"seconds", fmt::format("{}", seconds)},         {"csv_bytes", std::to_string(csv_bytes)}};
  }
  void load_state(const io::State& s) override {
    JobState j;
    j.next_eval = io::state_i64(s, "next_eval", kOp);
    j.solved_step = io::state_i64(s, "solved_step", kOp);
    j.eval_return = io::state_f64(s, "eval_return", kOp);
    j.eval_std = io::state_f64(s, "eval_std", kOp);
    j.seconds = io::state_f64(s, "seconds", kOp);
    j.csv_bytes = io::state_i64(s, "csv_bytes", kOp);
    KILN_CHECK(j.csv_bytes >= 0, kOp, "state 'csv_bytes' is {}, not a length", j.csv_bytes);
    *this = j;
  }
};

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
  // The thread count is process-wide: set for the job, restored after it.
  struct Threads {
    int before = get_num_threads();
    ~Threads() { set_num_threads(before); }
  } threads_guard;
  if (o.threads > 0) set_num_threads(o.threads);
  std::ostream& log = o.log ? *o.log : std::cout;

  auto env = rl::make_vector_env(p.env, p.num_envs);
  auto eval_env = rl::make_vector_env(p.env, o.eval_episodes);  // one episode per copy
  Rngs rngs{{"params", o.seed}};
  rl::MlpActorCritic agent(env->spec(), nn::Init(rngs), p.agent);
  rl::PPO ppo(*env, agent, p.ppo);  // checks the PPO options (minibatches dividing the rollout, ...)
  const int64_t rollout = p.ppo.num_steps * p.num_envs;
  // Evaluation episodes are the same at every evaluation of a run: a fixed
  // reset seed apart from the training seeds.
  const rl::EvaluationOptions eval_options{.episodes = o.eval_episodes, .seed = 1'000'000 + o.seed};

  JobState job;
  job.next_eval = o.eval_every > 0 ? o.eval_every : p.ppo.total_timesteps;
  io::Checkpoint ckpt;
  ckpt.model(agent).optimizer(ppo.optimizer()).state("ppo", ppo).state("job", job);

  // Locked for the whole run; refuses a folder holding another run unless
  // resuming or overwriting it.
  RunFolder folder(kOp, o.out.empty() ? "runs/ppo-" + p.name : o.out, {.resume = o.resume, .overwrite = o.overwrite});
  const std::filesystem::path& out = folder.path();
  const std::string csv = (out / "metrics.csv").string();
  const std::string ckpt_dir = (out / "checkpoints").string();
  json overrides = json::array();
  if (o.resume) {
    KILN_CHECK(std::filesystem::is_directory(ckpt_dir), kOp, "--resume: no checkpoint in {}", ckpt_dir);
    io::CheckpointManager manager(ckpt_dir);
    KILN_CHECK(manager.latest().has_value(), kOp, "--resume: no checkpoint in {}", ckpt_dir);
    const std::string path = *manager.latest();
    const io::CheckpointInfo info = io::read_checkpoint_info(path);
    const json saved = json::parse(info.config, nullptr, /*allow_exceptions=*/false);
    const std::string saved_env = saved.is_object() ? saved.value("env", "") : "";
    KILN_CHECK(saved_env == p.env, kOp, "--resume: {} is a run of {}, not {}", path,
               saved_env.empty() ? "no known environment" : saved_env, p.env);
    overrides = check_resume(kOp, path, saved, hyper_parameters(o, p), o.overrides, saved.value("overrides", json()),
                             info.progress.global_step, log);
    fmt::print(log, "resuming from {}\n", path);
    ckpt.load(path);
    KILN_CHECK(std::filesystem::exists(csv) && int64_t(std::filesystem::file_size(csv)) >= job.csv_bytes, kOp,
               "--resume: {} is missing or shorter than the {} bytes the checkpoint saw", csv, job.csv_bytes);
    std::filesystem::resize_file(csv, uintmax_t(job.csv_bytes));  // drop rows logged after the checkpoint
  } else {
    folder.start(log);  // the previous run (--overwrite) moves aside until the first checkpoint
    std::ofstream(csv, std::ios::trunc) << kCsvHeader << '\n';
  }
  ckpt.config(config_json(o, p, overrides));
  io::CheckpointManager manager(ckpt_dir, {.keep_last = 2});
  std::ofstream csv_out(csv, std::ios::app);
  KILN_CHECK(csv_out.good(), kOp, "cannot write {}", csv);

  fmt::print(log, "ppo {}: {} parameters · {} envs x {} steps · {} iterations of {} steps · seed {} · {}\n",
             p.env, agent.num_parameters(), p.num_envs, p.ppo.num_steps, ppo.num_iterations(), rollout, o.seed,
             threads_and_cpu());

  PPOJobResult r;
  r.target_return = p.target_return;
  r.csv = csv;
  const auto t0 = Clock::now();
  const double seconds_before = job.seconds;  // the earlier legs' time, from the checkpoint
  auto elapsed = [&] { return seconds_before + std::chrono::duration<double>(Clock::now() - t0).count(); };
  // NOTE [exact resume]: the environments' state is not checkpointed, so
  // every checkpoint starts fresh episodes (PPO::restart_episodes) before it
  // is written, in an uninterrupted run as in a resumed one: resuming from it
  // continues exactly. Checkpoints fall at evaluations and at the end; a run
  // stopped by max_iterations also saves where it stops, and resuming there
  // gives another (equally valid) run than an uninterrupted one.
  auto save = [&] {
    ppo.restart_episodes();
    csv_out.flush();
    job.csv_bytes = int64_t(std::filesystem::file_size(csv));
    r.checkpoint = manager.save(ckpt, ppo.global_step());
    folder.first_checkpoint_written();
  };
  int64_t this_process = 0;
  train::SignalGuard signals;  // SIGINT/SIGTERM: finish the iteration, save, exit 130/143
  while (!ppo.done() && (o.max_iterations == 0 || this_process < o.max_iterations) &&
         train::SignalGuard::received() == 0) {
    rl::PPOStats s = ppo.iterate();
    ++this_process;
    // A diverged update is not checkpointed: the run stops at it.
    KILN_CHECK(std::isfinite(s.policy_loss) && std::isfinite(s.value_loss), kOp,
               "non-finite loss at iteration {} (policy {}, value {}): training stopped there, and no checkpoint of "
               "it was written; the last good checkpoint is {}",
               s.iteration, s.policy_loss, s.value_loss, manager.latest().value_or("none (the run had not saved one)"));
    const double sps = double(rollout) / (s.collect_seconds + s.update_seconds);
    double eval_return = std::nan(""), eval_std = std::nan("");
    const bool evaluate = s.global_step >= job.next_eval || ppo.done();
    if (evaluate) {
      rl::EvaluationResult e = rl::evaluate_policy(agent, *eval_env, eval_options);
      eval_return = job.eval_return = e.mean_return;
      eval_std = job.eval_std = e.std_return;
      if (job.solved_step < 0 && e.mean_return >= p.target_return) job.solved_step = s.global_step;
      while (job.next_eval <= s.global_step) job.next_eval += o.eval_every > 0 ? o.eval_every : p.ppo.total_timesteps;
    }
    fmt::print(log, "iter {}/{} · step {} · return {} ({} episode{}) · pg {:.4f} · v {:.4f} · ent {:.3f} · kl {:.2g} · "
               "{:.0f} steps/s\n",
               s.iteration, ppo.num_iterations(), s.global_step,
               std::isnan(s.mean_return) ? std::string("-") : fmt::format("{:.1f}", s.mean_return), s.episodes,
               s.episodes == 1 ? "" : "s", s.policy_loss, s.value_loss, s.entropy, s.approx_kl, sps);
    if (evaluate)
      fmt::print(log, "eval step {}: {:.1f} ± {:.1f} over {} episodes{}\n", s.global_step, eval_return, eval_std,
                 o.eval_episodes,
                 job.solved_step == s.global_step ? fmt::format(" · solved (≥ {})", p.target_return) : "");
    fmt::print(csv_out, "{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}\n", s.iteration, s.global_step, elapsed(),
               s.learning_rate, s.episodes, cell(s.mean_return), cell(s.mean_length), s.policy_loss, s.value_loss,
               s.entropy, s.approx_kl, s.clipfrac, cell(s.explained_variance), sps, cell(eval_return), cell(eval_std));
    if (evaluate || ppo.done() || this_process == o.max_iterations || train::SignalGuard::received() != 0) {
      job.seconds = elapsed();
      save();
    }
  }
  log.flush();
  job.seconds = elapsed();
  r.iterations = ppo.iteration();
  r.global_step = ppo.global_step();
  r.eval_return = job.eval_return;
  r.eval_std = job.eval_std;
  r.solved_step = job.solved_step;
  r.seconds = job.seconds;
  if (r.checkpoint.empty() && manager.latest()) r.checkpoint = *manager.latest();
  r.signal = train::SignalGuard::received();
  if (r.signal != 0)
    fmt::print(log, "stopped by {} at iteration {}: resume with --resume (from {})\n",
               train::SignalGuard::name(r.signal), r.iterations, r.checkpoint);
  if (ppo.done())
    fmt::print(log, "{} after {} steps in {:.1f} s: eval {:.1f} ± {:.1f}; {}\n", p.env, r.global_step, r.seconds,
               r.eval_return, r.eval_std,
               r.solved_step >= 0 ? fmt::format("first reached {} at step {}", p.target_return, r.solved_step)
                                  : fmt::format("never reached {}", p.target_return));
  fmt::print(log, "wrote {} and {}\n", csv, r.checkpoint);
  return r;
}

}  // namespace kiln::app
