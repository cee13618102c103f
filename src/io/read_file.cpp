// Bounded whole-file reads (kiln/io/read_file.h).
#include "kiln/io/read_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "kiln/core/atomic_file.h"
#include "kiln/core/error.h"
#include "kiln/core/size_check.h"

namespace kiln::io {

std::string read_file(const char* op, const std::string& path, int64_t max_bytes, const char* what) {
  const auto too_large = [&] {
    KILN_FAIL(op, "cannot read {}: it is larger than the {} ({} bytes) limit of {}", path, format_bytes(max_bytes),
              max_bytes, what);
  };
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    const int err = errno;
    KILN_CHECK(err != ENOENT, op, "cannot read {}: no such file", path);
    KILN_FAIL(op, "cannot read {}: {}", path, kiln::detail::errno_text(err));
  }
  KILN_CHECK(!S_ISDIR(st.st_mode), op, "cannot read {}: it is a folder, not a file", path);
  if (S_ISREG(st.st_mode) && st.st_size > max_bytes) too_large();  // before reading a byte

  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) KILN_FAIL(op, "cannot read {}: {}", path, kiln::detail::errno_text(errno));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  // Regular files: their size, plus one byte to see a file that grew. Pipes
  // and devices: chunks until the end or one byte over the limit.
  std::string out;
  out.resize(size_t(S_ISREG(st.st_mode) ? std::min<int64_t>(st.st_size + 1, max_bytes + 1) : 1 << 16));
  size_t done = 0;
  for (;;) {
    if (done == out.size()) {
      if (int64_t(done) > max_bytes) too_large();
      out.resize(size_t(std::min<int64_t>(int64_t(out.size()) * 2, max_bytes + 1)));
    }
    const ssize_t got = ::read(fd, out.data() + done, out.size() - done);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) KILN_FAIL(op, "cannot read {}: {}", path, kiln::detail::errno_text(errno));
    if (got == 0) break;
    done += size_t(got);
  }
  if (int64_t(done) > max_bytes) too_large();
  out.resize(done);
  return out;
}

}  // namespace kiln::io
