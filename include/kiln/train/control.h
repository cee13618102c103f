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

namespace kiln::train {

struct Command {
  enum class Kind { pause, resume, stop, checkpoint, evaluate, set };
  Kind kind = Kind::stop;
  std::string name;  // set: the optimizer option ("lr", "weight_decay", "momentum", ...)
  double value = 0;  // set: its new value

  static Command pause() { return {Kind::pause, {}, 0}; }
  static Command resume() { return {Kind::resume, {}, 0}; }
  static Command stop() { return {Kind::stop, {}, 0}; }
  static Command checkpoint() { return {Kind::checkpoint, {}, 0}; }
  static Command evaluate() { return {Kind::evaluate, {}, 0}; }
  static Command set(std::string name, double value) { return {Kind::set, std::move(name), value}; }
};
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
};

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

  // ---- the training thread (called by Trainer) ----
  void begin(Trainer& trainer);
  /// Refreshes the snapshot and applies queued commands; while paused, blocks
  /// (with the training clock stopped) applying commands until resume or stop.
  /// With nothing queued it is a lock and a copy of a few numbers (no allocation
  /// once the logs' keys are steady).
  void poll(Trainer& trainer);
  /// Marks the run completed or failed, and rejects what is still queued.
  void end(Trainer& trainer, RunState final_state);

 private:
  CommandResult apply(Trainer& trainer, uint64_t id, const Command& command);  // unlocked: runs callbacks
  void answer(CommandResult result);     // under mu_
  void publish(const Trainer& trainer);  // under mu_

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
