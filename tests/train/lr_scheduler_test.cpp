// LRSchedulerCallback: the optimizer's lr at every step equals the scheduler's
// own sequence, per step or per epoch, across a resume, and with
// ReduceOnPlateau driven by a logged metric.
#include "kiln/train/callbacks/lr_scheduler.h"

#include <gtest/gtest.h>

#include <sstream>

#include "kiln/optim/schedulers.h"
#include "output_fixture.h"
#include "tests/support/train_testing.h"

namespace kiln::train {
namespace {

using testing::Rig;
using testing::ScriptedTask;
using Interval = LRSchedulerCallback::Interval;

// The optimizer's lr as each step begins (the lr the step uses).
struct RecordLr : Callback {
  std::vector<double> lrs;
  void on_step_begin(Trainer& t) override { lrs.push_back(t.task().optimizer().lr()); }
};

std::shared_ptr<optim::LRScheduler> cosine() {
  return std::make_shared<optim::CosineScheduler>(
      optim::CosineOptions{.max_lr = 0.1, .min_lr = 0.01, .total_steps = 6});
}

TEST(LRSchedulerCallback, EveryStepFollowsTheScheduler) {
  Rig<ScriptedTask> s(/*lr=*/123.0);  // overwritten by the scheduler before the first step
  auto record = std::make_shared<RecordLr>();
  std::ostringstream sink;
  History h = Trainer(2, {std::make_shared<LRSchedulerCallback>(cosine()), record}, {.out = &sink, .tty = false})
                  .fit(s.task, s.loader);
  auto reference = cosine();
  ASSERT_EQ(record->lrs.size(), 6u);
  for (int64_t g = 0; g < 6; ++g) EXPECT_EQ(record->lrs[g], reference->lr(g)) << "step " << g;
  EXPECT_EQ(h.epochs[1].at("lr"), reference->lr(6));
  EXPECT_EQ(s.opt.lr(), reference->lr(6));
}

TEST(LRSchedulerCallback, EveryEpoch) {
  Rig<ScriptedTask> s;
  auto record = std::make_shared<RecordLr>();
  auto sched = std::make_shared<optim::StepScheduler>(optim::StepOptions{.lr = 0.1, .step_size = 1, .gamma = 0.5});
  std::ostringstream sink;
  History h =
      Trainer(2, {std::make_shared<LRSchedulerCallback>(sched, Interval::epoch), record}, {.out = &sink, .tty = false})
          .fit(s.task, s.loader);
  EXPECT_EQ(record->lrs, (std::vector<double>{0.1, 0.1, 0.1, 0.05, 0.05, 0.05}));
  EXPECT_EQ(h.epochs[0].at("lr"), 0.05);
  EXPECT_EQ(h.epochs[1].at("lr"), 0.025);
  EXPECT_EQ(sched->last_step(), 2);
}

TEST(LRSchedulerCallback, ReduceOnPlateauWithAMetric) {
  Rig<ScriptedTask> s;
  auto record = std::make_shared<RecordLr>();
  auto sched = std::make_shared<optim::ReduceOnPlateauScheduler>(
      optim::ReduceOnPlateauOptions{.lr = 0.1, .factor = 0.5, .patience = 0});
  std::ostringstream sink;
  // val/loss 0.5, 0.625, 0.75: the second and third epochs do not improve.
  History h = Trainer(3,
                      {std::make_shared<testing::FakeValidation>(),
                       std::make_shared<LRSchedulerCallback>(sched, Interval::epoch, "val/loss"), record},
                      {.out = &sink, .tty = false})
                  .fit(s.task, s.loader);
  EXPECT_EQ(record->lrs, (std::vector<double>{0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.05, 0.05, 0.05}));
  EXPECT_EQ(h.epochs[2].at("lr"), 0.025);
}

TEST(LRSchedulerCallback, ReduceOnPlateauNeedsItsMetric) {
  Rig<ScriptedTask> s;
  auto sched = std::make_shared<optim::ReduceOnPlateauScheduler>(optim::ReduceOnPlateauOptions{});
  std::ostringstream sink;
  Trainer trainer(1, {std::make_shared<LRSchedulerCallback>(sched, Interval::epoch)}, {.out = &sink, .tty = false});
  EXPECT_KILN_ERROR(trainer.fit(s.task, s.loader),
                    "[LRSchedulerCallback] ReduceOnPlateauScheduler monitors 'val/loss'");
  EXPECT_KILN_ERROR(LRSchedulerCallback(sched, Interval::step), "use Interval::epoch");
  EXPECT_KILN_ERROR(LRSchedulerCallback(nullptr), "[LRSchedulerCallback] scheduler is null");
}

// 6 steps straight against: 4 steps + checkpoint (+ 1 step lost), then a
// fresh process resuming. saver_first: the checkpoint callback runs before the
// scheduler callback at step 4, so the scheduler is saved one step behind and
// must be caught up on resume.
void expect_resume_follows_the_schedule(bool saver_first) {
  const std::string ckpt = kiln::testing::fresh_dir() + "/ckpt.safetensors";
  std::ostringstream sink;
  Rig<> straight;
  auto all = std::make_shared<RecordLr>();
  Trainer(2, {std::make_shared<LRSchedulerCallback>(cosine()), all}, {.out = &sink, .tty = false})
      .fit(straight.task, straight.loader);
  {
    Rig<> s;
    auto lr = std::make_shared<LRSchedulerCallback>(cosine());
    auto save = std::make_shared<testing::SaveAt>(4, ckpt);
    std::vector<std::shared_ptr<Callback>> cbs = saver_first ? std::vector<std::shared_ptr<Callback>>{save, lr}
                                                             : std::vector<std::shared_ptr<Callback>>{lr, save};
    Trainer(2, cbs, {.max_steps = 5, .out = &sink, .tty = false}).fit(s.task, s.loader);
  }
  Rig<> s(/*lr=*/123.0);
  auto rest = std::make_shared<RecordLr>();
  auto sched = cosine();
  Trainer(2, {std::make_shared<LRSchedulerCallback>(sched), rest}, {.out = &sink, .tty = false})
      .fit(s.task, s.loader, ckpt);
  EXPECT_EQ(rest->lrs, (std::vector<double>{all->lrs[4], all->lrs[5]}));
  EXPECT_EQ(sched->last_step(), 6);
  EXPECT_TRUE(kiln::testing::equal(s.model->weight, straight.model->weight));
}

TEST(LRSchedulerCallback, ResumeContinuesTheSchedule) { expect_resume_follows_the_schedule(false); }

TEST(LRSchedulerCallback, ResumeCatchesUpASchedulerSavedBeforeItsStep) { expect_resume_follows_the_schedule(true); }

}  // namespace
}  // namespace kiln::train
