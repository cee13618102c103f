// Live control (T14): a second thread drives a real Trainer (pause, set,
// resume, stop); commands queued before fit; rejections; the bounded ring.
// Synchronisation is by Control::wait and a gate callback, never by sleeping;
// every wait has a limit so a broken Control fails instead of hanging.
#include "kiln/train/control.h"

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <sstream>
#include <thread>

#include "kiln/data/dataloader.h"
#include "kiln/nn/linear.h"
#include "kiln/optim/sgd.h"
#include "tests/support/train_testing.h"

namespace kiln::train {
namespace {

using namespace std::chrono_literals;
constexpr auto kWait = std::chrono::milliseconds(10s);  // the limit of every wait

// 8 examples of 4 features, 3 classes; batches of 2 in order: 4 steps an epoch.
std::shared_ptr<data::TensorDataset> tiny_dataset() {
  std::vector<float> x(8 * 4);
  for (size_t i = 0; i < x.size(); ++i) x[i] = float(i % 7) / 7.0f - 0.5f;
  return std::make_shared<data::TensorDataset>(tensor(x, {8, 4}), tensor<int64_t>({0, 1, 2, 0, 1, 2, 0, 1}, {8}));
}

// A classifier, SGD at lr 0.1 and the loader (prefetch: batches gathered by
// the loader's thread); Trainers print into `out`.
struct Rig {
  explicit Rig(int prefetch = 0)
      : loader(tiny_dataset(),
               {.batch_size = 2, .shuffle = false, .seed = 0, .drop_last = false, .prefetch = prefetch}) {}
  Rngs rngs{0};
  nn::Shared<nn::Linear> model = nn::make<nn::Linear>(4, 3, nn::Init(rngs));
  optim::SGD opt{model->parameters(), {.lr = 0.1}};
  Task task{model, opt};
  data::DataLoader loader;
  std::ostringstream out;
  RunOptions run(int64_t max_steps = 0) {
    return {.max_steps = max_steps, .tokens_per_sample = 0, .out = &out, .tty = false, .config = "{}"};
  }
};

// Holds the training thread in on_step_end of global step `at` until release()
// (or kWait passes), so the driver can queue commands for a known safe point.
struct Gate : Callback {
  explicit Gate(int64_t at) : at(at) {}
  void on_step_end(Trainer& t, const StepResult&) override {
    if (t.progress().global_step != at) return;
    std::unique_lock lock(mu);
    reached = true;
    cv.notify_all();
    cv.wait_for(lock, kWait, [&] { return open; });
  }
  bool wait_reached() {
    std::unique_lock lock(mu);
    return cv.wait_for(lock, kWait, [&] { return reached; });
  }
  void release() {
    std::lock_guard lock(mu);
    open = true;
    cv.notify_all();
  }
  int64_t at;
  std::mutex mu;
  std::condition_variable cv;
  bool reached = false, open = false;
};

// The optimizer's lr at the start of every step (read after fit: training thread only).
struct LrLog : Callback {
  void on_step_begin(Trainer& t) override { lrs.push_back(t.task().optimizer().lr()); }
  std::vector<double> lrs;
};

// Answers evaluate as a validation callback would: writes val/ logs.
struct Evaluator : Callback {
  bool evaluate_now(Trainer& t) override {
    ++calls;
    t.logs()["val/loss"] = 0.25;
    t.logs()["val/accuracy"] = 0.5;
    return true;
  }
  int calls = 0;
};

// save_now: returns `result`, or throws when `fail`.
struct Saver : Callback {
  explicit Saver(bool result, bool fail = false) : result(result), fail(fail) {}
  bool save_now(Trainer&) override {
    ++calls;
    KILN_CHECK(!fail, "Saver", "disk full");
    return result;
  }
  bool result, fail;
  int calls = 0;
};

// "set lr=0.05 -> applied: lr 0.1 -> 0.05 @1": one answer, compared as a whole.
std::string line(const CommandResult& r) {
  return fmt::format("{} {} -> {}: {} @{}", r.id, to_string(r.command), r.applied ? "applied" : "rejected", r.message,
                     r.global_step);
}
std::vector<std::string> lines(const std::vector<CommandResult>& results) {
  std::vector<std::string> out;
  for (const CommandResult& r : results) out.push_back(line(r));
  return out;
}

TEST(Control, CommandNamesAndBadArguments) {
  EXPECT_EQ(to_string(Command::pause()), "pause");
  EXPECT_EQ(to_string(Command::resume()), "resume");
  EXPECT_EQ(to_string(Command::stop()), "stop");
  EXPECT_EQ(to_string(Command::checkpoint()), "checkpoint");
  EXPECT_EQ(to_string(Command::evaluate()), "evaluate");
  EXPECT_EQ(to_string(Command::set("lr", 0.001)), "set lr=0.001");
  EXPECT_EQ(to_string(Command::set("weight_decay", 1e-5)), "set weight_decay=1e-05");

  EXPECT_KILN_ERROR(Control(0), "[Control] result_capacity must be at least 1, got 0");
  Control control;
  EXPECT_EQ(control.state(), RunState::idle);
  EXPECT_EQ(control.snapshot().progress.global_step, 0);
  EXPECT_KILN_ERROR(control.wait(1), "[Control.wait] no command has id 1 (ids submitted so far: none)");
  EXPECT_EQ(control.submit(Command::pause()), 1u);
  EXPECT_EQ(control.submit(Command::stop()), 2u);
  EXPECT_KILN_ERROR(control.wait(0), "[Control.wait] no command has id 0 (ids submitted so far: 1..2)");
  EXPECT_KILN_ERROR(control.wait(3), "no command has id 3");
  EXPECT_FALSE(control.wait(1, 5ms).has_value());  // queued until a fit polls
  EXPECT_TRUE(control.results().empty());

  Rig s;
  Trainer trainer(1, {}, s.run());
  EXPECT_KILN_ERROR(trainer.control()->end(trainer, RunState::paused),
                    "[Control.end] final_state must be completed or failed, got paused");
}

// The scenario of the brief, driven from a second thread: a pause queued
// before fit holds training after step 1; the snapshot says paused and the
// step does not advance; set lr while paused; resume; at step 5 (the gate) a
// late resume and a stop are queued: fit returns after step 5, completed.
TEST(Control, SecondThreadPausesSetsResumesAndStops) {
  Rig s(/*prefetch=*/2);
  auto lr_log = std::make_shared<LrLog>();
  auto gate = std::make_shared<Gate>(5);
  Trainer trainer(100, {lr_log, gate}, s.run());
  std::shared_ptr<Control> control = trainer.control();
  const uint64_t pause_id = control->submit(Command::pause());

  std::thread driver([&] {
    bool finished = false;
    // Whatever fails below, never leave the trainer paused or gated.
    struct Unblock {
      Control& c;
      Gate& g;
      bool& finished;
      ~Unblock() {
        if (!finished) c.submit(Command::stop());
        g.release();
      }
    } unblock{*control, *gate, finished};

    std::optional<CommandResult> paused = control->wait(pause_id, kWait);
    ASSERT_TRUE(paused.has_value());
    EXPECT_EQ(line(*paused), "1 pause -> applied: paused @1");
    Snapshot a = control->snapshot();
    EXPECT_EQ(a.state, RunState::paused);
    EXPECT_EQ(a.progress, (io::Progress{.epoch = 0, .global_step = 1, .step_in_epoch = 1}));
    EXPECT_EQ(a.max_epochs, 100);
    EXPECT_EQ(a.steps_per_epoch, 4);
    EXPECT_EQ(a.logs.count("loss"), 1u);
    std::this_thread::sleep_for(50ms);  // time for steps to happen, were they not held
    EXPECT_EQ(control->snapshot().progress.global_step, 1);
    EXPECT_EQ(control->state(), RunState::paused);

    auto ask = [&](Command c) {
      std::optional<CommandResult> r = control->wait(control->submit(std::move(c)), kWait);
      return r ? line(*r) : std::string("timed out");
    };
    EXPECT_EQ(ask(Command::set("lr", 0.05)), "2 set lr=0.05 -> applied: lr 0.1 -> 0.05 @1");
    Snapshot b = control->snapshot();  // refreshed by that command's safe point
    EXPECT_EQ(b.state, RunState::paused);
    EXPECT_EQ(b.logs.at("lr"), 0.05);
    EXPECT_NEAR(b.elapsed, a.elapsed, 1e-6);  // the training clock stood still over 50 ms
    EXPECT_EQ(s.opt.lr(), 0.05);              // the trainer is blocked: reading is safe
    EXPECT_EQ(ask(Command::set("lr", -1)),
              "3 set lr=-1 -> rejected: [SGD] learning rate must be finite and >= 0, got -1 @1");
    EXPECT_EQ(ask(Command::set("betas", 0.9)),
              "4 set betas=0.9 -> rejected: SGD has no option 'betas' (options: lr, momentum, dampening, "
              "weight_decay, nesterov, maximize, lr_scale) @1");
    EXPECT_EQ(ask(Command::set("nesterov", 0.5)),
              "5 set nesterov=0.5 -> rejected: [SGD] param group 0: option 'nesterov' is a flag (0 or 1), got 0.5 @1");
    EXPECT_EQ(s.opt.lr(), 0.05);
    EXPECT_EQ(ask(Command::pause()), "6 pause -> rejected: already paused @1");
    EXPECT_EQ(ask(Command::set("momentum", 0.9)), "7 set momentum=0.9 -> applied: momentum 0 -> 0.9 @1");
    EXPECT_EQ(ask(Command::resume()), "8 resume -> applied: resumed @1");

    ASSERT_TRUE(gate->wait_reached());  // training runs again, now held at step 5
    uint64_t late_resume = control->submit(Command::resume());
    uint64_t stop = control->submit(Command::stop());
    gate->release();
    std::optional<CommandResult> r = control->wait(late_resume, kWait);
    EXPECT_EQ(r ? line(*r) : "timed out", "9 resume -> rejected: not paused @5");
    r = control->wait(stop, kWait);
    EXPECT_EQ(r ? line(*r) : "timed out", "10 stop -> applied: stopping @5");
    finished = true;
  });
  History history = trainer.fit(s.task, s.loader);
  driver.join();

  EXPECT_EQ(history.state, RunState::completed);  // a requested stop completes
  EXPECT_EQ(trainer.progress().global_step, 5);
  EXPECT_EQ(history.epochs.size(), 1u);  // stopped in the second epoch
  EXPECT_EQ(lr_log->lrs, (std::vector<double>{0.1, 0.05, 0.05, 0.05, 0.05}));
  EXPECT_EQ(s.opt.options().momentum, 0.9);
  EXPECT_EQ(control->state(), RunState::completed);
  Snapshot end = control->snapshot();
  EXPECT_EQ(end.state, RunState::completed);
  EXPECT_EQ(end.progress.global_step, 5);

  // After the end every command is answered at once.
  std::optional<CommandResult> late = control->wait(control->submit(Command::evaluate()), 0ms);
  ASSERT_TRUE(late.has_value());
  EXPECT_EQ(line(*late), "11 evaluate -> rejected: training has ended (completed) @5");

  std::vector<CommandResult> all = control->results();
  ASSERT_EQ(all.size(), 11u);
  for (size_t i = 0; i < all.size(); ++i) EXPECT_EQ(all[i].id, i + 1);  // in submission order
  EXPECT_EQ(lines(control->results(9)),
            (std::vector<std::string>{"10 stop -> applied: stopping @5",
                                      "11 evaluate -> rejected: training has ended (completed) @5"}));
}

// Queued before fit, applied in order at the first safe point (after step 1),
// in one thread: evaluate and checkpoint go to the first callback that takes
// them; set changes the optimizer; stop ends training there.
TEST(Control, QueuedCommandsRunCallbackHooksInOrder) {
  Rig s;
  auto decliner = std::make_shared<Saver>(false);  // save_now declines: asked, then the next one
  auto evaluator = std::make_shared<Evaluator>();
  auto saver = std::make_shared<Saver>(true);
  auto second = std::make_shared<Saver>(true);  // never reached: the first taker wins
  Trainer trainer(3, {decliner, evaluator, saver, second}, s.run());
  auto control = trainer.control();
  control->submit(Command::evaluate());
  control->submit(Command::checkpoint());
  control->submit(Command::set("weight_decay", 0.01));
  control->submit(Command::stop());
  control->submit(Command::stop());
  History history = trainer.fit(s.task, s.loader);

  EXPECT_EQ(lines(control->results()), (std::vector<std::string>{
                                           "1 evaluate -> applied: evaluated (val/accuracy: 0.5, val/loss: 0.25) @1",
                                           "2 checkpoint -> applied: saved @1",
                                           "3 set weight_decay=0.01 -> applied: weight_decay 0 -> 0.01 @1",
                                           "4 stop -> applied: stopping @1",
                                           "5 stop -> rejected: already stopping @1",
                                       }));
  EXPECT_EQ(evaluator->calls, 1);
  EXPECT_EQ(decliner->calls, 1);
  EXPECT_EQ(saver->calls, 1);
  EXPECT_EQ(second->calls, 0);
  EXPECT_EQ(s.opt.options().weight_decay, 0.01);
  EXPECT_EQ(history.state, RunState::completed);
  EXPECT_EQ(trainer.progress().global_step, 1);
  EXPECT_EQ(control->snapshot().logs.at("val/loss"), 0.25);
}

// No taker: rejected; a hook that throws: rejected with its error, and
// training goes on to max_steps.
TEST(Control, HookWithoutTakerOrThrowingIsRejected) {
  Rig s;
  auto failing = std::make_shared<Saver>(true, /*fail=*/true);
  Trainer trainer(3, {failing}, s.run(/*max_steps=*/3));
  auto control = trainer.control();
  control->submit(Command::evaluate());
  control->submit(Command::checkpoint());
  control->submit(Command::resume());
  History history = trainer.fit(s.task, s.loader);
  EXPECT_EQ(lines(control->results()), (std::vector<std::string>{
                                           "1 evaluate -> rejected: no validation callback @1",
                                           "2 checkpoint -> rejected: [Saver] disk full @1",
                                           "3 resume -> rejected: not paused @1",
                                       }));
  EXPECT_EQ(history.state, RunState::completed);
  EXPECT_EQ(trainer.progress().global_step, 3);

  Rig t;
  Trainer bare(1, {}, t.run(1));
  bare.control()->submit(Command::checkpoint());
  bare.fit(t.task, t.loader);
  EXPECT_EQ(lines(bare.control()->results()),
            (std::vector<std::string>{"1 checkpoint -> rejected: no checkpoint callback @1"}));
}

// A stop while paused ends the pause; the run completes at the paused step.
TEST(Control, StopWhilePaused) {
  Rig s;
  Trainer trainer(10, {}, s.run());
  auto control = trainer.control();
  uint64_t pause = control->submit(Command::pause());
  std::thread driver([&] {
    // "Forever" must not overflow into an immediate timeout; a Control that
    // never answered would still answer at the end of fit, rejecting it.
    std::optional<CommandResult> r = control->wait(pause, std::chrono::milliseconds::max());
    EXPECT_TRUE(r && r->applied);
    EXPECT_EQ(control->state(), RunState::paused);
    control->submit(Command::stop());
  });
  History history = trainer.fit(s.task, s.loader);
  driver.join();
  EXPECT_EQ(lines(control->results()),
            (std::vector<std::string>{"1 pause -> applied: paused @1", "2 stop -> applied: stopping @1"}));
  EXPECT_EQ(history.state, RunState::completed);
  EXPECT_EQ(trainer.progress().global_step, 1);
}

// A step that throws: the run fails, and what is still queued is rejected.
TEST(Control, FailedRunRejectsQueuedCommands) {
  struct Throwing : Task {
    using Task::Task;
    StepResult training_step(const data::Batch&) override { KILN_FAIL("step", "boom"); }
  };
  Rig s;
  Throwing task(s.model, s.opt);
  Trainer trainer(1, {}, s.run());
  auto control = trainer.control();
  control->submit(Command::pause());
  control->submit(Command::set("lr", 1));
  EXPECT_KILN_ERROR(trainer.fit(task, s.loader), "[step] boom");
  EXPECT_EQ(control->state(), RunState::failed);
  EXPECT_EQ(lines(control->results()),
            (std::vector<std::string>{"1 pause -> rejected: training has ended (failed) @0",
                                      "2 set lr=1 -> rejected: training has ended (failed) @0"}));
  EXPECT_EQ(s.opt.lr(), 0.1);
}

// Drives a standalone Control of capacity 3 from callbacks (begin, poll after
// each step, end), as the Trainer drives its own.
struct Driver : Callback {
  explicit Driver(Control& c) : c(c) {}
  void on_train_begin(Trainer& t) override { c.begin(t); }
  void on_step_end(Trainer& t, const StepResult&) override { c.poll(t); }
  void on_train_end(Trainer& t) override { c.end(t, RunState::completed); }
  Control& c;
};

TEST(Control, RingKeepsTheNewestAnswersInOrder) {
  Rig s;
  Control control(3);
  Trainer trainer(1, {std::make_shared<Driver>(control)}, s.run(2));
  control.submit(Command::set("lr", 0.2));
  control.submit(Command::set("lr", 0.3));
  control.submit(Command::resume());
  control.submit(Command::set("lrr", 1));
  control.submit(Command::set("lr", 0.4));
  trainer.fit(s.task, s.loader);

  std::vector<std::string> newest = {
      "3 resume -> rejected: not paused @1",
      "4 set lrr=1 -> rejected: SGD has no option 'lrr' (options: lr, momentum, dampening, weight_decay, "
      "nesterov, maximize, lr_scale) @1",
      "5 set lr=0.4 -> applied: lr 0.3 -> 0.4 @1",
  };
  EXPECT_EQ(lines(control.results()), newest);
  EXPECT_EQ(lines(control.results(4)), std::vector<std::string>(newest.begin() + 2, newest.end()));
  EXPECT_TRUE(control.results(5).empty());
  auto start = std::chrono::steady_clock::now();
  EXPECT_FALSE(control.wait(1, kWait).has_value());  // answered, but no longer in the ring: no waiting
  EXPECT_LT(std::chrono::steady_clock::now() - start, 1s);
  EXPECT_EQ(s.opt.lr(), 0.4);

  control.submit(Command::stop());  // after end: answered at once, the oldest drops out
  EXPECT_EQ(lines(control.results()),
            (std::vector<std::string>{newest[1], newest[2], "6 stop -> rejected: training has ended (completed) @2"}));
}

// What a poll costs when nothing is queued (the Trainer polls after every
// step): measured at a real safe point; the snapshot stays the same.
TEST(Control, EmptyPollCost) {
  struct Bench : Callback {
    void on_step_end(Trainer& t, const StepResult&) override {
      t.logs()["lr"] = 0.1;
      t.logs()["val/accuracy_of_a_long_name"] = 0.5;  // a key beyond the short-string buffer
      Control& c = *t.control();
      constexpr int kPolls = 200000;
      auto start = std::chrono::steady_clock::now();
      for (int i = 0; i < kPolls; ++i) c.poll(t);
      ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count() / kPolls;
      snapshot = c.snapshot();
      // The same number of keys, one of them new: the snapshot follows.
      t.logs().erase("lr");
      t.logs()["a"] = 7;
      c.poll(t);
      swapped = c.snapshot();
    }
    double ns = 0;
    Snapshot snapshot, swapped;
  };
  Rig s;
  auto bench = std::make_shared<Bench>();
  Trainer trainer(1, {bench}, s.run(1));
  trainer.fit(s.task, s.loader);
  std::printf("empty Control::poll: %.1f ns\n", bench->ns);
  RecordProperty("empty_poll_ns", std::to_string(bench->ns));
  EXPECT_EQ(bench->snapshot.state, RunState::running);
  EXPECT_EQ(bench->snapshot.progress.global_step, 1);
  EXPECT_EQ(bench->snapshot.logs.size(), 3u);
  EXPECT_EQ(bench->snapshot.logs.at("val/accuracy_of_a_long_name"), 0.5);
  EXPECT_EQ(bench->snapshot.logs.at("lr"), 0.1);
  std::map<std::string, double> swapped = bench->swapped.logs;
  EXPECT_EQ(swapped.size(), 3u);
  EXPECT_EQ(swapped.count("lr"), 0u);
  EXPECT_EQ(swapped.at("a"), 7);
  EXPECT_EQ(swapped.at("val/accuracy_of_a_long_name"), 0.5);
  EXPECT_LT(bench->ns, 20000.0);  // a loose bound: a lock and a few copies, not a sleep or an allocation storm
  EXPECT_TRUE(trainer.control()->results().empty());
}

// A loop of its own (no Trainer), as the RL jobs have: Control applies each
// command through the Controllable it implements, at the loop's safe points.
class CountingLoop final : public Controllable {
 public:
  explicit CountingLoop(optim::Optimizer& opt) : opt_(opt) {}
  RunState state() const override { return state_; }
  void set_state(RunState s) override { state_ = s; }
  io::Progress progress() const override { return {.epoch = 0, .global_step = step, .step_in_epoch = step}; }
  double elapsed() const override { return 0; }
  const std::map<std::string, double>& logs() const override { return logs_; }
  void request_stop() override { stop = true; }
  bool stop_requested() const override { return stop; }
  void pause_clock_begin() override { ++clock_pauses; }
  void pause_clock_end() override {}
  bool save_now() override { return ++saves, true; }
  bool evaluate_now() override {
    logs_["val/return"] = 42;
    return true;
  }
  std::string set_option(const std::string& name, double value) override {
    return set_optimizer_option(opt_, name, value, &logs_);
  }

