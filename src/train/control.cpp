// train::Control (T14): commands from any thread, applied by the training
// thread at its safe points (Trainer calls poll() after every step).
#include "kiln/train/control.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <exception>

#include "kiln/core/error.h"
#include "kiln/optim/optimizer.h"
#include "kiln/train/task.h"

namespace kiln::train {

namespace {

// dst = src, reusing dst's nodes and strings: in the steady state (the same
// keys every step) this is one walk over both maps copying doubles, so the
// per-step poll allocates nothing. A changed key set (a callback added
// "val/loss") copies the map.
void copy_logs(const std::map<std::string, double>& src, std::map<std::string, double>& dst) {
  if (src.size() == dst.size()) {
    auto d = dst.begin();
    auto s = src.begin();
    for (; s != src.end() && s->first == d->first; ++s, ++d) d->second = s->second;
    if (s == src.end()) return;
  }
  dst = src;
}

// Answers `ring` (ids strictly increasing) holds for ids in (after_id, ...).
auto first_after(const std::deque<CommandResult>& ring, uint64_t after_id) {
  return std::upper_bound(ring.begin(), ring.end(), after_id,
                          [](uint64_t id, const CommandResult& r) { return id < r.id; });
}

// "val/accuracy: 0.91, val/loss: 0.31" from the logs an evaluation wrote.
std::string validation_logs(const std::map<std::string, double>& logs) {
  std::string out;
  for (const auto& [name, value] : logs)
    if (name.starts_with("val/")) out += fmt::format("{}{}: {:.4g}", out.empty() ? "" : ", ", name, value);
  return out;
}

}  // namespace

std::string to_string(const Command& command) {
  switch (command.kind) {
    case Command::Kind::pause: return "pause";
    case Command::Kind::resume: return "resume";
    case Command::Kind::stop: return "stop";
    case Command::Kind::checkpoint: return "checkpoint";
    case Command::Kind::evaluate: return "evaluate";
    case Command::Kind::set: return fmt::format("set {}={}", command.name, command.value);
    case Command::Kind::recapture: return "request_recapture";
    case Command::Kind::rebuild: return "request_rebuild";
  }
  return fmt::format("command {}", int(command.kind));
}

Control::Control(size_t result_capacity) : capacity_(result_capacity) {
  KILN_CHECK(result_capacity >= 1, "Control", "result_capacity must be at least 1, got {}", result_capacity);
}

// ---- any thread ----

uint64_t Control::submit(Command command) {
  std::lock_guard lock(mu_);
  uint64_t id = next_id_++;
  if (ended_) {
    // Nothing will poll again: answer now (in id order, since the queue was
    // emptied by end()).
    CommandResult r{.id = id, .command = std::move(command), .applied = false, .message = {}, .global_step = 0};
    r.message = fmt::format("training has ended ({})", to_string(snapshot_.state));
    r.global_step = snapshot_.progress.global_step;
    answer(std::move(r));
  } else {
    queue_.emplace_back(id, std::move(command));
    queued_.notify_one();
  }
  return id;
}

std::optional<CommandResult> Control::wait(uint64_t id, std::chrono::milliseconds timeout) const {
  // A wait "forever" (milliseconds::max()) would overflow the deadline
  // now + timeout into the past: a year is forever enough.
  timeout = std::min(timeout, std::chrono::milliseconds(std::chrono::hours(24 * 365)));
  std::unique_lock lock(mu_);
  KILN_CHECK(id >= 1 && id < next_id_, "Control.wait", "no command has id {} (ids submitted so far: {})", id,
             next_id_ == 1 ? std::string("none") : fmt::format("1..{}", next_id_ - 1));
  if (!cv_.wait_for(lock, timeout, [&] { return last_answered_ >= id; })) return std::nullopt;
  auto it = first_after(ring_, id - 1);
  if (it == ring_.end() || it->id != id) return std::nullopt;  // dropped from the ring
  return *it;
}

RunState Control::state() const {
  std::lock_guard lock(mu_);
  return snapshot_.state;
}

Snapshot Control::snapshot() const {
  std::lock_guard lock(mu_);
  return snapshot_;
}

std::vector<CommandResult> Control::results(uint64_t after_id) const {
  std::lock_guard lock(mu_);
  return {first_after(ring_, after_id), ring_.end()};
}

// ---- Trainer as a Controllable ----

// The Trainer's side of the contract: its state (Control is its friend), its
// callbacks' hooks and its task's optimizer.
class Control::TrainerLoop final : public Controllable {
 public:
  explicit TrainerLoop(Trainer& t) : t_(t) {}
  RunState state() const override { return t_.state(); }
  void set_state(RunState state) override { t_.state_ = state; }
  io::Progress progress() const override { return t_.progress(); }
  int64_t max_epochs() const override { return t_.max_epochs(); }
  int64_t steps_per_epoch() const override { return t_.steps_per_epoch(); }
  double elapsed() const override { return t_.elapsed(); }
  const std::map<std::string, double>& logs() const override { return t_.logs(); }
  void request_stop() override { t_.request_stop(); }
  bool stop_requested() const override { return t_.stop_requested(); }
  void pause_clock_begin() override { t_.pause_clock_begin(); }
  void pause_clock_end() override { t_.pause_clock_end(); }
  // The first callback whose hook returns true did it; the rest are not asked.
  bool save_now() override {
    for (const auto& callback : t_.callbacks())
      if (callback->save_now(t_)) return true;
    return false;
  }
  bool evaluate_now() override {
    for (const auto& callback : t_.callbacks())
      if (callback->evaluate_now(t_)) return true;
    return false;
  }
  std::string set_option(const std::string& name, double value) override {
    return set_optimizer_option(t_.task().optimizer(), name, value, &t_.logs());
  }
  std::string recapture() override { return t_.task().recapture(); }

