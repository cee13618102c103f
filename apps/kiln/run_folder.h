// RunFolder: the --out folder of a job, opened so that a run never destroys
// an earlier one (docs/reliability.md, "Run folders"):
//
//   - a folder that holds a previous run (metrics.csv or checkpoints/) is
//     refused unless the run resumes it (--resume) or replaces it (--overwrite);
//   - --overwrite moves the previous run aside, into <out>/previous-<time>/,
//     and deletes it only once the new run has written its first checkpoint,
//     so a run killed before then loses nothing;
//   - an exclusive lock (flock on <out>/.lock) refuses a second live run in
//     the same folder; the kernel releases it when the process ends, however
//     it ends.
//
//   app::RunFolder folder(kOp, o.out, {.resume = !resume.empty(), .overwrite = o.overwrite});
//   ...                                  // validate, load data, build the model
//   folder.start(log);                   // a new run: the previous one moves aside
//   ...                                  // train; after the first checkpoint:
//   folder.first_checkpoint_written();   // the previous run is deleted
#pragma once

#include <filesystem>
#include <iosfwd>
#include <string>

namespace kiln::app {

struct RunFolderOptions {
  bool resume = false;     // this run continues the folder's run
  bool overwrite = false;  // this run replaces the folder's run (moved aside until its first checkpoint)
  bool primary = true;     // false: a rank other than 0 of an MPI run; rank 0 owns the folder, so
                           // nothing is created, locked or moved here (docs/distributed.md)
};

class RunFolder {
 public:
  /// Creates `out` when needed and locks it; kiln::Error "[op] ..." naming
  /// --out when it is empty, a file, cannot be created or is locked by a live
  /// run, or holds a previous run and neither resume nor overwrite is set.
  RunFolder(std::string op, const std::string& out, RunFolderOptions options);
  /// The checks on `out` that need no file system work (not empty, not a
  /// file), for a job to run before it loads its data.
  static void check_path(const std::string& op, const std::string& out);
  /// Releases the lock. A previous run still moved aside stays there.
  ~RunFolder();
  RunFolder(const RunFolder&) = delete;
  RunFolder& operator=(const RunFolder&) = delete;

  /// A new run (not a resume) is about to write its files: with overwrite,
  /// moves the previous run's metrics.csv and checkpoints/ aside and says
  /// where on `log`. Nothing to do when resuming or when the folder was new.
  void start(std::ostream& log);
  /// The new run has a checkpoint: deletes the previous run moved aside.
  /// Cheap to call after every save.
  void first_checkpoint_written();

  const std::filesystem::path& path() const { return out_; }
  /// Whether the folder held a run (metrics.csv or a non-empty checkpoints/) when opened.
  bool had_previous_run() const { return had_previous_; }

 private:
  std::string op_;
  std::filesystem::path out_;
  RunFolderOptions options_;
  int lock_fd_ = -1;
  bool had_previous_ = false;
  std::filesystem::path aside_;  // where start() moved the previous run; empty: nothing moved
};

}  // namespace kiln::app
