// CheckpointManager: rotation, the best checkpoint (min/max, min_delta, NaN),
// reopening in a new manager, recovery from interrupted saves (unrecorded,
// broken and missing checkpoints, stale temporaries) and restoring values.
#include "kiln/io/checkpoint_manager.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "kiln/core/atomic_file.h"
#include "kiln/io/read_file.h"
#include "tests/support/io_testing.h"
#include "tests/io/manager_worker.h"

namespace kiln::io {
namespace {
namespace fs = std::filesystem;
using testing::equal;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

/// A fresh, empty folder named after the running test.
std::string fresh_dir(const std::string& suffix = "") {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string dir = (kiln::testing::scratch_root() / "kiln_checkpoint_manager" / (info->name() + suffix)).string();
  fs::remove_all(dir);
  return dir;
}

/// The names of the files in `dir`.
std::set<std::string> files_in(const std::string& dir) {
  std::set<std::string> out;
  for (const auto& item : fs::directory_iterator(dir)) out.insert(item.path().filename().string());
  return out;
}

std::vector<int64_t> steps_of(const CheckpointManager& m) {
  std::vector<int64_t> out;
  for (const auto& e : m.entries()) out.push_back(e.step);
  return out;
}

/// A tiny model whose every weight is one value, so a file's content is
/// recognisable; the checkpoint holds it and the progress.
struct Trainee {
  Rngs rngs{{"params", 0u}};
  nn::Linear model{2, 2, rngs};
  Progress progress;
  Checkpoint ckpt;
  Trainee() { ckpt.model(model).progress(progress); }

