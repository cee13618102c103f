// The --out folder of every job (issue 23, item 4) and the one resume check
// (item 8): a folder holding a run is refused without --resume or
// --overwrite; --overwrite keeps the old run aside until the new run's first
// checkpoint; a lock refuses a second live run; a changed hyper-parameter is
// refused unless --override names it, and then recorded.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <sstream>

#include "apps/kiln/resume_check.h"
#include "apps/kiln/run_folder.h"
#include "tests/support/apps_testing.h"

namespace kiln::app {
namespace {

namespace fs = std::filesystem;
constexpr const char* kOp = "kiln test";

// A folder as a finished run leaves it.
void write_old_run(const std::string& dir) {
  fs::create_directories(dir + "/checkpoints");
  kiln::testing::write_bytes(dir + "/metrics.csv", "step,loss\n1,2.5\n");
  kiln::testing::write_bytes(dir + "/checkpoints/step-1.safetensors", "old checkpoint");
}

// The previous-<time> folders in `dir`.
std::vector<fs::path> aside_folders(const std::string& dir) {
  std::vector<fs::path> out;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().filename().string().rfind("previous-", 0) == 0) out.push_back(e.path());
  return out;
}

TEST(RunFolder, AFolderHoldingARunNeedsResumeOrOverwrite) {
  const std::string dir = kiln::testing::fresh_dir();
  { RunFolder fresh(kOp, dir, {}); }  // an empty folder is a new run's
  write_old_run(dir);
  EXPECT_KILN_ERROR(RunFolder(kOp, dir, {}),
                    "[kiln test] --out " + dir + " holds a previous run (metrics.csv, checkpoints/): pass --resume "
                    "to continue it, or --overwrite to replace it");
  EXPECT_EQ(kiln::testing::read_bytes(dir + "/metrics.csv"), "step,loss\n1,2.5\n");  // untouched
  { RunFolder resumed(kOp, dir, {.resume = true}); }
  EXPECT_KILN_ERROR(RunFolder(kOp, dir, {.resume = true, .overwrite = true}), "exclude each other");
}

TEST(RunFolder, OverwriteKeepsThePreviousRunUntilTheFirstCheckpoint) {
  const std::string dir = kiln::testing::fresh_dir();
  write_old_run(dir);
  std::ostringstream log;
  {
    // A new run that dies before its first checkpoint (killed, NaN): the old
    // run is still there, moved aside.
    RunFolder folder(kOp, dir, {.overwrite = true});
    folder.start(log);
    EXPECT_FALSE(fs::exists(dir + "/metrics.csv"));
    EXPECT_FALSE(fs::exists(dir + "/checkpoints"));
  }
  std::vector<fs::path> aside = aside_folders(dir);
  ASSERT_EQ(aside.size(), 1u);
  EXPECT_EQ(kiln::testing::read_bytes((aside[0] / "metrics.csv").string()), "step,loss\n1,2.5\n");
  EXPECT_EQ(kiln::testing::read_bytes((aside[0] / "checkpoints/step-1.safetensors").string()), "old checkpoint");
  EXPECT_NE(log.str().find("--overwrite: moved the previous run to " + aside[0].string()), std::string::npos)
      << log.str();

  // A new run that writes its checkpoint: the run it replaced goes.
  write_old_run(dir);
  {
    RunFolder folder(kOp, dir, {.overwrite = true});
    folder.start(log);
    EXPECT_EQ(aside_folders(dir).size(), 2u);
    fs::create_directories(dir + "/checkpoints");
    folder.first_checkpoint_written();
  }
  // Only the first, never-replaced run is still aside.
  EXPECT_EQ(aside_folders(dir), aside);
}

TEST(RunFolder, ALockRefusesASecondLiveRun) {
  const std::string dir = kiln::testing::fresh_dir();
  {
    RunFolder first(kOp, dir, {});
    // flock belongs to the open file: a second open in this process conflicts
    // as a second process would.
    EXPECT_KILN_ERROR(RunFolder(kOp, dir, {.overwrite = true}),
                      fmt::format("--out {} is in use by another kiln run (pid {})", dir, getpid()));
  }
  RunFolder after(kOp, dir, {});  // released with the first
}

TEST(RunFolder, BadOutFoldersAreNamed) {
  const std::string dir = kiln::testing::fresh_dir();
  EXPECT_KILN_ERROR(RunFolder(kOp, "", {}), "[kiln test] --out must name a folder, got ''");
  kiln::testing::write_bytes(dir + "/file", "x");
  EXPECT_KILN_ERROR(RunFolder(kOp, dir + "/file", {}), "--out " + dir + "/file is a file, not a folder");
  EXPECT_KILN_ERROR(RunFolder(kOp, dir + "/file/run", {}), "cannot create the --out folder " + dir + "/file/run");
  if (geteuid() != 0) {  // root writes anywhere
    fs::create_directories(dir + "/read-only");
    fs::permissions(dir + "/read-only", fs::perms::owner_read | fs::perms::owner_exec);
    EXPECT_KILN_ERROR(RunFolder(kOp, dir + "/read-only/run", {}), "cannot create the --out folder");
    fs::permissions(dir + "/read-only", fs::perms::owner_all);
  }
}

TEST(ResumeCheck, RefusesAChangeUnlessOverriddenAndRecordsIt) {
  using nlohmann::json;
  std::ostringstream log;
  const json saved = {{"lr", 0.001}, {"seed", 0}, {"batch_size", 64}};
  json wanted = saved;
  EXPECT_EQ(check_resume(kOp, "ck", saved, wanted, {}, json(), 10, log), json::array());
  wanted["lr"] = 0.5;
  EXPECT_KILN_ERROR(check_resume(kOp, "ck", saved, wanted, {}, json(), 10, log),
                    "[kiln test] --resume ck: the checkpoint was trained with lr 0.001, this run asks for 0.5 (--lr); "
                    "pass --override lr to continue with the new value");
  EXPECT_KILN_ERROR(check_resume(kOp, "ck", saved, wanted, {"seed"}, json(), 10, log), "with lr 0.001");
  const json earlier = json::array({{{"name", "seed"}, {"from", 1}, {"to", 0}, {"step", 4}}});
  for (const std::vector<std::string>& names : {std::vector<std::string>{"lr"}, {"--lr"}, {"all"}}) {
    json history = check_resume(kOp, "ck", saved, wanted, names, earlier, 10, log);
    ASSERT_EQ(history.size(), 2u);
    EXPECT_EQ(history[0], earlier[0]);
    EXPECT_EQ(history[1], (json{{"name", "lr"}, {"from", 0.001}, {"to", 0.5}, {"step", 10}}));
  }
  EXPECT_NE(log.str().find("--override: lr 0.001 -> 0.5 from step 10"), std::string::npos) << log.str();
  EXPECT_EQ(flag_of("batch_size"), "--batch-size");
  wanted = saved;
  wanted["batch_size"] = 32;
  EXPECT_KILN_ERROR(check_resume(kOp, "ck", saved, wanted, {}, json(), 0, log), "(--batch-size)");
  EXPECT_EQ(check_resume(kOp, "ck", saved, wanted, {"batch-size"}, json(), 0, log).size(), 1u);
}

}  // namespace
}  // namespace kiln::app
