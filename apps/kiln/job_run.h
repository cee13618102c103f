// JobRun: what every job of the command line (kiln train fashion-mnist|lm,
// kiln rl ppo|dqn|sac) does around its training loop, in one place:
//
//   - the thread count for the job (restored when it ends);
//   - the run folder --out, locked, refused or moved aside (RunFolder);
//   - --resume: "latest" (the newest checkpoint in --out/checkpoints) or a
//     path, its config read as JSON and checked to be this job's, and its
//     hyper-parameters compared with this run's (check_resume, --override);
//   - the files: --out/metrics.csv and --out/checkpoints/;
//   - live control from outside: --out/control.sock for the job's
//     train::Control (apps/kiln/control_socket.h, `kiln control`).
//
//   JobRun run({.op = kOp, .job = "dqn", .out = o.out, .resume = "latest", .threads = o.threads, .log = o.log});
//   json history = run.check_hyper_parameters(run.saved_config(), {{"seed", o.seed}});
//   run.serve(control);                    // RUN_DIR/control.sock until the JobRun ends
#pragma once

#include <cstdint>
#include <filesystem>
#include <iosfwd>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "apps/kiln/run_folder.h"
#include "kiln/train/control.h"

namespace kiln::app {

class ControlServer;

struct JobRunOptions {
  std::string op;                      // "kiln rl dqn": the prefix of every error
  std::string job;                     // the config's "job": "fashion-mnist", "lm", "ppo", "dqn", "sac"
  std::string out;                     // the run folder
  std::string resume = "";             // "": a new run; "latest": the newest checkpoint in out; else a path
  bool overwrite = false;              // a new run may replace the run in out
  std::vector<std::string> overrides;  // hyper-parameters a resume may change ("lr", ...; "all": any)
  int threads = 0;                     // the job's thread count; 0: as it is
  std::ostream* log = nullptr;         // nullptr: std::cout
  bool primary = true;                 // false: a rank other than 0 of an MPI run: it prints nothing, and
                                       // the folder, its lock and the control socket are rank 0's
};

/// The JobRunOptions of a job whose options carry the common flags under
/// run_flags.h's names (resume, overwrite, overrides, threads, log).
template <class JobOptions>
JobRunOptions job_run_options(std::string op, std::string job, std::string out, const JobOptions& o) {
  return {.op = std::move(op),
          .job = std::move(job),
          .out = std::move(out),
          .resume = o.resume,
          .overwrite = o.overwrite,
          .overrides = o.overrides,
          .threads = o.threads,
          .log = o.log};
}

class JobRun {
 public:
  /// Sets the thread count, opens and locks the run folder (kiln::Error as
  /// RunFolder), and when resuming finds the checkpoint ("[op] --resume latest:
  /// no checkpoint in DIR") and reads its config ("[op] --resume PATH: not a
  /// checkpoint of `op` (its config is '...')").
  explicit JobRun(JobRunOptions options);
  ~JobRun();
  JobRun(const JobRun&) = delete;
  JobRun& operator=(const JobRun&) = delete;

  const std::string& op() const { return options_.op; }
  std::ostream& log() const { return *log_; }
  RunFolder& folder() { return *folder_; }
  const std::filesystem::path& path() const { return folder_->path(); }
  std::string csv() const { return (path() / "metrics.csv").string(); }
  std::string checkpoint_dir() const { return (path() / "checkpoints").string(); }

  bool resuming() const { return !resume_path_.empty(); }
  /// The checkpoint file a resumed run starts from ("" for a new run).
  const std::string& resume_path() const { return resume_path_; }
  /// Its config (a JSON object whose "job" is this job's; null for a new run)
  /// and the global step it was saved at.
  const nlohmann::json& saved_config() const { return saved_config_; }
  int64_t resumed_step() const { return resumed_step_; }

  /// For a resume: the keys of `wanted` must equal those of `saved` (a flat
  /// object: the saved config or a part of it) unless --override names them
  /// (apps/kiln/resume_check.h). Returns the run's override history (the
  /// saved config's "overrides" plus the accepted changes); [] for a new run.
  nlohmann::json check_hyper_parameters(const nlohmann::json& saved, const nlohmann::json& wanted) const;

  /// Opens <out>/control.sock for `control` until the JobRun ends.
  void serve(std::shared_ptr<train::Control> control);

 private:
  void find_resume();  // resume_path_, saved_config_, resumed_step_

  JobRunOptions options_;
  std::ostream* log_;
  int threads_before_ = 0;
  std::unique_ptr<RunFolder> folder_;
  std::string resume_path_;
  nlohmann::json saved_config_;
  int64_t resumed_step_ = 0;
  std::unique_ptr<ControlServer> server_;  // last member: closed first
};

}  // namespace kiln::app
