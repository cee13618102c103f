// JobRun (apps/kiln/job_run.h): threads, folder, resume, control socket.
#include "apps/kiln/job_run.h"

#include <iostream>

#include "apps/kiln/control_socket.h"
#include "apps/kiln/resume_check.h"
#include "kiln/core/error.h"
#include "kiln/core/parallel.h"
#include "kiln/io/checkpoint.h"
#include "kiln/io/checkpoint_manager.h"

namespace kiln::app {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

std::ostream& null_log() {
  static std::ostream sink(nullptr);  // no buffer: every write is dropped
  return sink;
}

}  // namespace

JobRun::JobRun(JobRunOptions options)
    : options_(std::move(options)),
      log_(!options_.primary ? &null_log() : options_.log ? options_.log : &std::cout) {
  const std::string& op = options_.op;
  // The folder first: it is locked before anything in it is read.
  folder_ = std::make_unique<RunFolder>(op, options_.out,
                                        RunFolderOptions{.resume = !options_.resume.empty(),
                                                         .overwrite = options_.overwrite,
                                                         .primary = options_.primary});
  threads_before_ = get_num_threads();
  if (!options_.resume.empty()) find_resume();
  // Last: a constructor that throws runs no destructor to restore it.
  if (options_.threads > 0) set_num_threads(options_.threads);
}

void JobRun::find_resume() {
  const std::string& op = options_.op;
  resume_path_ = options_.resume;
  if (resume_path_ == "latest") {
    const std::string dir = checkpoint_dir();
    KILN_CHECK(fs::is_directory(dir), op, "--resume latest: no checkpoint in {}", dir);
    io::CheckpointManager manager(dir);
    KILN_CHECK(manager.latest().has_value(), op, "--resume latest: no checkpoint in {}", dir);
    resume_path_ = *manager.latest();
  }
  const io::CheckpointInfo info = io::read_checkpoint_info(resume_path_);
  saved_config_ = json::parse(info.config, nullptr, /*allow_exceptions=*/false);
  KILN_CHECK(saved_config_.is_object() && saved_config_.value("job", "") == options_.job, op,
             "--resume {}: not a checkpoint of `{}` (its config is '{}')", resume_path_, op, info.config.substr(0, 80));
  resumed_step_ = info.progress.global_step;
}

JobRun::~JobRun() {
  server_.reset();  // the socket goes before the lock
  set_num_threads(threads_before_);
}

json JobRun::check_hyper_parameters(const json& saved, const json& wanted) const {
  if (!resuming()) return json::array();
  return check_resume(options_.op, resume_path_, saved, wanted, options_.overrides,
                      saved_config_.value("overrides", json()), resumed_step_, *log_);
}

void JobRun::serve(std::shared_ptr<train::Control> control) {
  server_.reset();
  if (!options_.primary) return;  // rank 0's socket controls its run; the others follow its steps
  server_ = std::make_unique<ControlServer>(options_.op, path(), std::move(control));
}

}  // namespace kiln::app
