// Storage: one allocation shared by a tensor and all its views.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "kiln/core/device.h"

namespace kiln {

class Storage {
 public:
  /// Fresh, uninitialised memory from the device's caching allocator.
  Storage(size_t nbytes, Device device);
  /// Wraps memory owned by someone else; `deleter` (may be empty) runs at the end.
  Storage(void* data, size_t nbytes, Device device, void (*deleter)(void*, void*), void* ctx);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }

  // NOTE [Version counter]: in-place ops bump the version of the storage they
  // write; autograd records the version of each tensor it saves and refuses to
  // run a backward whose saved input was overwritten since.
  uint64_t version() const { return version_.load(std::memory_order_relaxed); }
  void bump_version() { version_.fetch_add(1, std::memory_order_relaxed); }

 private:
  void* data_;
  size_t nbytes_;
  Device device_;
  void (*deleter_)(void*, void*) = nullptr;  // null: owned by the allocator
  void* deleter_ctx_ = nullptr;
  bool owned_;
  std::atomic<uint64_t> version_{0};
};

}  // namespace kiln
