// Atomic replacement of a file (docs/io.md, "Atomic saves"): what
// save_safetensors, the checkpoint manager's record and the tokenizers' files
// are written with (core: io and data both write files; not in kiln.h).
#pragma once

#include <functional>
#include <string>
#include <string_view>

namespace kiln {

namespace detail {
/// strerror's text for an errno value, for error messages.
std::string errno_text(int err);
}  // namespace detail

/// A new version of `path`, written to a temporary ".<name>.tmp-<pid>-<n>"
/// beside it (O_EXCL) and put in place by commit(): fsync, close, rename over
/// `path`, fsync of the folder. A crash at any moment leaves the old file or
/// the new one. Destroyed without commit() (an error), the temporary is
/// removed. Failures throw "[op] path: ..." with the errno text.
class AtomicFile {
 public:
  AtomicFile(const char* op, std::string path);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, size_t n);
  /// `before_rename` (a test seam) runs with the temporary's path once it is
  /// written, fsynced and closed; if it throws, the save is abandoned.
  void commit(const std::function<void(const std::string&)>& before_rename = {});

 private:
  [[noreturn]] void fail(const std::string& message) const;
  [[noreturn]] void fail_temporary(const char* what, int err) const;

  const char* op_;
  std::string path_, dir_, tmp_;
  int fd_ = -1;
  bool done_ = false;  // renamed: nothing to clean up
};

/// Writes `bytes` to `path` so that a crash at any moment leaves the old file
/// or the new one: a temporary ".<name>.tmp-<pid>-<n>" beside it (O_EXCL),
/// write, fsync, close, rename over `path`, fsync the folder. On failure the
/// temporary is removed and "[op] path: ..." is thrown with the errno text.
void atomic_write(const char* op, const std::string& path, std::string_view bytes);

namespace detail {
/// Whether `file_name` is a temporary of an atomic write of `target_name`
/// (".<target_name>.tmp-<pid>-<n>", as atomic_write and save_safetensors name
/// them); sets `pid` to the writer's process id.
bool parse_temporary_name(const std::string& file_name, const std::string& target_name, long& pid);
}  // namespace detail

}  // namespace kiln
