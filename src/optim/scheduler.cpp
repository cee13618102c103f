// LRScheduler: stepping and the checkpointable state shared by every
// scheduler (children nested by name). Applying to an optimizer: scheduler_apply.cpp.
#include "kiln/optim/scheduler.h"

#include <cmath>

#include "kiln/core/error.h"

namespace kiln::optim {

namespace {
// Steps are stored as doubles: every integer up to 2^53 is exact.
constexpr int64_t kMaxExactStep = int64_t(1) << 53;
}  // namespace

LRScheduler::~LRScheduler() = default;

std::optional<double> LRScheduler::momentum(int64_t step) const {
  check_step(step);
  return std::nullopt;
}

double LRScheduler::step() {
  KILN_CHECK(last_step_ < kMaxExactStep, name(), "step(): last_step {} cannot advance further", last_step_);
  seek(*this, last_step_ + 1);
  return get_lr();
}

void LRScheduler::seek(LRScheduler& s, int64_t step) {
  s.last_step_ = step;
  s.on_seek();
}

void LRScheduler::check_step(int64_t step) const {
  KILN_CHECK(step >= 0, name(), "step must be >= 0, got {}", step);
}

// ---- state ----

SchedulerState LRScheduler::state_dict() const {
  SchedulerState out;
  save_tree(out, "");
  return out;
}

void LRScheduler::load_state_dict(const SchedulerState& state) {
  const std::string owner = name();
  std::set<std::string> used;
  check_tree(state, "", owner, used);
  for (const auto& [key, value] : state)
    KILN_CHECK(used.count(key) != 0, owner, "load_state_dict: unknown key '{}'", key);
  restore_tree(state, "");
}

void LRScheduler::save_tree(SchedulerState& out, const std::string& prefix) const {
  out[prefix + "last_step"] = double(last_step_);
  save_own(out, prefix);
  for (const auto& [child_name, child] : children()) child->save_tree(out, prefix + child_name + ".");
}

void LRScheduler::check_tree(const SchedulerState& in, const std::string& prefix, const std::string& owner,
                             std::set<std::string>& used) const {
  required_int(in, prefix + "last_step", owner, used, 0, kMaxExactStep);
  check_own(in, prefix, owner, used);
  for (const auto& [child_name, child] : children()) child->check_tree(in, prefix + child_name + ".", owner, used);
}

void LRScheduler::restore_tree(const SchedulerState& in, const std::string& prefix) {
  // Children first, so that this scheduler's on_seek() sees them restored
  // (it moves only the active child, to the step that child had saved).
  for (const auto& [child_name, child] : children()) child->restore_tree(in, prefix + child_name + ".");
  restore_own(in, prefix);
  seek(*this, int64_t(in.at(prefix + "last_step")));
}

double LRScheduler::required(const SchedulerState& in, const std::string& key, const std::string& owner,
                             std::set<std::string>& used) {
  auto it = in.find(key);
  KILN_CHECK(it != in.end(), owner, "load_state_dict: missing key '{}'", key);
  used.insert(key);
  return it->second;
}

int64_t LRScheduler::required_int(const SchedulerState& in, const std::string& key, const std::string& owner,
                                  std::set<std::string>& used, int64_t lo, int64_t hi) {
  const double v = required(in, key, owner, used);
  KILN_CHECK(std::isfinite(v) && v == std::floor(v) && v >= double(lo) && v <= double(hi), owner,
             "load_state_dict: '{}' must be an integer in [{}, {}], got {}", key, lo, hi, v);
  return int64_t(v);
}

}  // namespace kiln::optim
