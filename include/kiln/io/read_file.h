// Bounded whole-file reads for kiln's readers (text data sets, tokenizer and
// config JSON, the checkpoint folder's record): a file over its reader's limit,
// a folder, or an endless device like /dev/zero is an error naming the limit,
// never a read that does not end (docs/reliability.md, "Input files").
#pragma once

#include <cstdint>
#include <string>

namespace kiln::io {

/// Limits of kiln's readers, in bytes.
inline constexpr int64_t kMaxTextBytes = int64_t(1) << 30;    // text data sets (`train lm --data`): 1 GiB
inline constexpr int64_t kMaxJsonBytes = int64_t(256) << 20;  // tokenizer and model-config JSON: 256 MiB
inline constexpr int64_t kMaxRecordBytes = int64_t(16) << 20;  // checkpoints.json: 16 MiB

/// The bytes of `path`, at most max_bytes. Errors are "[op] cannot read
/// path: " and "no such file", "it is a folder, not a file", "it is larger than
/// the 1 GiB (1073741824 bytes) limit of a text data set" (`what` names the
/// reader) or the errno text. Reads pipes and devices too, up to the limit.
std::string read_file(const char* op, const std::string& path, int64_t max_bytes, const char* what);

}  // namespace kiln::io
