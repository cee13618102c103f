// Summary: the spec's three lines, what they count, and a resumed run's
// summary covering the whole run.
#include "kiln/train/callbacks/summary.h"

#include <gtest/gtest.h>

#include <regex>
#include <sstream>

#include "output_fixture.h"
#include "tests/support/train_testing.h"

namespace kiln::train {
namespace {

using testing::Rig;
using testing::ScriptedTask;

io::State spec_example_state() {
  // The spec's example run: 4686 steps of batch 64 in 0.32 s.
  return {{"steps", "4686"},         {"samples", "299904"},      {"seconds", "0.32"},
          {"loss_sum", "2254.8952"}, {"initial_loss", "2.6558"}, {"final_loss", "0.2965"}};
}

TEST(Summary, SpecFormat) {
  Summary s;
  s.load_state(spec_example_state());
  EXPECT_EQ(s.text(64, 64),
            "summary: loss: initial 2.6558 · final 0.2965 · mean 0.4812\n"
            "Wall: 0.07 ms/step · 937.20K sample/s · 59.98M token/s\n"
            "run: 0.32s · 4686 steps · batch 64 · sequence 64 token/sample\n");
  // Not a sequence workload: no token/s, no sequence.
  EXPECT_EQ(s.text(64, 0),
            "summary: loss: initial 2.6558 · final 0.2965 · mean 0.4812\n"
            "Wall: 0.07 ms/step · 937.20K sample/s\n"
            "run: 0.32s · 4686 steps · batch 64\n");
  EXPECT_EQ(Summary().text(64, 0), "summary: no steps\n");
}

TEST(Summary, StateRoundTrips) {
  Summary a;
  a.load_state(spec_example_state());
  Summary b;
  b.load_state(a.state());
  EXPECT_EQ(b.state(), a.state());
  EXPECT_EQ(b.steps(), 4686);
  EXPECT_EQ(b.samples(), 299904);
  EXPECT_EQ(b.seconds(), 0.32);
  EXPECT_EQ(b.initial_loss(), 2.6558);
}

TEST(Summary, BadState) {
  Summary s;
  io::State st = spec_example_state();
  st.erase("loss_sum");
  EXPECT_KILN_ERROR(s.load_state(st), "[Summary] state has no 'loss_sum'");
  st = spec_example_state();
  st["steps"] = "-3";
  EXPECT_KILN_ERROR(s.load_state(st), "[Summary] state has steps -3");
  st = spec_example_state();
  st["seconds"] = "inf";
  EXPECT_KILN_ERROR(s.load_state(st), "[Summary] state 'seconds' is inf");
  EXPECT_EQ(s.steps(), 0);  // nothing changed
}

TEST(Summary, PrintedAtTrainEnd) {
  Rig<ScriptedTask> s;
  std::ostringstream out;
  auto summary = std::make_shared<Summary>();
  Trainer trainer(2, {summary}, {.out = &out, .tty = false});
  trainer.fit(s.task, s.loader);
  // Step losses 2, 1.75, ..., 0.75: mean 1.375.
  static const std::regex times(R"(Wall: \d+\.\d+ ms/step · \d+\.\d\d[KMGTP]? sample/s\nrun: \d+\.\d\ds)");
  EXPECT_EQ(std::regex_replace(out.str(), times, "<times>"),
            "summary: loss: initial 2.0000 · final 0.7500 · mean 1.3750\n"
            "<times> · 6 steps · batch 8\n");
  EXPECT_EQ(summary->steps(), 6);
  EXPECT_EQ(summary->samples(), 48);
  EXPECT_GT(summary->seconds(), 0);
}

TEST(Summary, ASecondFreshFitCountsOnlyItself) {
  Rig<ScriptedTask> s;
  std::ostringstream out;
  auto summary = std::make_shared<Summary>();
  Trainer(2, {summary}, {.out = &out, .tty = false}).fit(s.task, s.loader);
  Trainer(1, {summary}, {.out = &out, .tty = false}).fit(s.task, s.loader);
  // The task's script goes on: steps 7-9 report 0.5, 0.25, 0.
  EXPECT_EQ(summary->steps(), 3);
  EXPECT_EQ(summary->samples(), 24);
  EXPECT_EQ(summary->initial_loss(), 0.5);
  EXPECT_EQ(summary->final_loss(), 0.0);
  EXPECT_EQ(summary->mean_loss(), 0.25);
}

TEST(Summary, TokensForSequenceWorkloads) {
  Rig<ScriptedTask> s;
  std::ostringstream out;
  Trainer trainer(1, {std::make_shared<Summary>()}, {.tokens_per_sample = 16, .out = &out, .tty = false});
  trainer.fit(s.task, s.loader);
  EXPECT_NE(out.str().find(" token/s\nrun: "), std::string::npos) << out.str();
  EXPECT_TRUE(out.str().ends_with(" · 3 steps · batch 8 · sequence 16 token/sample\n")) << out.str();
}

TEST(Summary, ResumedRunCoversTheWholeRun) {
  const std::string ckpt = kiln::testing::fresh_dir() + "/step-4.safetensors";
  Rig<> straight;
  auto full = std::make_shared<Summary>();
  std::ostringstream sink;
  Trainer(2, {full}, {.out = &sink, .tty = false}).fit(straight.task, straight.loader);

  {  // a leg that checkpoints at step 4 and dies after step 5
    Rig<> s;
    Trainer(2, {std::make_shared<Summary>(), std::make_shared<testing::SaveAt>(4, ckpt)},
            {.max_steps = 5, .out = &sink, .tty = false})
        .fit(s.task, s.loader);
  }
  Rig<> s;
  auto resumed = std::make_shared<Summary>();
  Trainer(2, {resumed}, {.out = &sink, .tty = false}).fit(s.task, s.loader, ckpt);
  EXPECT_EQ(resumed->steps(), 6);
  EXPECT_EQ(resumed->samples(), 48);
  EXPECT_EQ(resumed->initial_loss(), full->initial_loss());
  EXPECT_EQ(resumed->final_loss(), full->final_loss());
  EXPECT_EQ(resumed->mean_loss(), full->mean_loss());
}

}  // namespace
}  // namespace kiln::train
