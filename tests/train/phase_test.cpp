// PhaseCallback: the schedule preview, banners, set_phase and hooks on
// entering each phase, phase-relative epoch labels, resume into a phase.
#include "kiln/train/callbacks/phase.h"

#include <gtest/gtest.h>

#include <regex>
#include <sstream>

#include "kiln/optim/schedulers.h"
#include "kiln/train/callbacks/csv_logger.h"
#include "kiln/train/callbacks/lr_scheduler.h"
#include "kiln/train/callbacks/progress_bar.h"
#include "kiln/train/callbacks/summary.h"
#include "output_fixture.h"
#include "tests/support/train_testing.h"

namespace kiln::train {
namespace {

using testing::mask_times;
using testing::Rig;
using testing::ScriptedTask;

TEST(PhaseCallback, PreviewBannersAndLabels) {
  Rig<ScriptedTask> s;
  std::ostringstream out;
  std::vector<std::string> hooks;
  auto phases = std::make_shared<PhaseCallback>();
  phases->add_phase("warmup", 1, [&](Trainer& t) { hooks.push_back("warmup@" + std::to_string(t.progress().epoch)); })
      .add_phase("main", 2, [&](Trainer& t) { hooks.push_back("main@" + std::to_string(t.progress().epoch)); });
  Trainer(3, {phases, std::make_shared<ProgressBar>()}, {.out = &out, .tty = false}).fit(s.task, s.loader);
  EXPECT_EQ(mask_times(out.str()),
            "phase schedule:\n"
            "  1. warmup — 1 epoch (3 steps)\n"
            "  2. main — 2 epochs (6 steps)\n"
            "phase 1/2 — warmup · 1 epoch × 3 steps\n"
            "epoch 1/1 3/3 |██████████| <time> · accuracy: 0.8333 · loss: 1.7500\n"
            "phase 2/2 — main · 2 epochs × 3 steps\n"
            "epoch 1/2 3/3 |██████████| <time> · accuracy: 0.6667 · loss: 1.0000\n"
            "epoch 2/2 3/3 |██████████| <time> · accuracy: 0.8333 · loss: 0.2500\n");
  EXPECT_EQ(s.task.phases, (std::vector<std::string>{"warmup", "main"}));
  EXPECT_EQ(hooks, (std::vector<std::string>{"warmup@0", "main@1"}));
  EXPECT_EQ(phases->phase_of(0), 0);
  EXPECT_EQ(phases->phase_of(2), 1);
  EXPECT_KILN_ERROR(phases->phase_of(3), "[PhaseCallback] epoch 4 is past the last phase (the phases cover 3 epochs)");
}

TEST(PhaseCallback, PhasesMustCoverMaxEpochs) {
  Rig<ScriptedTask> s;
  std::ostringstream out;
  auto phases = std::make_shared<PhaseCallback>();
  phases->add_phase("warmup", 1).add_phase("main", 2);
  Trainer trainer(4, {phases}, {.out = &out, .tty = false});
  EXPECT_KILN_ERROR(trainer.fit(s.task, s.loader),
                    "[PhaseCallback] the phases cover 3 epochs but the trainer runs max_epochs = 4");
  EXPECT_EQ(s.task.calls, 0);
  Trainer none(1, {std::make_shared<PhaseCallback>()}, {.out = &out, .tty = false});
  EXPECT_KILN_ERROR(none.fit(s.task, s.loader), "[PhaseCallback] no phases");
}

TEST(PhaseCallback, BadPhases) {
  PhaseCallback p;
  EXPECT_KILN_ERROR(p.add_phase("", 1), "[PhaseCallback.add_phase] phase 1 has an empty name");
  EXPECT_KILN_ERROR(p.add_phase("main", 0),
                    "[PhaseCallback.add_phase] phase 'main' must have at least one epoch, got 0");
  EXPECT_TRUE(p.phases().empty());
}

TEST(PhaseCallback, ResumeEntersThePhaseItResumesIn) {
  const std::string ckpt = kiln::testing::fresh_dir() + "/ckpt.safetensors";
  std::ostringstream sink;
  auto make = [] {
    auto p = std::make_shared<PhaseCallback>();
    p->add_phase("warmup", 1).add_phase("main", 2);
    return p;
  };
  {  // checkpoint mid-way through the last epoch (epoch 3, step 7)
    Rig<ScriptedTask> s;
    Trainer(3, {make(), std::make_shared<testing::SaveAt>(7, ckpt)}, {.max_steps = 7, .out = &sink, .tty = false})
        .fit(s.task, s.loader);
  }
  Rig<ScriptedTask> s;
  std::ostringstream out;
  Trainer(3, {make(), std::make_shared<ProgressBar>()}, {.out = &out, .tty = false}).fit(s.task, s.loader, ckpt);
  // The scripted task restarts its losses at 2 (its counter is no checkpointed
  // state); what matters here is the banner, the label and set_phase.
  const std::string text = mask_times(out.str());
  EXPECT_TRUE(
      text.starts_with("phase schedule:\n  1. warmup — 1 epoch (3 steps)\n  2. main — 2 epochs (6 steps)\n"
                       "phase 2/2 — main · 2 epochs × 3 steps\nepoch 2/2 3/3 |██████████| <time> · "))
      << text;
  EXPECT_EQ(s.task.phases, (std::vector<std::string>{"main"}));
}

TEST(PhaseCallback, WithTheOtherOutputCallbacks) {
  // The five output callbacks of one run, in the order docs/callbacks.md gives.
  const std::string csv_path = kiln::testing::fresh_dir() + "/log.csv";
  Rig<ScriptedTask> s;
  std::ostringstream out;
  auto phases = std::make_shared<PhaseCallback>();
  phases->add_phase("warmup", 1).add_phase("main", 1);
  auto sched = std::make_shared<optim::StepScheduler>(optim::StepOptions{.lr = 0.1, .step_size = 1, .gamma = 0.5});
  Trainer(2,
          {phases, std::make_shared<LRSchedulerCallback>(sched, LRSchedulerCallback::Interval::epoch),
           std::make_shared<CsvLogger>(csv_path), std::make_shared<ProgressBar>(), std::make_shared<Summary>()},
          {.out = &out, .tty = false})
      .fit(s.task, s.loader);
  static const std::regex summary_times(
      R"(Wall: \d+\.\d+ ms/step · p50 \d+\.\d{3} · p95 \d+\.\d{3} · \d+\.\d\d[KMGTP]? sample/s\nrun: \d+\.\d\ds)");
  EXPECT_EQ(std::regex_replace(mask_times(out.str()), summary_times, "<times>"),
            "phase schedule:\n"
            "  1. warmup — 1 epoch (3 steps)\n"
            "  2. main — 1 epoch (3 steps)\n"
            "phase 1/2 — warmup · 1 epoch × 3 steps\n"
            "epoch 1/1 3/3 |██████████| <time> · accuracy: 0.8333 · loss: 1.7500\n"
            "phase 2/2 — main · 1 epoch × 3 steps\n"
            "epoch 1/1 3/3 |██████████| <time> · accuracy: 0.6667 · loss: 1.0000\n"
            "summary: loss: initial 2.0000 · final 0.7500 · mean 1.3750\n"
            "<times> · 6 steps · batch 8\n");
  // The CSV's lr column: 0.1 in the first epoch, 0.05 in the second.
  const std::string csv = kiln::testing::read_bytes(csv_path);
  EXPECT_NE(csv.find("\n1,3,3,1.5,1,0.1,"), std::string::npos) << csv;
  EXPECT_NE(csv.find("\n2,1,4,1.25,0.5,0.05,"), std::string::npos) << csv;
}

}  // namespace
}  // namespace kiln::train
