// atomic_write: temporary file, fsync, rename, fsync of the folder.
#include "kiln/core/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <filesystem>
#include <system_error>

#include "kiln/core/error.h"

namespace kiln {

using detail::errno_text;

std::string detail::errno_text(int err) { return std::error_code(err, std::generic_category()).message(); }

namespace {

/// Writes all n bytes (retrying short writes and EINTR); returns errno or 0.
int write_all(int fd, const char* p, size_t n) {
  while (n > 0) {
    ssize_t put = ::write(fd, p, std::min<size_t>(n, size_t(1) << 30));
    if (put < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    p += put;
    n -= size_t(put);
  }
  return 0;
}

}  // namespace

AtomicFile::AtomicFile(const char* op, std::string path) : op_(op), path_(std::move(path)) {
  std::filesystem::path target(path_);
  dir_ = target.parent_path().empty() ? std::string(".") : target.parent_path().string();
  // A fresh name per file (O_EXCL): two writers never share a temporary, and
  // a stale one left by a killed process is skipped, not reused. Beside the
  // target, so the rename stays within one file system (atomic).
  static std::atomic<uint64_t> counter{0};
  for (int attempt = 0; fd_ < 0; ++attempt) {
    tmp_ = (std::filesystem::path(dir_) /
            fmt::format(".{}.tmp-{}-{}", target.filename().string(), ::getpid(), counter.fetch_add(1)))
               .string();
    fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd_ < 0 && !(errno == EEXIST && attempt < 100)) {
      int err = errno;
      done_ = true;  // nothing of ours to remove
      fail(fmt::format("cannot create a temporary file in folder '{}': {}", dir_, errno_text(err)));
    }
  }
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!done_) ::unlink(tmp_.c_str());
}

void AtomicFile::fail(const std::string& message) const { throw Error(op_, path_ + ": " + message); }

void AtomicFile::fail_temporary(const char* what, int err) const {
  fail(fmt::format("{} temporary file '{}' failed: {}", what, tmp_, errno_text(err)));
}

void AtomicFile::write(const void* data, size_t n) {
  if (int err = write_all(fd_, static_cast<const char*>(data), n)) fail_temporary("writing", err);
}

void AtomicFile::commit(const std::function<void(const std::string&)>& before_rename) {
  if (::fsync(fd_) != 0) fail_temporary("fsync of", errno);
  int closed = ::close(fd_);
  fd_ = -1;
  if (closed != 0) fail_temporary("closing", errno);  // a failed close can mean lost writes
  if (before_rename) before_rename(tmp_);
  if (::rename(tmp_.c_str(), path_.c_str()) != 0)
    fail(fmt::format("cannot rename temporary file '{}' over it: {}", tmp_, errno_text(errno)));
  done_ = true;
  // The rename is durable only once the folder's entry is on disk.
  int dfd = ::open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  int err = dfd < 0 ? errno : (::fsync(dfd) != 0 ? errno : 0);
  if (dfd >= 0) ::close(dfd);
  if (err != 0) fail(fmt::format("written, but syncing folder '{}' failed: {}", dir_, errno_text(err)));
}

void atomic_write(const char* op, const std::string& path, std::string_view bytes) {
  AtomicFile file(op, path);
  file.write(bytes.data(), bytes.size());
  file.commit();
}

bool detail::parse_temporary_name(const std::string& file_name, const std::string& target_name, long& pid) {
  // ".<target>.tmp-<pid>-<n>", both numbers plain decimal.
  const std::string head = "." + target_name + ".tmp-";
  if (file_name.size() <= head.size() || file_name.compare(0, head.size(), head) != 0) return false;
  std::string_view rest = std::string_view(file_name).substr(head.size());
  size_t dash = rest.find('-');
  if (dash == 0 || dash == std::string_view::npos || dash + 1 == rest.size()) return false;
  auto digits = [](std::string_view s) {
    return std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
  };
  std::string_view p = rest.substr(0, dash), n = rest.substr(dash + 1);
  if (!digits(p) || !digits(n) || p.size() > 18) return false;
  pid = std::stol(std::string(p));
  return true;
}

}  // namespace kiln