 private:
  Trainer& t_;
};

void Control::begin(Trainer& trainer) {
  TrainerLoop loop(trainer);
  begin(static_cast<Controllable&>(loop));
}

void Control::poll(Trainer& trainer) {
  TrainerLoop loop(trainer);
  poll(static_cast<Controllable&>(loop));
}

void Control::end(Trainer& trainer, RunState final_state) {
  TrainerLoop loop(trainer);
  end(static_cast<Controllable&>(loop), final_state);
}

std::string set_optimizer_option(optim::Optimizer& opt, const std::string& name, double value,
                                 std::map<std::string, double>* logs, const std::string& prefix) {
  const std::string option = name.starts_with(prefix) ? name.substr(prefix.size()) : std::string();
  if (option.empty() || !opt.has_option(option)) {
    std::vector<std::string> names = opt.option_names();
    for (std::string& n : names) n = prefix + n;
    KILN_FAIL("set", "{} has no option '{}' (options: {})", opt.name(), name, fmt::join(names, ", "));
  }
  const double old = opt.get(option);
  if (option == "lr") {
    // As a scheduler sets it: each group gets value * its lr_scale.
    opt.apply_lr(value);
    if (logs) (*logs)[name] = value;
  } else {
    opt.set(option, value);  // validated; on error nothing changes
  }
  return fmt::format("{} {} -> {}", name, old, opt.get(option));
}

const char* to_string(Mutability m) {
  switch (m) {
    case Mutability::hot: return "Hot";
    case Mutability::recapture: return "Recapture";
    case Mutability::rebuild: return "Rebuild";
    case Mutability::immutable: return "Immutable";
  }
  return "?";
}

Mutability mutability_of(const std::string& name) {
  for (const char* n : {"batch_size", "train_mode"})
    if (name == n) return Mutability::recapture;
  for (const char* n : {"model", "hidden", "dtype", "compile", "num_envs", "block_size"})
    if (name == n) return Mutability::rebuild;
  for (const char* n : {"seed", "data", "out", "threads"})
    if (name == n) return Mutability::immutable;
  // Optimizer options, with a loop's prefix ("q_lr"): read by every step,
  // and by a compiled step's update at replay.
  return Mutability::hot;
}

std::string Controllable::recapture() {
  KILN_FAIL("request_recapture", "this run has no compiled step (start it with --compile)");
}
std::string Controllable::rebuild() {
  KILN_FAIL("request_rebuild", "this run cannot rebuild its compiled step (start it with --compile)");
}

// ---- the training thread ----

void Control::begin(Controllable& loop) {
  std::lock_guard lock(mu_);
  ended_ = false;  // a loop may run again; what came between was rejected
  paused_ = false;
  // Fixed for the whole run: the loader and max_epochs do not change.
  snapshot_.max_epochs = loop.max_epochs();
  snapshot_.steps_per_epoch = loop.steps_per_epoch();
  publish(loop);
}

void Control::poll(Controllable& loop) {
  std::unique_lock lock(mu_);
  publish(loop);
  if (queue_.empty()) return;  // the every-step case

  // The training clock stands still while paused: a pause is not training time.
  struct PausedClock {
    Controllable& loop;
    bool on = false;
    void set(bool paused) {
      if (paused == on) return;
      paused ? loop.pause_clock_begin() : loop.pause_clock_end();
      on = paused;
    }
    ~PausedClock() { set(false); }
  } clock{loop};
  for (;;) {
    while (!queue_.empty()) {
      auto [id, command] = std::move(queue_.front());
      queue_.pop_front();
      // Callbacks (save_now, evaluate_now) may take seconds: observers keep
      // reading the last snapshot and submitting meanwhile.
      lock.unlock();
      CommandResult result = apply(loop, id, command);
      clock.set(paused_);
      lock.lock();
      publish(loop);  // before the answer, so a woken waiter sees its effect
      answer(std::move(result));
    }
    if (!paused_) return;
    queued_.wait(lock, [&] { return !queue_.empty(); });
  }
}

void Control::end(Controllable& loop, RunState final_state) {
  KILN_CHECK(final_state == RunState::completed || final_state == RunState::failed, "Control.end",
             "final_state must be completed or failed, got {}", to_string(final_state));
  paused_ = false;
  loop.set_state(final_state);
  std::lock_guard lock(mu_);
  ended_ = true;
  publish(loop);
  while (!queue_.empty()) {
    auto& [id, command] = queue_.front();
    CommandResult r{.id = id, .command = std::move(command), .applied = false, .message = {}, .global_step = 0};
    r.message = fmt::format("training has ended ({})", to_string(final_state));
    r.global_step = loop.progress().global_step;
    queue_.pop_front();
    answer(std::move(r));
  }
}

// ---- private ----

CommandResult Control::apply(Controllable& loop, uint64_t id, const Command& command) {
  CommandResult r{.id = id, .command = command, .applied = false, .message = {}, .global_step = 0};
  auto done = [&](bool applied, std::string message) {
    r.applied = applied;
    r.message = std::move(message);
  };
  // A hook (checkpoint, evaluate) that throws rejects the command and
  // training goes on. Its time is not training time.
  auto run_hook = [&](bool (Controllable::*hook)(), const char* none, const char* did) {
    loop.pause_clock_begin();
    struct Restart {
      Controllable& loop;
      ~Restart() { loop.pause_clock_end(); }
    } restart{loop};
    if ((loop.*hook)()) return done(true, did);
    done(false, none);
  };
  try {
    switch (command.kind) {
      case Command::Kind::pause:
        if (paused_) {
          done(false, "already paused");
          break;
        }
        if (loop.stop_requested()) {
          done(false, "training is stopping");
          break;
        }
        paused_ = true;
        loop.set_state(RunState::paused);
        done(true, "paused");
        break;
      case Command::Kind::resume:
        if (!paused_) {
          done(false, "not paused");
          break;
        }
        paused_ = false;
        loop.set_state(RunState::running);
        done(true, "resumed");
        break;
      case Command::Kind::stop:
        if (loop.stop_requested()) {
          done(false, "already stopping");
          break;
        }
        loop.request_stop();
        paused_ = false;
        loop.set_state(RunState::stopping);
        done(true, "stopping");
        break;
      case Command::Kind::checkpoint:
        run_hook(&Controllable::save_now, "no checkpoint callback", "saved");
        break;
      case Command::Kind::evaluate: {
        run_hook(&Controllable::evaluate_now, "no validation callback", "evaluated");
        if (r.applied) {
          std::string logs = validation_logs(loop.logs());
          if (!logs.empty()) r.message += " (" + logs + ")";
        }
        break;
      }
      case Command::Kind::set: {
        const Mutability m = mutability_of(command.name);
        KILN_CHECK(m == Mutability::hot, "set", "'{}' is {}: it cannot change during a run{}", command.name,
                   to_string(m), m == Mutability::recapture ? " by set (RequestRecapture records the step again)" : "");
        done(true, loop.set_option(command.name, command.value));
        break;
      }
      case Command::Kind::recapture:
        done(true, loop.recapture());
        break;
      case Command::Kind::rebuild:
        done(true, loop.rebuild());
        break;
      default: done(false, fmt::format("unknown command kind {}", int(command.kind)));
    }
  } catch (const Error& e) {
    // "[set] SGD has no option ..." reads as the answer without the op's prefix.
    std::string what = e.what();
    if (what.starts_with("[set] ")) what.erase(0, 6);
    done(false, what);
  } catch (const std::exception& e) {
    done(false, e.what());
  } catch (...) {
    done(false, "unknown exception");
  }
  r.global_step = loop.progress().global_step;
  return r;
}

void Control::answer(CommandResult result) {
  if (result.applied) ++snapshot_.revision;
  last_answered_ = result.id;
  ring_.push_back(std::move(result));
  if (ring_.size() > capacity_) ring_.pop_front();
  cv_.notify_all();
}

void Control::publish(const Controllable& loop) {
  Snapshot& s = snapshot_;
  s.state = loop.state();
  s.progress = loop.progress();
  s.elapsed = loop.elapsed();
  copy_logs(loop.logs(), s.logs);
}

}  // namespace kiln::train