  int64_t step = 0;
  bool stop = false;
  int saves = 0, clock_pauses = 0;

 private:
  optim::Optimizer& opt_;
  RunState state_ = RunState::running;
  std::map<std::string, double> logs_;
};

TEST(Control, DrivesALoopWithoutATrainer) {
  Rig rig;
  CountingLoop loop(rig.opt);
  Control control;
  control.begin(loop);
  for (Command c : {Command::checkpoint(), Command::evaluate(), Command::set("lr", 0.5), Command::set("nope", 1),
                    Command::pause(), Command::stop(), Command::pause()})
    control.submit(c);
  loop.step = 3;
  control.poll(loop);  // applies all seven: the stop ends the pause
  EXPECT_EQ(lines(control.results()),
            (std::vector<std::string>{
                "1 checkpoint -> applied: saved @3", "2 evaluate -> applied: evaluated (val/return: 42) @3",
                "3 set lr=0.5 -> applied: lr 0.1 -> 0.5 @3",
                "4 set nope=1 -> rejected: SGD has no option 'nope' (options: lr, momentum, dampening, weight_decay, "
                "nesterov, maximize, lr_scale) @3",
                "5 pause -> applied: paused @3", "6 stop -> applied: stopping @3",
                "7 pause -> rejected: training is stopping @3"}));
  EXPECT_EQ(loop.saves, 1);
  EXPECT_TRUE(loop.stop);
  EXPECT_EQ(rig.opt.get("lr"), 0.5);
  EXPECT_EQ(control.snapshot().logs.at("lr"), 0.5);
  EXPECT_EQ(control.snapshot().state, RunState::stopping);
  EXPECT_GE(loop.clock_pauses, 2);  // around the checkpoint and the evaluation
  control.end(loop, RunState::completed);
  EXPECT_EQ(control.state(), RunState::completed);
}

// Spec 002's live-control extras of issue 31 (docs/compile.md): mutability
// classes, RequestRecapture / RequestRebuild answered applied or rejected,
// and a state revision counting the applied commands.
TEST(Control, MutabilityRecaptureRebuildAndRevision) {
  EXPECT_EQ(mutability_of("lr"), Mutability::hot);
  EXPECT_EQ(mutability_of("q_lr"), Mutability::hot);
  EXPECT_EQ(mutability_of("batch_size"), Mutability::recapture);
  EXPECT_EQ(mutability_of("hidden"), Mutability::rebuild);
  EXPECT_EQ(mutability_of("seed"), Mutability::immutable);
  EXPECT_STREQ(to_string(Mutability::recapture), "Recapture");
  EXPECT_EQ(to_string(Command::request_recapture()), "request_recapture");
  EXPECT_EQ(to_string(Command::request_rebuild()), "request_rebuild");

  Rig rig;
  CountingLoop loop(rig.opt);  // compiles nothing: both requests are rejected
  Control control;
  control.begin(loop);
  EXPECT_EQ(control.snapshot().revision, 0u);
  for (Command c : {Command::set("lr", 0.25), Command::request_recapture(), Command::request_rebuild(),
                    Command::set("batch_size", 32), Command::set("seed", 3), Command::checkpoint()})
    control.submit(c);
  control.poll(loop);
  EXPECT_EQ(lines(control.results()),
            (std::vector<std::string>{
                "1 set lr=0.25 -> applied: lr 0.1 -> 0.25 @0",
                "2 request_recapture -> rejected: [request_recapture] this run has no compiled step (start it with "
                "--compile) @0",
                "3 request_rebuild -> rejected: [request_rebuild] this run cannot rebuild its compiled step (start "
                "it with --compile) @0",
                "4 set batch_size=32 -> rejected: 'batch_size' is Recapture: it cannot change during a run by set "
                "(RequestRecapture records the step again) @0",
                "5 set seed=3 -> rejected: 'seed' is Immutable: it cannot change during a run @0",
                "6 checkpoint -> applied: saved @0"}));
  control.poll(loop);
  EXPECT_EQ(control.snapshot().revision, 2u);  // the two applied commands
  control.end(loop, RunState::completed);
}

}  // namespace
}  // namespace kiln::train
