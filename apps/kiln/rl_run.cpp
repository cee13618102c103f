// RlRun (apps/kiln/rl_run.h): the RL jobs' files, checkpoints, clock and live control.
#include "apps/kiln/rl_run.h"

#include <fmt/format.h>
#include <fmt/ostream.h>
#include <fmt/ranges.h>

#include <chrono>
#include <filesystem>

#include "kiln/core/error.h"
#include "kiln/optim/optimizer.h"

namespace kiln::app {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr const char* kState = "kiln rl";

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

io::State RlJobState::state() const {
  return {{"next_eval", std::to_string(next_eval)},        {"solved_step", std::to_string(solved_step)},
          {"eval_return", fmt::format("{}", eval_return)}, {"eval_std", fmt::format("{}", eval_std)},
          {"seconds", fmt::format("{}", seconds)},         {"csv_bytes", std::to_string(csv_bytes)}};
}

void RlJobState::load_state(const io::State& s) {
  RlJobState j;
  j.next_eval = io::state_i64(s, "next_eval", kState);
  j.solved_step = io::state_i64(s, "solved_step", kState);
  j.eval_return = io::state_f64(s, "eval_return", kState);
  j.eval_std = io::state_f64(s, "eval_std", kState);
  j.seconds = io::state_f64(s, "seconds", kState);
  j.csv_bytes = io::state_i64(s, "csv_bytes", kState);
  KILN_CHECK(j.csv_bytes >= 0, kState, "state 'csv_bytes' is {}, not a length", j.csv_bytes);
  next_eval = j.next_eval;
  solved_step = j.solved_step;
  eval_return = j.eval_return;
  eval_std = j.eval_std;
  seconds = j.seconds;
  csv_bytes = j.csv_bytes;
}

RlRun::RlRun(JobRun& run, io::Checkpoint& ckpt, std::string csv_header, int64_t first_eval)
    : run_(run), ckpt_(ckpt), csv_header_(std::move(csv_header)) {
  job_.next_eval = first_eval;
  ckpt_.state("job", job_);
}

RlRun::~RlRun() {
  if (state_ != train::RunState::idle && !finished_) control_->end(*this, train::RunState::failed);
}

void RlRun::start(const json& config) {
  const std::string csv = run_.csv();
  if (run_.resuming()) {
    fmt::print(run_.log(), "resuming from {}\n", run_.resume_path());
    ckpt_.load(run_.resume_path());
    std::error_code ec;
    KILN_CHECK(fs::exists(csv, ec) && int64_t(fs::file_size(csv, ec)) >= job_.csv_bytes, run_.op(),
               "--resume: {} is missing or shorter than the {} bytes the checkpoint saw", csv, job_.csv_bytes);
    fs::resize_file(csv, uintmax_t(job_.csv_bytes));  // drop rows logged after the checkpoint
  } else {
    run_.folder().start(run_.log());  // the previous run (--overwrite) moves aside until the first checkpoint
    std::ofstream(csv, std::ios::trunc) << csv_header_ << '\n';
  }
  ckpt_.config(config.dump());
  csv_.open(csv, std::ios::app);
  KILN_CHECK(csv_.good(), run_.op(), "cannot write {}", csv);
  manager_ = std::make_unique<io::CheckpointManager>(run_.checkpoint_dir(), io::CheckpointManagerOptions{.keep_last = 2});
  start_ = now_seconds();
  state_ = train::RunState::running;
  control_->begin(*this);
  run_.serve(control_);
}

double RlRun::elapsed() const {
  if (state_ == train::RunState::idle) return job_.seconds;
  const double paused = paused_ + (pause_depth_ > 0 ? now_seconds() - pause_began_ : 0);
  return job_.seconds + (now_seconds() - start_) - paused;
}

void RlRun::pause_clock_begin() {
  if (pause_depth_++ == 0) pause_began_ = now_seconds();
}

void RlRun::pause_clock_end() {
  if (pause_depth_ > 0 && --pause_depth_ == 0) paused_ += now_seconds() - pause_began_;
}

bool RlRun::poll(int64_t global_step) {
  step_ = global_step;
  control_->poll(*this);
  return !stop_ && train::SignalGuard::received() == 0;
}

const std::string& RlRun::save(int64_t global_step) {
  if (hooks.before_save) hooks.before_save();
  csv_.flush();
  const double seconds_before = job_.seconds;
  job_.seconds = elapsed();  // the checkpoint carries the clock as of now
  job_.csv_bytes = int64_t(fs::file_size(run_.csv()));
  last_checkpoint_ = manager_->save(ckpt_, global_step);
  job_.seconds = seconds_before;
  run_.folder().first_checkpoint_written();
  return last_checkpoint_;
}

int RlRun::finish() {
  if (!finished_ && state_ != train::RunState::idle) control_->end(*this, train::RunState::completed);
  finished_ = true;
  return train::SignalGuard::received();
}

bool RlRun::save_now() {
  save(step_);
  return true;
}

bool RlRun::evaluate_now() {
  if (!hooks.evaluate) return false;
  hooks.evaluate();
  return true;
}

std::string RlRun::set_option(const std::string& name, double value) {
  // The optimizer whose prefix NAME starts with; the longest prefix wins ("" last).
  optim::Optimizer* target = nullptr;
  std::string prefix;
  std::vector<std::string> known;
  for (const auto& [p, opt] : hooks.optimizers) {
    for (const std::string& option : opt->option_names()) known.push_back(p + option);
    if (name.starts_with(p) && (target == nullptr || p.size() > prefix.size())) {
      target = opt;
      prefix = p;
    }
  }
  if (target == nullptr || !target->has_option(name.substr(prefix.size())))
    KILN_FAIL("set", "this job has no option '{}' (options: {})", name, fmt::join(known, ", "));
  return train::set_optimizer_option(*target, name, value, &logs_, prefix);
}

}  // namespace kiln::app
