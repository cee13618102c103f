// Live control of a running training (T14): another thread (a UI, a signal
// handler, a test) sends commands to Trainer::control(); the training thread
// applies each at the next safe point, between two optimizer steps, and
// answers it applied or rejected.
//
//   auto control = trainer.control();
//   std::thread ui([&] {
//     uint64_t id = control->submit(train::Command::set("lr", 1e-4));
//     auto r = control->wait(id);          // r->applied, r->message
//     control->submit(train::Command::pause());
//     train::Snapshot s = control->snapshot();   // state paused, progress, logs
//     control->submit(train::Command::resume());
//   });
//   trainer.fit(task, loader);
//
// A loop that is not a Trainer (the RL jobs' loops) implements Controllable
// and calls begin/poll/end with itself at its own safe points.
//
// States: idle (before fit), running, paused, stopping (a stop was requested),
// completed, failed. Every answer also goes into a bounded ring of results
// that observers read with results(after_id). Commands are answered in the
// order they were submitted. docs/live_control.md has the details.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "kiln/io/checkpoint.h"
#include "kiln/train/trainer.h"

namespace kiln::optim {
class Optimizer;
}

namespace kiln::train {

struct Command {
  enum class Kind { pause, resume, stop, checkpoint, evaluate, set, recapture, rebuild };
  Kind kind = Kind::stop;
  std::string name;  // set: the optimizer option ("lr", "weight_decay", "momentum", ...)
  double value = 0;  // set: its new value

  static Command pause() { return {Kind::pause, {}, 0}; }
  static Command resume() { return {Kind::resume, {}, 0}; }
  static Command stop() { return {Kind::stop, {}, 0}; }
  static Command checkpoint() { return {Kind::checkpoint, {}, 0}; }
  static Command evaluate() { return {Kind::evaluate, {}, 0}; }
  static Command set(std::string name, double value) { return {Kind::set, std::move(name), value}; }
  /// Spec 002's RequestRecapture / RequestRebuild (a compiled step records
  /// again at its next call / the run rebuilds what it compiled from).
  static Command request_recapture() { return {Kind::recapture, {}, 0}; }
  static Command request_rebuild() { return {Kind::rebuild, {}, 0}; }
};

/// Spec 002's mutability classes: how a change reaches a running (possibly
/// compiled, docs/compile.md) training. Hot: read at the next step, compiled
/// or not (an optimizer's options: the compiled step runs the update with
/// the live values). Recapture: takes effect when the compiled step records
/// again (the batch shape, train/eval mode: a new signature records by
/// itself; anything else through RequestRecapture). Rebuild: the model or
/// optimizer must be rebuilt (layer sizes, dtypes). Immutable: fixed for the
/// run (seed, data set).
enum class Mutability { hot, recapture, rebuild, immutable };
const char* to_string(Mutability m);
/// The class of a `set NAME=VALUE` name or a run setting: optimizer options
/// ("lr", "weight_decay", "momentum", "beta1", ...) are hot; "batch_size",
/// "train_mode" recapture; "model", "hidden", "dtype", "compile" rebuild;
/// anything else (seed, data) immutable.
Mutability mutability_of(const std::string& name);
/// "pause", "resume", "stop", "checkpoint", "evaluate", "set lr=0.001".
std::string to_string(const Command& command);

struct CommandResult {
  uint64_t id = 0;
  Command command;
  bool applied = false;
  std::string message;      // why it was rejected, or what it did
  int64_t global_step = 0;  // the step after which it was answered
};

// The live state as of the last safe point.
struct Snapshot {
  RunState state = RunState::idle;
  io::Progress progress;
  int64_t max_epochs = 0;
  int64_t steps_per_epoch = 0;
  double elapsed = 0;  // training seconds
  std::map<std::string, double> logs;
  uint64_t revision = 0;  // +1 per applied command: the live state's version (spec 002)
};

/// What a training loop shows Control at its safe points (Trainer is one,
/// through Control::begin/poll/end(Trainer&); a loop of its own implements
/// this). Called on the loop's thread only.
class Controllable {
 public:
  virtual ~Controllable() = default;
  virtual RunState state() const = 0;
  /// Control moves the run between running, paused and stopping.
  virtual void set_state(RunState state) = 0;
  virtual io::Progress progress() const = 0;
  virtual int64_t max_epochs() const { return 0; }      // 0: not an epoch loop
  virtual int64_t steps_per_epoch() const { return 0; }
  /// Training seconds, without the time spent in pause_clock_begin/end.
  virtual double elapsed() const = 0;
  virtual const std::map<std::string, double>& logs() const = 0;
  /// Ends the loop at its next safe point.
  virtual void request_stop() = 0;
  virtual bool stop_requested() const = 0;
  /// Stops and restarts the training clock (a pause, a checkpoint, an evaluation).
  virtual void pause_clock_begin() = 0;
  virtual void pause_clock_end() = 0;
  /// checkpoint / evaluate: true when done, false when the loop cannot (the
  /// command is rejected); an exception rejects it with its text. After an
  /// evaluation the "val/" logs hold its figures.
  virtual bool save_now() = 0;
  virtual bool evaluate_now() = 0;
  /// set NAME=VALUE: applies it and returns what changed ("lr 0.001 ->
  /// 0.0001"); a kiln::Error (unknown name, bad value) rejects it, changing nothing.
  virtual std::string set_option(const std::string& name, double value) = 0;
  /// RequestRecapture / RequestRebuild: what was done; a kiln::Error rejects
  /// it (by default: the loop compiles nothing).
  virtual std::string recapture();
  virtual std::string rebuild();
};

/// set NAME=VALUE on an optimizer, as Control applies it to a Trainer's:
/// "lr" as a scheduler sets it (each group gets value x its lr_scale, and
/// logs["lr"] follows), any other option through Optimizer::set (validated;
/// on error nothing changes). `prefix` names the optimizer in a loop with
/// several ("q_" + "lr" for SAC's critics): NAME must start with it.
std::string set_optimizer_option(optim::Optimizer& optimizer, const std::string& name, double value,
                                 std::map<std::string, double>* logs = nullptr, const std::string& prefix = "");

class Control {
 public:
  explicit Control(size_t result_capacity = 256);