  void set(double v, int64_t step) {
    model.load_state_dict({{"weight", full({2, 2}, v)}, {"bias", full({2}, v)}});
    progress.global_step = step;
  }
  bool holds(double v) const {
    return equal(model.weight.value(), full({2, 2}, v)) && equal(model.bias.value(), full({2}, v));
  }
  /// Saves weights `v` at `step`.
  std::string save(CheckpointManager& m, int64_t step, std::optional<double> metric = std::nullopt) {
    set(double(step), step);
    return m.save(ckpt, step, metric);
  }
};

TEST(CheckpointManager, KeepLastTwoOverFiveSavesLeavesExactlyTheNewestTwo) {
  std::string dir = fresh_dir();
  CheckpointManager m(dir, {.keep_last = 2, .keep_best = false});
  EXPECT_EQ(m.latest(), std::nullopt);
  EXPECT_TRUE(m.entries().empty());
  Trainee run;
  for (int64_t step : {10, 20, 30, 40, 50}) {
    std::string path = run.save(m, step);
    EXPECT_EQ(path, dir + "/step-" + std::to_string(step) + ".safetensors");
  }
  EXPECT_EQ(files_in(dir), (std::set<std::string>{"checkpoints.json", "step-40.safetensors", "step-50.safetensors"}));
  EXPECT_EQ(steps_of(m), (std::vector<int64_t>{40, 50}));
  EXPECT_EQ(m.latest(), dir + "/step-50.safetensors");
  EXPECT_EQ(m.best(), std::nullopt);  // no metric was ever given
  EXPECT_EQ(m.best_metric(), std::nullopt);
  EXPECT_TRUE(m.problems().empty());
}

TEST(CheckpointManager, TheBestIsKeptWhenOlderAndDeletedWithoutKeepBest) {
  for (bool keep_best : {true, false}) {
    std::string dir = fresh_dir();
    CheckpointManager m(dir, {.keep_last = 2, .keep_best = keep_best});
    Trainee run;
    const double losses[] = {0.5, 0.1, 0.3, 0.4, 0.2};
    for (int64_t step = 1; step <= 5; ++step) run.save(m, step, losses[step - 1]);
    EXPECT_EQ(m.best_metric(), 0.1);  // the best seen, kept or not
    if (keep_best) {
      EXPECT_EQ(steps_of(m), (std::vector<int64_t>{2, 4, 5}));
      EXPECT_EQ(m.best(), dir + "/step-2.safetensors");
      EXPECT_EQ(files_in(dir), (std::set<std::string>{"checkpoints.json", "step-2.safetensors", "step-4.safetensors",
                                                      "step-5.safetensors"}));
    } else {
      EXPECT_EQ(steps_of(m), (std::vector<int64_t>{4, 5}));
      EXPECT_EQ(m.best(), std::nullopt);
      EXPECT_FALSE(m.is_better(0.15));  // still measured against 0.1
    }
    // Entries carry their metrics, in step order.
    auto entries = m.entries();
    EXPECT_EQ(entries.back().metric, 0.2);
    EXPECT_EQ(entries.back().path, dir + "/step-5.safetensors");
  }
}

TEST(CheckpointManager, ANewBestReleasesTheOldOneToRotation) {
  std::string dir = fresh_dir();
  CheckpointManager m(dir, {.keep_last = 1});
  Trainee run;
  run.save(m, 1, 0.5);
  run.save(m, 2, 0.9);
  run.save(m, 3, 0.7);
  EXPECT_EQ(steps_of(m), (std::vector<int64_t>{1, 3}));
  run.save(m, 4, 0.4);  // the new best: step 1 is no longer protected
  EXPECT_EQ(steps_of(m), (std::vector<int64_t>{4}));
  EXPECT_EQ(m.best(), dir + "/step-4.safetensors");
  EXPECT_EQ(files_in(dir), (std::set<std::string>{"checkpoints.json", "step-4.safetensors"}));
}

TEST(CheckpointManager, MaxModeKeepsTheHighestMetric) {
  std::string dir = fresh_dir();
  CheckpointManager m(dir, {.keep_last = 1, .monitor = "val/accuracy", .mode = MetricMode::max});
  Trainee run;
  run.save(m, 1, 0.60);
  run.save(m, 2, 0.85);
  run.save(m, 3, 0.70);
  run.save(m, 4, 0.80);
  EXPECT_EQ(m.best(), dir + "/step-2.safetensors");
  EXPECT_EQ(m.best_metric(), 0.85);
  EXPECT_EQ(steps_of(m), (std::vector<int64_t>{2, 4}));
  EXPECT_TRUE(m.is_better(0.86));
  EXPECT_FALSE(m.is_better(0.85));  // a tie is no improvement
  EXPECT_FALSE(m.is_better(0.1));
}

TEST(CheckpointManager, MinDeltaAndTies) {
  CheckpointManager m(fresh_dir(), {.min_delta = 0.25});
  // Before any best, any finite metric improves; +inf does not in min mode (Keras).
  EXPECT_TRUE(m.is_better(1e300));
  EXPECT_FALSE(m.is_better(kInf));
  Trainee run;
  run.save(m, 1, 0.5);
  EXPECT_FALSE(m.is_better(0.3));   // better, but not by more than 0.25
  EXPECT_FALSE(m.is_better(0.25));  // exactly min_delta is not more
  EXPECT_TRUE(m.is_better(0.24));
  run.save(m, 2, 0.3);
  EXPECT_EQ(m.best_metric(), 0.5);
  EXPECT_EQ(m.best(), m.entries()[0].path);
  run.save(m, 3, 0.2);
  EXPECT_EQ(m.best_metric(), 0.2);
  EXPECT_EQ(m.best(), m.entries()[2].path);

  CheckpointManager plain(fresh_dir("_plain"));
  run.save(plain, 1, 0.5);
  run.save(plain, 2, 0.5);  // a tie keeps the earlier one
  EXPECT_EQ(plain.best(), plain.entries()[0].path);
  EXPECT_TRUE(plain.is_better(std::nextafter(0.5, 0.0)));
}

TEST(CheckpointManager, NaNIsNeverAnImprovement) {
  for (MetricMode mode : {MetricMode::min, MetricMode::max}) {
    CheckpointManager m(fresh_dir(), {.keep_last = 1, .mode = mode});
    EXPECT_FALSE(m.is_better(kNaN));
    Trainee run;
    run.save(m, 1, kNaN);  // even the first metric
    EXPECT_EQ(m.best_metric(), std::nullopt);
    run.save(m, 2, 1.0);
    run.save(m, 3, kNaN);
    EXPECT_EQ(m.best_metric(), 1.0);
    EXPECT_EQ(m.best(), m.entries()[0].path);
    EXPECT_EQ(steps_of(m), (std::vector<int64_t>{2, 3}));
    EXPECT_TRUE(std::isnan(*m.entries()[1].metric));
    // The NaN survives the record (JSON has no NaN).
    CheckpointManager again(m.dir(), m.options());
    EXPECT_TRUE(std::isnan(*again.entries()[1].metric));
    EXPECT_EQ(again.best_metric(), 1.0);
  }
}

TEST(CheckpointManager, MetricsMayComeInSomeSavesOnly) {
  CheckpointManager m(fresh_dir(), {.keep_last = 2});
  Trainee run;
  run.save(m, 1, 0.3);
  run.save(m, 2);  // a step-interval save without validation
  run.save(m, 3);
  run.save(m, 4, 0.2);
  auto e = m.entries();
  ASSERT_EQ(steps_of(m), (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(e[0].metric, std::nullopt);
  EXPECT_EQ(e[1].metric, 0.2);
  EXPECT_EQ(m.best(), e[1].path);
}

TEST(CheckpointManager, ANewManagerOnTheFolderFindsLatestAndBestAndGoesOn) {
  std::string dir = fresh_dir();
  CheckpointManagerOptions options{.keep_last = 2};
  {
    CheckpointManager m(dir, options);
    Trainee run;
    run.save(m, 100, 0.25);
    run.save(m, 200, 0.5);
    run.save(m, 300, 0.75);
  }
  CheckpointManager m(dir, options);
  EXPECT_TRUE(m.problems().empty());
  EXPECT_EQ(m.latest(), dir + "/step-300.safetensors");
  EXPECT_EQ(m.best(), dir + "/step-100.safetensors");
  EXPECT_EQ(m.best_metric(), 0.25);
  EXPECT_EQ(steps_of(m), (std::vector<int64_t>{100, 200, 300}));
  EXPECT_EQ(m.entries()[1].metric, 0.5);
  // Rotation and the best go on where they were.
  Trainee run;
  run.save(m, 400, 0.3);
  EXPECT_EQ(steps_of(m), (std::vector<int64_t>{100, 300, 400}));
  EXPECT_EQ(files_in(dir), (std::set<std::string>{"checkpoints.json", "step-100.safetensors", "step-300.safetensors",
                                                  "step-400.safetensors"}));

  // Another metric or mode on the same folder is a mistake, not a fresh start.
  EXPECT_KILN_ERROR(CheckpointManager(dir, {.monitor = "val/accuracy"}),
                    "its checkpoints are ranked by 'val/loss' (min), but this manager monitors 'val/accuracy' (min)");
  EXPECT_KILN_ERROR(CheckpointManager(dir, {.mode = MetricMode::max}), "'val/loss' (max)");
}

TEST(CheckpointManager, SavingAStepAgainReplacesItAndMakesItTheLatest) {
  std::string dir = fresh_dir();
  CheckpointManager m(dir, {.keep_last = 3});
  Trainee run;
  for (int64_t step = 1; step <= 5; ++step) run.save(m, step, 1.0 / double(step));  // best: step 5
  // A run resumed from step 3 saves step 4 again: that is now the latest, not step 5.
  run.set(44.0, 4);
  m.save(run.ckpt, 4, 0.9);
  EXPECT_EQ(m.latest(), dir + "/step-4.safetensors");
  EXPECT_EQ(steps_of(m), (std::vector<int64_t>{3, 4, 5}));
  EXPECT_EQ(m.entries()[1].metric, 0.9);
  run.set(0.0, 0);
  ASSERT_TRUE(m.restore_latest(run.ckpt));
  EXPECT_TRUE(run.holds(44.0));
  EXPECT_EQ(run.progress.global_step, 4);
  // Overwriting the best one (step 5, 0.2): the best is recomputed from what is there.
  m.save(run.ckpt, 5, 0.95);
  EXPECT_EQ(m.best(), dir + "/step-3.safetensors");
  EXPECT_EQ(m.best_metric(), 1.0 / 3.0);
  // Save order survives a reopen.
  CheckpointManager again(dir, {.keep_last = 3, .keep_best = false});
  EXPECT_EQ(again.latest(), dir + "/step-5.safetensors");
  run.save(again, 6);
  EXPECT_EQ(steps_of(again), (std::vector<int64_t>{4, 5, 6}));  // step 3, the oldest save, went
}

TEST(CheckpointManager, RestoreBestAndLatestRestoreTheModelsValues) {
  std::string dir = fresh_dir();
  CheckpointManager m(dir, {.keep_last = 1});
  Trainee run;
  EXPECT_FALSE(m.restore_latest(run.ckpt));  // nothing yet: nothing touched
  EXPECT_FALSE(m.restore_best(run.ckpt));
  run.save(m, 1, 0.9);
  run.save(m, 2, 0.1);  // weights all 2.0
  run.save(m, 3, 0.5);  // weights all 3.0
  run.set(-1.0, 0);

  Trainee fresh;  // another process, another initialisation
  CheckpointManager reopened(dir, {.keep_last = 1});
  ASSERT_TRUE(reopened.restore_best(fresh.ckpt));
  EXPECT_TRUE(fresh.holds(2.0));
  EXPECT_EQ(fresh.progress.global_step, 2);
  ASSERT_TRUE(reopened.restore_latest(fresh.ckpt));
  EXPECT_TRUE(fresh.holds(3.0));
  EXPECT_EQ(fresh.progress.global_step, 3);
}

TEST(CheckpointManager, ACheckpointSavedButNotRecordedIsAdoptedAsTheNewest) {
  std::string dir = fresh_dir();
  Trainee run;
  {
    CheckpointManager m(dir, {.keep_last = 2});
    run.save(m, 1, 0.5);
    run.save(m, 2, 0.4);
  }
  // A crash between the checkpoint's rename and the record's: the file is there, unrecorded.
  run.set(3.0, 3);
  run.ckpt.save(dir + "/step-3.safetensors");
  CheckpointManager m(dir, {.keep_last = 2});
  EXPECT_EQ(steps_of(m), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(m.latest(), dir + "/step-3.safetensors");
  EXPECT_EQ(m.entries()[2].metric, std::nullopt);
  EXPECT_EQ(m.best(), dir + "/step-2.safetensors");
  ASSERT_EQ(m.problems().size(), 1u);
  EXPECT_NE(m.problems()[0].find("step-3.safetensors is not in checkpoints.json"), std::string::npos);
  EXPECT_NE(m.problems()[0].find("adopted"), std::string::npos);
  run.save(m, 4, 0.6);  // and it rotates like the others
  EXPECT_EQ(steps_of(m), (std::vector<int64_t>{2, 3, 4}));
  // Recorded now: a new manager has nothing to report.
  EXPECT_TRUE(CheckpointManager(dir, {.keep_last = 2}).problems().empty());
}

TEST(CheckpointManager, ABrokenCheckpointFileIsSkippedAndReported) {
  std::string dir = fresh_dir();
  Trainee run;
  {
    CheckpointManager m(dir);
    run.save(m, 1, 0.5);
  }
  // An unrecorded checkpoint with one flipped byte of data (the last byte of the file).
  std::string bad = dir + "/step-2.safetensors";
  run.set(2.0, 2);
  run.ckpt.save(bad);
  {
    std::fstream f(bad, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(-1, std::ios::end);
    char c = char(f.get());
    f.seekp(-1, std::ios::end);
    f.put(char(c ^ 0x40));
  }
  testing::write_bytes(dir + "/step-7.safetensors", "not a checkpoint");
  CheckpointManager m(dir);
  EXPECT_EQ(steps_of(m), (std::vector<int64_t>{1}));
  EXPECT_EQ(m.latest(), dir + "/step-1.safetensors");
  ASSERT_EQ(m.problems().size(), 2u);
  EXPECT_NE(m.problems()[0].find("step-2.safetensors is not in checkpoints.json and is broken: skipped"),
            std::string::npos);
  EXPECT_NE(m.problems()[0].find("checksum mismatch"), std::string::npos) << m.problems()[0];
  EXPECT_NE(m.problems()[1].find("step-7.safetensors"), std::string::npos);
  EXPECT_TRUE(fs::exists(bad));  // left for inspection, never deleted by rotation
  run.save(m, 3);
  run.save(m, 4);
  run.save(m, 5);
  EXPECT_TRUE(fs::exists(bad));
}

TEST(CheckpointManager, RecordedCheckpointsThatAreGoneAreDropped) {
  std::string dir = fresh_dir();
  Trainee run;
  {
    CheckpointManager m(dir, {.keep_last = 2});
    run.save(m, 1, 0.1);  // the best
    run.save(m, 2, 0.5);
    run.save(m, 3, 0.6);
    // Deleting a file that is already gone is not an error: step 2 rotates out next.
    fs::remove(dir + "/step-2.safetensors");
    EXPECT_NO_THROW(run.save(m, 4, 0.7));
    EXPECT_EQ(steps_of(m), (std::vector<int64_t>{1, 3, 4}));
  }
  fs::remove(dir + "/step-1.safetensors");
  CheckpointManager m(dir, {.keep_last = 2});
  EXPECT_EQ(steps_of(m), (std::vector<int64_t>{3, 4}));
  ASSERT_EQ(m.problems().size(), 1u);
  EXPECT_EQ(m.problems()[0], "step-1.safetensors is in checkpoints.json but not in the folder: dropped");
  EXPECT_EQ(m.best(), std::nullopt);  // its file is gone...
  EXPECT_EQ(m.best_metric(), 0.1);    // ...but it is still the best seen
}

TEST(CheckpointManager, TemporariesOfKilledSavesAreRemoved) {
  std::string dir = fresh_dir();
  {
    CheckpointManager m(dir);
    Trainee run;
    run.save(m, 1);
  }
  // pid 2^30 is above Linux's largest pid_max (2^22): no such process.
  const std::string dead = std::to_string(1 << 30), alive = std::to_string(::getpid());
  const std::string stale_ckpt = ".step-2.safetensors.tmp-" + dead + "-0",
                    stale_index = ".checkpoints.json.tmp-" + dead + "-7",
                    live = ".step-3.safetensors.tmp-" + alive + "-0";  // a save in progress
  for (const std::string& name : {stale_ckpt, stale_index, live, std::string("notes.txt"), ".other.tmp-" + dead + "-0"})
    testing::write_bytes(dir + "/" + name, "partial");
  CheckpointManager m(dir);
  EXPECT_EQ(files_in(dir), (std::set<std::string>{"checkpoints.json", "step-1.safetensors", live, "notes.txt",
                                                  ".other.tmp-" + dead + "-0"}));
  EXPECT_EQ(m.problems().size(), 2u);
  EXPECT_EQ(steps_of(m), (std::vector<int64_t>{1}));
}

TEST(CheckpointManager, ADamagedRecordIsRebuiltFromTheFiles) {
  std::string dir = fresh_dir();
  Trainee run;
  {
    CheckpointManager m(dir);
    run.save(m, 5, 0.5);
    run.save(m, 6, 0.4);
  }
  testing::write_bytes(dir + "/checkpoints.json", "{\"format\": \"kiln.CheckpointManager\", \"vers");
  CheckpointManager m(dir);
  EXPECT_EQ(steps_of(m), (std::vector<int64_t>{5, 6}));
  EXPECT_EQ(m.latest(), dir + "/step-6.safetensors");
  EXPECT_EQ(m.best_metric(), std::nullopt);
  ASSERT_EQ(m.problems().size(), 3u);
  EXPECT_NE(m.problems()[0].find("checkpoints.json is unreadable"), std::string::npos) << m.problems()[0];

  // A record from a newer kiln is refused rather than overwritten.
  testing::write_bytes(dir + "/checkpoints.json",
             R"({"format": "kiln.CheckpointManager", "version": 2, "monitor": "val/loss", "mode": "min",
                 "best": null, "checkpoints": []})");
  EXPECT_KILN_ERROR(CheckpointManager{dir}, "checkpoints.json has version 2, newer than this kiln reads (1)");
}

// Issue 23: the record was read whole, however large; a record over 16 MiB
// (io::kMaxRecordBytes; a real one is a few KB) is damaged: rebuilt from the files.
TEST(CheckpointManager, AnOversizedRecordIsNotReadButRebuilt) {
  std::string dir = fresh_dir();
  Trainee run;
  {
    CheckpointManager m(dir);
    run.save(m, 5, 0.5);
  }
  const std::string record = dir + "/checkpoints.json";
  fs::resize_file(record, uintmax_t(io::kMaxRecordBytes) + 1);  // sparse: no disk used
  CheckpointManager m(dir);
  EXPECT_EQ(steps_of(m), (std::vector<int64_t>{5}));
  ASSERT_FALSE(m.problems().empty());
  EXPECT_NE(m.problems()[0].find("checkpoints.json is unreadable ([CheckpointManager] cannot read " + record +
                                 ": it is larger than the 16 MiB (16777216 bytes) limit of a checkpoint folder's record)"),
            std::string::npos)
      << m.problems()[0];
}

TEST(CheckpointManager, BadArgumentsNameTheFolderAndTheProblem) {
  std::string dir = fresh_dir();
  EXPECT_KILN_ERROR(CheckpointManager(dir, {.keep_last = 0}),
                    "[CheckpointManager] folder '" + dir + "': keep_last is 0; it must be at least 1");
  EXPECT_KILN_ERROR(CheckpointManager(dir, {.min_delta = -0.1}), "min_delta is -0.1; it must be a finite number >= 0");
  EXPECT_KILN_ERROR(CheckpointManager(dir, {.min_delta = kNaN}), "min_delta is nan");
  EXPECT_KILN_ERROR(CheckpointManager(""), "the folder name is empty");
  EXPECT_FALSE(fs::exists(dir));  // nothing was created by a refused manager

  // A folder that cannot be created (its parent is a file).
  fs::create_directories(dir);
  testing::write_bytes(dir + "/file", "x");
  EXPECT_KILN_ERROR(CheckpointManager(dir + "/file/run"), "folder '" + dir + "/file/run': cannot create it");
  EXPECT_KILN_ERROR(CheckpointManager(dir + "/file"), "exists and is not a folder");

  CheckpointManager m(dir);
  Trainee run;
  EXPECT_KILN_ERROR(m.save(run.ckpt, -1), "[CheckpointManager.save] folder '" + dir + "': step -1 is negative");
  EXPECT_TRUE(m.entries().empty());
  // The checkpoint's own errors pass through, and nothing is recorded.
  CheckpointManager gone(dir + "/gone");
  fs::remove_all(dir + "/gone");
  EXPECT_KILN_ERROR(gone.save(run.ckpt, 1), "cannot create a temporary file in folder '" + dir + "/gone'");
  EXPECT_EQ(gone.latest(), std::nullopt);
}

TEST(CheckpointManager, KilledAtRandomMomentsLosesNothing) {
  // A worker process saves step after step (a save is three fsynced writes and
  // a deletion, ~20 ms here) and is SIGKILLed at a random moment; each time a
  // new manager opens the folder as a resumed run would, and the next worker
  // goes on from its latest checkpoint.
  const std::string dir = fresh_dir();
  const CheckpointManagerOptions options = testing::manager_worker_options();
  std::mt19937 rng(6);
  std::map<std::string, int> recoveries;  // what the reopening found, by kind
  int64_t last_latest = 0;
  constexpr int kRounds = 30;
  for (int round = 0; round < kRounds; ++round) {
    int ready[2];
    ASSERT_EQ(::pipe(ready), 0);
    pid_t pid = ::fork();
    if (pid == 0) {
      ::dup2(ready[1], STDOUT_FILENO);
      ::execl(KILN_MANAGER_WORKER, KILN_MANAGER_WORKER, dir.c_str(), static_cast<char*>(nullptr));
      ::_exit(127);
    }
    ::close(ready[1]);
    char line[6];
    ssize_t got = ::read(ready[0], line, sizeof line);  // "ready\n": the folder is open
    ::close(ready[0]);
    if (got == sizeof line) ::usleep(useconds_t(rng() % 30000));
    ::kill(pid, SIGKILL);
    int status = 0;
    ::waitpid(pid, &status, 0);
    ASSERT_EQ(got, ssize_t(sizeof line)) << "the worker failed to start";
    ASSERT_TRUE(WIFSIGNALED(status)) << "the worker stopped by itself";

    CheckpointManager m(dir, options);
    for (const std::string& p : m.problems()) {
      const char* kind = p.find("adopted") != std::string::npos                      ? "adopted"
                         : p.find("dropped") != std::string::npos                    ? "dropped"
                         : p.find("temporary of a killed save") != std::string::npos ? "temporary"
                                                                                     : nullptr;
      ASSERT_NE(kind, nullptr) << "round " << round << ": " << p;  // never broken, never unreadable
      ++recoveries[kind];
    }
    // What is recorded is exactly what is in the folder: no temporaries, nothing unrecorded.
    std::set<std::string> expected;
    for (const auto& e : m.entries()) expected.insert(CheckpointManager::file_name(e.step));
    if (fs::exists(dir + "/checkpoints.json")) expected.insert("checkpoints.json");
    EXPECT_EQ(files_in(dir), expected) << "round " << round;
    for (const auto& e : m.entries()) {
      if (e.metric) {
        EXPECT_EQ(*e.metric, testing::manager_metric(e.step)) << "step " << e.step;
      }
    }

    // The latest holds its own step, and a resume never goes back in time.
    if (!m.latest()) {
      EXPECT_EQ(last_latest, 0) << "round " << round;
      continue;
    }
    Trainee run;
    ASSERT_TRUE(m.restore_latest(run.ckpt));
    const int64_t latest = run.progress.global_step;
    EXPECT_EQ(m.latest(), dir + "/" + CheckpointManager::file_name(latest));
    EXPECT_TRUE(run.holds(double(latest))) << "step " << latest;
    EXPECT_GE(latest, last_latest) << "round " << round;
    last_latest = latest;
    if (m.best()) {
      ASSERT_TRUE(m.restore_best(run.ckpt));
      EXPECT_TRUE(run.holds(double(run.progress.global_step)));
      EXPECT_EQ(m.best_metric(), testing::manager_metric(run.progress.global_step));
    }
  }
  // Workers killed before finishing a save leave unrecorded checkpoints
  // behind (adopted by the next); the first save that completes rotates them all.
  CheckpointManager m(dir, options);
  Trainee run;
  run.save(m, last_latest + 1, 0.5);
  std::set<std::string> expected{"checkpoints.json", CheckpointManager::file_name(last_latest),
                                 CheckpointManager::file_name(last_latest + 1)};
  if (m.best()) expected.insert(fs::path(*m.best()).filename().string());
  EXPECT_EQ(files_in(dir), expected);
  // Not vacuous: the workers got on, and kills landed in the middle of saves.
  EXPECT_GE(last_latest, 5);
  EXPECT_GT(recoveries["adopted"] + recoveries["dropped"] + recoveries["temporary"], 0);
  std::string summary = fmt::format("{} rounds, {} steps saved;", kRounds, last_latest);
  for (const auto& [kind, n] : recoveries) summary += fmt::format(" {} {}", n, kind);
  std::printf("%s\n", summary.c_str());
  RecordProperty("recoveries", summary);
}

TEST(CheckpointManager, TemporaryNamesAreParsedStrictly) {
  long pid = 0;
  EXPECT_TRUE(kiln::detail::parse_temporary_name(".step-1.safetensors.tmp-123-4", "step-1.safetensors", pid));
  EXPECT_EQ(pid, 123);
  for (const char* name : {".step-1.safetensors.tmp-123", ".step-1.safetensors.tmp--4", ".step-1.safetensors.tmp-1a-4",
                           "step-1.safetensors.tmp-123-4", ".step-1.safetensors.tmp-123-"})
    EXPECT_FALSE(kiln::detail::parse_temporary_name(name, "step-1.safetensors", pid)) << name;
}

}  // namespace
}  // namespace kiln::io
