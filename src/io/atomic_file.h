// Atomic replacement of a small file (the checkpoint manager's index): the same
// recipe as save_safetensors (docs/io.md, "Atomic saves"), for bytes already in
// memory. Internal to src/io: not installed, not in kiln.h.
#pragma once

#include <string>
#include <string_view>

namespace kiln::io::detail {

/// Writes `bytes` to `path` so that a crash at any moment leaves the old file
/// or the new one: a temporary ".<name>.tmp-<pid>-<n>" beside it (O_EXCL),
/// write, fsync, close, rename over `path`, fsync the folder. On failure the
/// temporary is removed and "[op] path: ..." is thrown with the errno text.
void atomic_write(const char* op, const std::string& path, std::string_view bytes);

/// Whether `file_name` is a temporary of an atomic write of `target_name`
/// (".<target_name>.tmp-<pid>-<n>", as atomic_write and save_safetensors name
/// them); sets `pid` to the writer's process id.
bool parse_temporary_name(const std::string& file_name, const std::string& target_name, long& pid);

}  // namespace kiln::io::detail