  // ---- any thread ----
  /// Queues a command; returns its id (1, 2, ...). Commands sent before fit()
  /// starts are applied at its first safe point; after it has ended they are
  /// rejected at once.
  uint64_t submit(Command command);
  /// The answer to command `id`, waiting up to `timeout` for it; nullopt on
  /// timeout or when the answer has already left the ring (then at once).
  /// milliseconds::max() waits as long as it takes. An id never returned by
  /// submit() is a kiln::Error.
  std::optional<CommandResult> wait(uint64_t id,
                                    std::chrono::milliseconds timeout = std::chrono::seconds(60)) const;
  RunState state() const;
  Snapshot snapshot() const;
  /// The answers with id > after_id still in the ring, oldest first.
  std::vector<CommandResult> results(uint64_t after_id = 0) const;

  // ---- the training thread (called by Trainer, or by a Controllable loop) ----
  void begin(Controllable& loop);
  /// Refreshes the snapshot and applies queued commands; while paused, blocks
  /// (with the training clock stopped) applying commands until resume or stop.
  /// With nothing queued it is a lock and a copy of a few numbers (no allocation
  /// once the logs' keys are steady).
  void poll(Controllable& loop);
  /// Marks the run completed or failed, and rejects what is still queued.
  void end(Controllable& loop, RunState final_state);
  /// The same for a Trainer (its callbacks' save_now / evaluate_now, its task's optimizer).
  void begin(Trainer& trainer);
  void poll(Trainer& trainer);
  void end(Trainer& trainer, RunState final_state);

 private:
  class TrainerLoop;  // Trainer as a Controllable (control.cpp)
  CommandResult apply(Controllable& loop, uint64_t id, const Command& command);  // unlocked: runs callbacks
  void answer(CommandResult result);          // under mu_
  void publish(const Controllable& loop);     // under mu_

  mutable std::mutex mu_;
  mutable std::condition_variable cv_;  // an answer arrived (wait())
  std::condition_variable queued_;      // a command arrived (the training thread, while paused)
  size_t capacity_;
  uint64_t next_id_ = 1;
  uint64_t last_answered_ = 0;  // every id <= it is answered (answers come in id order)
  std::deque<std::pair<uint64_t, Command>> queue_;
  std::deque<CommandResult> ring_;  // ids strictly increasing; size() <= capacity_
  Snapshot snapshot_;
  bool paused_ = false;  // the training thread's own view (only it reads or writes it)
  bool ended_ = false;
};

}  // namespace kiln::train
