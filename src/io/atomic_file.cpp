// atomic_write: temporary file, fsync, rename, fsync of the folder.
#include "src/io/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <filesystem>
#include <system_error>

#include "kiln/core/error.h"

namespace kiln::io::detail {
namespace {

std::string errno_text(int err) { return std::error_code(err, std::generic_category()).message(); }

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

void atomic_write(const char* op, const std::string& path, std::string_view bytes) {
  std::filesystem::path target(path);
  std::string dir = target.parent_path().empty() ? std::string(".") : target.parent_path().string();
  auto fail = [&](const std::string& message) { throw Error(op, path + ": " + message); };

  // A fresh name per call (O_EXCL): two writers never share a temporary, and a
  // stale one left by a killed process is skipped, not reused.
  static std::atomic<uint64_t> counter{0};
  std::string tmp;
  int fd = -1;
  for (int attempt = 0; fd < 0; ++attempt) {
    tmp = (std::filesystem::path(dir) /
           fmt::format(".{}.tmp-{}-{}", target.filename().string(), ::getpid(), counter.fetch_add(1)))
              .string();
    fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0 && !(errno == EEXIST && attempt < 100))
      fail(fmt::format("cannot create a temporary file in folder '{}': {}", dir, errno_text(errno)));
  }
  // Every failure below removes the temporary; the target is untouched until the rename.
  auto fail_tmp = [&](const char* what, int err) {
    if (fd >= 0) ::close(fd);
    ::unlink(tmp.c_str());
    fail(fmt::format("{} temporary file '{}' failed: {}", what, tmp, errno_text(err)));
  };
  if (int err = write_all(fd, bytes.data(), bytes.size())) fail_tmp("writing", err);
  if (::fsync(fd) != 0) fail_tmp("fsync of", errno);
  int closed = ::close(fd);
  fd = -1;
  if (closed != 0) fail_tmp("closing", errno);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    fail(fmt::format("cannot rename temporary file '{}' over it: {}", tmp, errno_text(err)));
  }
  // The rename is durable only once the folder's entry is on disk.
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  int err = dfd < 0 ? errno : (::fsync(dfd) != 0 ? errno : 0);
  if (dfd >= 0) ::close(dfd);
  if (err != 0) fail(fmt::format("written, but syncing folder '{}' failed: {}", dir, errno_text(err)));
}

bool parse_temporary_name(const std::string& file_name, const std::string& target_name, long& pid) {
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

}  // namespace kiln::io::detail
