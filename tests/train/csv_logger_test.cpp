// CsvLogger: the header and exact rows, extra log columns, append and
// truncate, and a resumed run's file equal to an uninterrupted run's.
#include "kiln/train/callbacks/csv_logger.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <sstream>

#include "output_fixture.h"
#include "tests/support/train_testing.h"

namespace kiln::train {
namespace {

using kiln::testing::read_bytes;
using kiln::testing::write_bytes;
using testing::Rig;
using testing::ScriptedTask;

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  std::istringstream in(s);
  while (std::getline(in, cur, sep)) out.push_back(cur);
  if (!s.empty() && s.back() == sep) out.push_back("");
  return out;
}

int64_t line_count(const std::string& s) { return std::count(s.begin(), s.end(), '\n'); }

// The file without its clock columns (elapsed_s, step_ms, samples_per_s:
// columns 6, 7, 8), which no two runs share; checks they are numbers >= 0.
std::string without_clock(const std::string& csv) {
  std::string out;
  bool header = true;
  for (const std::string& line : split(csv, '\n')) {
    if (line.empty()) continue;
    std::vector<std::string> cells = split(line, ',');
    std::string kept;
    for (size_t i = 0; i < cells.size(); ++i) {
      if (i >= 6 && i <= 8) {
        if (!header) {
          EXPECT_GE(std::stod(cells[i]), 0) << line;
        }
        continue;
      }
      kept += (kept.empty() && i == 0 ? "" : ",") + cells[i];
    }
    out += kept + "\n";
    header = false;
  }
  return out;
}

TEST(CsvLogger, OneRowPerStep) {
  const std::string path = kiln::testing::fresh_dir() + "/log.csv";
  Rig<ScriptedTask> s;
  std::ostringstream sink;
  auto csv = std::make_shared<CsvLogger>(path);
  Trainer(2, {csv}, {.out = &sink, .tty = false}).fit(s.task, s.loader);
  const std::string text = read_bytes(path);
  EXPECT_TRUE(text.starts_with("epoch,step,global_step,loss,accuracy,lr,elapsed_s,step_ms,samples_per_s\n"));
  EXPECT_EQ(without_clock(text),
            "epoch,step,global_step,loss,accuracy,lr\n"
            "1,1,1,2,1,0.1\n"
            "1,2,2,1.75,0.5,0.1\n"
            "1,3,3,1.5,1,0.1\n"
            "2,1,4,1.25,0.5,0.1\n"
            "2,2,5,1,1,0.1\n"
            "2,3,6,0.75,0.5,0.1\n");
  EXPECT_EQ(csv->rows(), 6);
  // Elapsed seconds grow; a step's rate is its 8 samples over its milliseconds.
  std::vector<std::string> lines = split(text, '\n');
  std::vector<std::string> r1 = split(lines[1], ','), r6 = split(lines[6], ',');
  EXPECT_LE(std::stod(r1[6]), std::stod(r6[6]));
  EXPECT_NEAR(std::stod(r6[8]) * std::stod(r6[7]) / 1e3, 8.0, 1e-6 * 8);
}

TEST(CsvLogger, LogKeyColumnsAndStepsThatDoNotClassify) {
  struct Regression : Task {
    using Task::Task;
    StepResult training_step(const data::Batch& b) override { return {0.1, b.size(), -1}; }
  };
  const std::string path = kiln::testing::fresh_dir() + "/log.csv";
  Rig<Regression> s;
  std::ostringstream sink;
  auto csv = std::make_shared<CsvLogger>(path, CsvLoggerOptions{.log_keys = {"val/loss"}});
  Trainer(2, {std::make_shared<testing::FakeValidation>(), csv}, {.out = &sink, .tty = false}).fit(s.task, s.loader);
  // val/loss is the latest value when the row is written: none during epoch
  // 1; an epoch's last row is written at its end, after the validation, so it
  // carries that epoch's value (the final one is in the file). accuracy is empty.
  EXPECT_EQ(without_clock(read_bytes(path)),
            "epoch,step,global_step,loss,accuracy,lr,val/loss\n"
            "1,1,1,0.1,,0.1,\n"
            "1,2,2,0.1,,0.1,\n"
            "1,3,3,0.1,,0.1,0.5\n"
            "2,1,4,0.1,,0.1,0.5\n"
            "2,2,5,0.1,,0.1,0.5\n"
            "2,3,6,0.1,,0.1,0.625\n");
}

TEST(CsvLogger, AppendOrTruncate) {
  const std::string path = kiln::testing::fresh_dir() + "/log.csv";
  std::ostringstream sink;
  {
    Rig<ScriptedTask> s;
    Trainer(1, {std::make_shared<CsvLogger>(path)}, {.out = &sink, .tty = false}).fit(s.task, s.loader);
  }
  const std::string one = read_bytes(path);
  {  // append (the default): a second run's rows follow, the header once
    Rig<ScriptedTask> s;
    Trainer(1, {std::make_shared<CsvLogger>(path)}, {.out = &sink, .tty = false}).fit(s.task, s.loader);
  }
  const std::string two = read_bytes(path);
  EXPECT_EQ(line_count(two), 1 + 3 + 3);
  EXPECT_EQ(without_clock(two), without_clock(one) + without_clock(one).substr(without_clock(one).find('\n') + 1));
  {  // append = false: a new file
    Rig<ScriptedTask> s;
    Trainer(1, {std::make_shared<CsvLogger>(path, CsvLoggerOptions{.append = false})}, {.out = &sink, .tty = false})
        .fit(s.task, s.loader);
  }
  EXPECT_EQ(without_clock(read_bytes(path)), without_clock(one));
}

TEST(CsvLogger, RefusesToAppendUnderAnotherHeader) {
  const std::string path = kiln::testing::fresh_dir() + "/log.csv";
  write_bytes(path, "a,b\n1,2\n");
  Rig<ScriptedTask> s;
  std::ostringstream sink;
  Trainer trainer(1, {std::make_shared<CsvLogger>(path)}, {.out = &sink, .tty = false});
  EXPECT_KILN_ERROR(trainer.fit(s.task, s.loader), "its header is 'a,b', not 'epoch,step,");
  EXPECT_EQ(read_bytes(path), "a,b\n1,2\n");
}

TEST(CsvLogger, BadArguments) {
  EXPECT_KILN_ERROR(CsvLogger(""), "[CsvLogger] path is empty");
  EXPECT_KILN_ERROR(CsvLogger("x.csv", {.log_keys = {"a,b"}}), "[CsvLogger] log key 'a,b' cannot be");
  CsvLogger csv("x.csv");
  EXPECT_KILN_ERROR(csv.load_state({{"bytes", "10"}, {"rows", "1"}}), "[CsvLogger] state has no 'global_step'");
}

// A run of 6 steps straight, against: a run that checkpoints at step `at` and
// is "killed" two steps later (its rows after the checkpoint stay in the
// file), then a fresh process resuming from the checkpoint.
void expect_resume_equals_straight(int64_t at, bool saver_first = false) {
  const std::string dir = kiln::testing::fresh_dir();
  const std::string straight_path = dir + "/straight.csv", path = dir + "/log.csv", ckpt = dir + "/ckpt.safetensors";
  std::ostringstream sink;
  {
    Rig<> s;
    Trainer(2, {std::make_shared<CsvLogger>(straight_path)}, {.out = &sink, .tty = false}).fit(s.task, s.loader);
  }
  {
    Rig<> s;
    std::shared_ptr<Callback> csv = std::make_shared<CsvLogger>(path);
    std::shared_ptr<Callback> save = std::make_shared<testing::SaveAt>(at, ckpt);
    Trainer(2, saver_first ? std::vector{save, csv} : std::vector{csv, save},
            {.max_steps = at + 2, .out = &sink, .tty = false})
        .fit(s.task, s.loader);
  }
  EXPECT_EQ(line_count(read_bytes(path)), 1 + at + 2);
  auto csv = std::make_shared<CsvLogger>(path, CsvLoggerOptions{.append = false});  // resuming continues anyway
  Rig<> s;
  Trainer(2, {csv}, {.out = &sink, .tty = false}).fit(s.task, s.loader, ckpt);
  EXPECT_EQ(csv->rows(), 6);
  EXPECT_EQ(without_clock(read_bytes(path)), without_clock(read_bytes(straight_path)));
}

TEST(CsvLogger, ResumeMidEpochEqualsAnUninterruptedRun) { expect_resume_equals_straight(4); }

TEST(CsvLogger, ResumeAtAnEpochEndEqualsAnUninterruptedRun) { expect_resume_equals_straight(3); }

// The checkpoint is taken in the step's on_step_end before the logger's own:
// the logger writes the step's row into the checkpointed length first.
TEST(CsvLogger, ResumeFromACheckpointTakenBeforeTheLoggersHook) { expect_resume_equals_straight(4, true); }

TEST(CsvLogger, ResumeFromAClassifyingCheckpointTakenBeforeTheLoggersHook) {
  // The same with the scripted task, whose rows are known: the row written by
  // state() has the step's loss and accuracy.
  const std::string dir = kiln::testing::fresh_dir();
  const std::string path = dir + "/log.csv", ckpt = dir + "/ckpt.safetensors";
  std::ostringstream sink;
  Rig<ScriptedTask> s;
  Trainer(2, {std::make_shared<testing::SaveAt>(2, ckpt), std::make_shared<CsvLogger>(path)},
          {.max_steps = 2, .out = &sink, .tty = false})
      .fit(s.task, s.loader);
  EXPECT_EQ(without_clock(read_bytes(path)),
            "epoch,step,global_step,loss,accuracy,lr\n"
            "1,1,1,2,1,0.1\n"
            "1,2,2,1.75,0.5,0.1\n");
}

TEST(CsvLogger, ResumeNeedsTheFile) {
  const std::string dir = kiln::testing::fresh_dir();
  const std::string path = dir + "/log.csv", ckpt = dir + "/ckpt.safetensors";
  std::ostringstream sink;
  {
    Rig<> s;
    Trainer(2, {std::make_shared<CsvLogger>(path), std::make_shared<testing::SaveAt>(4, ckpt)},
            {.out = &sink, .tty = false})
        .fit(s.task, s.loader);
  }
  const std::string full = read_bytes(path);
  write_bytes(path, full.substr(0, full.size() / 3));
  {
    Rig<> s;
    Trainer trainer(2, {std::make_shared<CsvLogger>(path)}, {.out = &sink, .tty = false});
    EXPECT_KILN_ERROR(trainer.fit(s.task, s.loader, ckpt), "cannot resume: '" + path + "' has ");
  }
  std::filesystem::remove(path);
  {
    Rig<> s;
    Trainer trainer(2, {std::make_shared<CsvLogger>(path)}, {.out = &sink, .tty = false});
    EXPECT_KILN_ERROR(trainer.fit(s.task, s.loader, ckpt), "cannot resume: '" + path + "' does not exist");
  }
}

}  // namespace
}  // namespace kiln::train
