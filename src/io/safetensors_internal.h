// The reading half of src/io/safetensors.cpp, shared with the checkpoint code
// (not installed, not in kiln.h), and a test seam of the writer.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kiln/core/tensor.h"

namespace kiln::io::detail {

/// A safetensors dtype name, its element size in the file and the kiln dtype
/// it loads as (F16 has no kiln dtype: it is widened to f32 on load).
struct FileDType {
  const char* name;
  int64_t file_itemsize;
  DType dtype;
};

/// One tensor of a validated header. Offsets are relative to the data buffer.
struct Entry {
  std::string name;
  const FileDType* dtype;
  Shape shape;
  uint64_t begin = 0, end = 0;
};

struct Header {
  std::vector<Entry> entries;  // in data-buffer order
  std::map<std::string, std::string> metadata;
  uint64_t data_start = 0;  // 8 + N: where the data buffer starts in the file
};

/// A whole file's bytes: memory-mapped at kMapThreshold bytes and above, read
/// into memory below (where a mapping saves nothing).
class FileBytes {
 public:
  static constexpr size_t kMapThreshold = size_t(1) << 20;
  bool mapped() const { return mapped_; }
  /// Throws "[op] path: cannot open: ..." and the like.
  static FileBytes open(const char* op, const std::string& path);
  /// The file mapped (at any size above 0) without reading it in: pages are
  /// read on first touch, so opening a large file costs no resident memory
  /// until tensors are used (io::WeightSource). Empty files are read.
  static FileBytes map_lazily(const char* op, const std::string& path);
  /// A copy of `size` bytes, as if read from a file (for fuzzing and tests).
  static FileBytes from_memory(const void* data, size_t size);

  FileBytes(FileBytes&& o) noexcept
      : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)),
        mapped_(std::exchange(o.mapped_, false)), buffer_(std::move(o.buffer_)) {
    if (!mapped_) data_ = buffer_.data();
  }
  FileBytes& operator=(FileBytes&&) = delete;
  ~FileBytes();

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  FileBytes() = default;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  bool mapped_ = false;
  std::vector<uint8_t> buffer_;
};

/// Validates the whole header: after this returns, every tensor's range lies
/// in the file, matches its shape and dtype, and the ranges tile the data
/// buffer exactly. Errors: "[op] path: tensor 'x': ...".
Header read_header(const char* op, const std::string& path, const FileBytes& file);

/// A new contiguous tensor with entry `e`'s values (F16 widened, BOOL checked).
Tensor read_tensor(const char* op, const std::string& path, const FileBytes& file, const Header& h, const Entry& e);

/// Entry `e`'s values without a copy where the file's bytes can serve as the
/// tensor's memory (aligned to the element size; not F16 or BOOL, which need
/// converting or checking): a tensor whose storage keeps `file` alive. Else
/// read_tensor's copy. Read it only: a mapped file's pages are read-only.
Tensor alias_tensor(const char* op, const std::string& path, const std::shared_ptr<const FileBytes>& file,
                    const Header& h, const Entry& e);

/// The tensor's bytes in the file.
inline const uint8_t* entry_bytes(const FileBytes& file, const Header& h, const Entry& e) {
  return file.data() + h.data_start + e.begin;
}

/// Called by save_safetensors with the temporary file's path after the file is
/// written, fsynced and closed, right before it is renamed over the target. A
/// hook that throws aborts the save. An empty function removes the hook. Not
/// thread-safe: set it only while no save runs.
void set_save_hook(std::function<void(const std::string& temp_path)> hook);

}  // namespace kiln::io::detail
