// ProgressBar: the spec's line, exact up to the clock fields; in place on a
// terminal, one line per epoch otherwise; validation values; resume mid-epoch.
#include "kiln/train/callbacks/progress_bar.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <regex>
#include <sstream>

#include "kiln/train/callbacks/validation.h"
#include "output_fixture.h"
#include "tests/support/train_testing.h"

namespace kiln::train {
namespace {

using testing::mask_times;
using testing::Rig;
using testing::ScriptedTask;

TEST(ProgressBar, FormatMs) {
  EXPECT_EQ(format_ms(0.69), "0.7");
  EXPECT_EQ(format_ms(0.65), "0.7");
  EXPECT_EQ(format_ms(12.34), "12.3");
  EXPECT_EQ(format_ms(0.1), "0.1");
  EXPECT_EQ(format_ms(0.0678), "0.07");  // the summary example: 0.07 ms/step
  EXPECT_EQ(format_ms(0.0042), "0.004");
  EXPECT_EQ(format_ms(0.0), "0.0");
  EXPECT_EQ(format_ms(0.0996), "0.1");  // not "0.10"
  EXPECT_EQ(format_ms(0.0096), "0.01");
  EXPECT_EQ(format_ms(0.094), "0.09");
}

TEST(ProgressBar, FormatRate) {
  EXPECT_EQ(format_rate(943680), "943.68K");
  EXPECT_EQ(format_rate(1.26e6), "1.26M");
  EXPECT_EQ(format_rate(60.4e6), "60.40M");
  EXPECT_EQ(format_rate(3.1e9), "3.10G");
  EXPECT_EQ(format_rate(512), "512.00");
  EXPECT_EQ(format_rate(999.996), "1.00K");  // not "1000.00"
  EXPECT_EQ(format_rate(0), "0.00");
}

TEST(ProgressBar, OneLinePerEpochWhenNotATerminal) {
  Rig<ScriptedTask> s;
  std::ostringstream out;
  Trainer trainer(2, {std::make_shared<ProgressBar>()}, {.out = &out, .tty = false});
  trainer.fit(s.task, s.loader);
  // Losses 2, 1.75, 1.5 | 1.25, 1, 0.75; correct 8, 4, 8 | 4, 8, 4 of 8.
  EXPECT_EQ(mask_times(out.str()),
            "epoch 1/2 3/3 |██████████| <time> · accuracy: 0.8333 · loss: 1.7500\n"
            "epoch 2/2 3/3 |██████████| <time> · accuracy: 0.6667 · loss: 1.0000\n");
  EXPECT_EQ(out.str().find('\r'), std::string::npos);
}

TEST(ProgressBar, RewritesOneLineOnATerminal) {
  Rig<ScriptedTask> s;
  std::ostringstream out;
  Trainer trainer(1, {std::make_shared<ProgressBar>(ProgressBarOptions{.refresh = 0})}, {.out = &out, .tty = true});
  trainer.fit(s.task, s.loader);
  // refresh 0: every step redraws; the last step draws once more at the epoch's end, with '\n'.
  EXPECT_EQ(mask_times(out.str()),
            "\repoch 1/1 1/3 |███░░░░░░░| <time> · accuracy: 1.0000 · loss: 2.0000\x1b[K"
            "\repoch 1/1 2/3 |██████░░░░| <time> · accuracy: 0.7500 · loss: 1.8750\x1b[K"
            "\repoch 1/1 3/3 |██████████| <time> · accuracy: 0.8333 · loss: 1.7500\x1b[K"
            "\repoch 1/1 3/3 |██████████| <time> · accuracy: 0.8333 · loss: 1.7500\x1b[K\n");
}

TEST(ProgressBar, RefreshLimitsRedrawsButAlwaysDrawsTheLastStep) {
  Rig<ScriptedTask> s;
  std::ostringstream out;
  Trainer trainer(2, {std::make_shared<ProgressBar>(ProgressBarOptions{.refresh = 3600})}, {.out = &out, .tty = true});
  trainer.fit(s.task, s.loader);
  // Each epoch: its first step, its last step, its end; not step 2 (the hour
  // since the last draw has not passed).
  const std::string text = mask_times(out.str());
  EXPECT_EQ(std::count(text.begin(), text.end(), '\r'), 6);
  EXPECT_EQ(text.find("2/3"), std::string::npos) << text;
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 2);
  EXPECT_TRUE(text.ends_with("\repoch 2/2 3/3 |██████████| <time> · accuracy: 0.6667 · loss: 1.0000\x1b[K\n")) << text;
}

std::shared_ptr<Validation> validation() {
  return std::make_shared<Validation>(std::make_shared<data::DataLoader>(
      testing::tiny_dataset(12), data::DataLoaderOptions{.batch_size = 6, .shuffle = false, .prefetch = 0}));
}

std::string mask_validation_seconds(const std::string& s) {
  static const std::regex seconds(R"( · \d+\.\d\ds\n)");
  return std::regex_replace(s, seconds, " · <s>\n");
}

TEST(ProgressBar, ValidationValuesAtTheEpochEnd) {
  // The scripted task never updates the model: both evaluations give the same values.
  Rig<ScriptedTask> s;
  std::ostringstream out;
  auto val = validation();
  Trainer(2, {val, std::make_shared<ProgressBar>()}, {.out = &out, .tty = false}).fit(s.task, s.loader);
  const std::string v = fmt::format("{:.4f} · accuracy {:.4f}", val->result().loss, val->result().accuracy);
  const std::string bar_v =
      fmt::format("val/loss: {:.4f} · val/accuracy: {:.4f}", val->result().loss, val->result().accuracy);
  const std::string expected = fmt::format(
      "validation: loss {0} · <s>\n"
      "epoch 1/2 3/3 |██████████| <time> · accuracy: 0.8333 · loss: 1.7500 · {1}\n"
      "validation: loss {0} · <s>\n"
      "epoch 2/2 3/3 |██████████| <time> · accuracy: 0.6667 · loss: 1.0000 · {1}\n",
      v, bar_v);
  EXPECT_EQ(mask_validation_seconds(mask_times(out.str())), expected);
}

TEST(ProgressBar, ValidationRegisteredAfterTheBarPrintsItsOwnLine) {
  // The bar's line is written before this epoch's evaluation: no stale values of the previous one on it.
  Rig<ScriptedTask> s;
  std::ostringstream out;
  auto val = validation();
  Trainer(2, {std::make_shared<ProgressBar>(), val}, {.out = &out, .tty = false}).fit(s.task, s.loader);
  const std::string v = fmt::format("{:.4f} · accuracy {:.4f}", val->result().loss, val->result().accuracy);
  const std::string expected = fmt::format(
      "epoch 1/2 3/3 |██████████| <time> · accuracy: 0.8333 · loss: 1.7500\n"
      "validation: loss {0} · <s>\n"
      "epoch 2/2 3/3 |██████████| <time> · accuracy: 0.6667 · loss: 1.0000\n"
      "validation: loss {0} · <s>\n",
      v);
  EXPECT_EQ(mask_validation_seconds(mask_times(out.str())), expected);
}

TEST(ProgressBar, NoAccuracyWhenStepsDoNotClassify) {
  struct Regression : Task {
    using Task::Task;
    StepResult training_step(const data::Batch& b) override { return {0.125, b.size(), -1}; }
  };
  Rig<Regression> s;
  std::ostringstream out;
  Trainer trainer(1, {std::make_shared<ProgressBar>()}, {.out = &out, .tty = false});
  trainer.fit(s.task, s.loader);
  EXPECT_EQ(mask_times(out.str()), "epoch 1/1 3/3 |██████████| <time> · loss: 0.1250\n");
}

TEST(ProgressBar, StoppedMidEpochStillEndsItsLine) {
  Rig<ScriptedTask> s;
  std::ostringstream out;
  Trainer stopped(2, {std::make_shared<ProgressBar>()}, {.max_steps = 4, .out = &out, .tty = false});
  stopped.fit(s.task, s.loader);
  EXPECT_EQ(mask_times(out.str()),
            "epoch 1/2 3/3 |██████████| <time> · accuracy: 0.8333 · loss: 1.7500\n"
            "epoch 2/2 1/3 |███░░░░░░░| <time> · accuracy: 0.5000 · loss: 1.2500\n");
}

TEST(ProgressBar, ResumesMidEpochAtItsStep) {
  const std::string ckpt = kiln::testing::fresh_dir() + "/step-4.safetensors";
  {
    Rig<> s;
    std::ostringstream out;
    Trainer trainer(2, {std::make_shared<testing::SaveAt>(4, ckpt)}, {.max_steps = 4, .out = &out, .tty = false});
    trainer.fit(s.task, s.loader);
  }
  Rig<> straight;
  std::ostringstream straight_out;
  Trainer full(2, {std::make_shared<ProgressBar>(ProgressBarOptions{.refresh = 0})},
               {.out = &straight_out, .tty = true});
  full.fit(straight.task, straight.loader);

  Rig<> resumed;
  std::ostringstream out;
  Trainer trainer(2, {std::make_shared<ProgressBar>(ProgressBarOptions{.refresh = 0})}, {.out = &out, .tty = true});
  trainer.fit(resumed.task, resumed.loader, ckpt);
  // The resumed leg draws steps 5 and 6 (epoch 2, steps 2/3 and 3/3) with the
  // whole epoch's running loss, as the uninterrupted run does.
  const std::string text = mask_times(out.str());
  const std::string full_text = mask_times(straight_out.str());
  ASSERT_EQ(std::count(text.begin(), text.end(), '\r'), 3);
  EXPECT_EQ(text.rfind("\repoch 2/2 2/3 |██████░░░░| <time> · accuracy: ", 0), 0u) << text;
  EXPECT_EQ(full_text.substr(full_text.size() - text.size()), text);
}

TEST(ProgressBar, BadOptions) {
  EXPECT_KILN_ERROR(ProgressBar(ProgressBarOptions{.refresh = -1}), "[ProgressBar] refresh must be");
}

}  // namespace
}  // namespace kiln::train
