// What kiln's libFuzzer targets share: the current input as a file (the
// readers take paths), a scratch folder, and "accepted or refused with a
// kiln::Error" (anything else escapes to libFuzzer as a finding).
#pragma once

#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "kiln/core/error.h"

namespace kiln::fuzz {

[[noreturn]] inline void die(const char* what) {
  std::perror(what);
  std::abort();
}

/// Aborts (a finding) with `what` when a property does not hold.
inline void require(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "property violated: %s\n", what);
    std::abort();
  }
}

/// An in-memory file (memfd) that holds the current input, and a path that
/// opens it: the loaders take paths and read with open/fstat/pread as on disk.
class InputFile {
 public:
  InputFile() : fd_(::memfd_create("kiln_fuzz_input", MFD_CLOEXEC)) {
    if (fd_ < 0) die("memfd_create failed");
    path_ = "/proc/self/fd/" + std::to_string(fd_);
  }
  const std::string& write(const uint8_t* data, size_t size) {
    if (::ftruncate(fd_, 0) != 0) die("ftruncate failed");
    for (size_t done = 0; done < size;) {
      ssize_t n = ::pwrite(fd_, data + done, size - done, off_t(done));
      if (n <= 0) die("pwrite failed");
      done += size_t(n);
    }
    return path_;
  }

 private:
  int fd_;
  std::string path_;
};

/// A folder of its own under $TMPDIR (or /tmp), for readers that take one;
/// left behind at exit (libFuzzer ends with exit()).
inline const std::string& scratch_dir() {
  static const std::string dir = [] {
    const char* tmp = std::getenv("TMPDIR");
    std::string pattern = std::string(tmp && *tmp ? tmp : "/tmp") + "/kiln_fuzz_XXXXXX";
    if (!::mkdtemp(pattern.data())) die("mkdtemp failed");
    return pattern;
  }();
  return dir;
}

/// Writes `bytes` to `path` (truncating).
inline void write_file(const std::string& path, std::string_view bytes) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) die("fopen failed");
  if (!bytes.empty() && std::fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size()) die("fwrite failed");
  std::fclose(f);
}

/// Runs one reader; true when it accepted the input, false on a kiln::Error.
/// Any other exception escapes: libFuzzer reports it with the input.
template <class F>
bool accepts(F&& load) {
  try {
    load();
    return true;
  } catch (const Error&) {
    return false;
  }
}

}  // namespace kiln::fuzz
