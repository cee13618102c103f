// Which devices this build has a backend for, and device-aware allocation.
// Only the CPU backend is built now (NOTE [Backend dispatch] in
// src/backend/backend.h): a request for any other device is an Error naming
// the op, "[zeros] this build has no GPU backend: ...".
#pragma once

#include <cstddef>
#include <vector>

#include "kiln/core/device.h"

namespace kiln {

inline constexpr Device kCUDA{DeviceType::cuda, 0};

/// The devices tensors can live on in this build: {cpu} without a GPU backend.
/// Op tests run their bodies on each (testing::for_each_device).
std::vector<Device> available_devices();

namespace detail {
/// Throws "[op] this build has no GPU backend: ..." (the no-GPU build's answer
/// to every request for a device other than the CPU).
[[noreturn]] void no_gpu_backend(const char* op, Device device);

/// A block of at least nbytes on `device`, from that device's allocator
/// (Storage's owned memory); an Error for a device without a backend.
void* allocate(size_t nbytes, Device device);
/// Returns a block from allocate(nbytes, device).
void deallocate(void* ptr, size_t nbytes, Device device);
}  // namespace detail

/// Throws an Error naming op unless this build has a backend for `device`:
/// creating, moving to or computing on a cuda tensor without a GPU backend.
/// One compare on the hot path.
inline void check_device(const char* op, Device device) {
  if (device.type != DeviceType::cpu) [[unlikely]]
    detail::no_gpu_backend(op, device);
}

}  // namespace kiln
