// RunFolder (apps/kiln/run_folder.h): refuse, move aside, lock.
#include "apps/kiln/run_folder.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <fmt/format.h>
#include <fmt/ostream.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <ostream>

#include "kiln/core/error.h"

namespace kiln::app {

namespace fs = std::filesystem;

namespace {

constexpr const char* kLockName = ".lock";
// What a job writes into its folder: a run is these two.
constexpr const char* kRunFiles[] = {"metrics.csv", "checkpoints"};

bool holds_run(const fs::path& out) {
  std::error_code ec;
  if (fs::exists(out / "metrics.csv", ec)) return true;
  const fs::path ckpt = out / "checkpoints";
  return fs::is_directory(ckpt, ec) && !fs::is_empty(ckpt, ec);
}

// "previous-20261203-161502", unique within the folder.
fs::path aside_path(const fs::path& out) {
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char stamp[32];
  std::strftime(stamp, sizeof(stamp), "%Y%m%d-%H%M%S", &tm);
  fs::path p = out / (std::string("previous-") + stamp);
  for (int i = 2; fs::exists(p); ++i) p = out / fmt::format("previous-{}-{}", stamp, i);
  return p;
}

}  // namespace

void RunFolder::check_path(const std::string& op, const std::string& out) {
  KILN_CHECK(!out.empty(), op, "--out must name a folder, got ''");
  std::error_code ec;
  KILN_CHECK(!fs::exists(out, ec) || fs::is_directory(out, ec), op, "--out {} is a file, not a folder", out);
}

RunFolder::RunFolder(std::string op, const std::string& out, RunFolderOptions options)
    : op_(std::move(op)), out_(out), options_(options) {
  check_path(op_, out);
  KILN_CHECK(!(options.resume && options.overwrite), op_,
             "--resume and --overwrite exclude each other (continue the run in --out {}, or replace it)", out);
  if (!options.primary) return;
  std::error_code ec;
  fs::create_directories(out_, ec);
  KILN_CHECK(!ec, op_, "cannot create the --out folder {}: {}", out, ec.message());

  // The lock first: what the folder holds is only looked at by its owner.
  const std::string lock = (out_ / kLockName).string();
  lock_fd_ = ::open(lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  KILN_CHECK(lock_fd_ >= 0, op_, "cannot write in the --out folder {}: {}", out, std::strerror(errno));
  if (::flock(lock_fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    char pid[32] = {};
    (void)!::pread(lock_fd_, pid, sizeof(pid) - 1, 0);
    ::close(lock_fd_);
    lock_fd_ = -1;
    KILN_CHECK(err != EWOULDBLOCK, op_,
               "--out {} is in use by another kiln run (pid {}); wait for it to end or choose another --out", out,
               std::string(pid).empty() ? "unknown" : std::string(pid));
    KILN_FAIL(op_, "cannot lock the --out folder {}: {}", out, std::strerror(err));
  }
  // Who holds it, for the message above.
  const std::string pid = std::to_string(::getpid());
  if (::ftruncate(lock_fd_, 0) == 0) (void)!::pwrite(lock_fd_, pid.data(), pid.size(), 0);

  had_previous_ = holds_run(out_);
  if (had_previous_ && !options.resume && !options.overwrite) {
    ::close(lock_fd_);
    lock_fd_ = -1;
    KILN_FAIL(op_,
              "--out {} holds a previous run (metrics.csv, checkpoints/): pass --resume to continue it, or "
              "--overwrite to replace it (it is kept aside until the new run's first checkpoint)",
              out);
  }
}

RunFolder::~RunFolder() {
  if (lock_fd_ >= 0) ::close(lock_fd_);  // closing releases the flock
}

void RunFolder::start(std::ostream& log) {
  if (!options_.primary || options_.resume || !had_previous_ || !aside_.empty()) return;
  const fs::path aside = aside_path(out_);
  fs::create_directory(aside);
  for (const char* name : kRunFiles) {
    std::error_code ec;
    if (!fs::exists(out_ / name, ec)) continue;
    fs::rename(out_ / name, aside / name, ec);
    KILN_CHECK(!ec, op_, "--overwrite: cannot move {} aside to {}: {}", (out_ / name).string(), aside.string(),
               ec.message());
  }
  aside_ = aside;
  fmt::print(log, "--overwrite: moved the previous run to {} (deleted once this run writes its first checkpoint)\n",
             aside_.string());
}

void RunFolder::first_checkpoint_written() {
  if (aside_.empty()) return;
  std::error_code ec;
  fs::remove_all(aside_, ec);  // a failure leaves the old run there, which loses nothing
  aside_.clear();
}

}  // namespace kiln::app
