// Where a tensor's memory lives. Only the CPU is built now; the type is shaped
// for asynchronous devices (a CUDA backend is one more folder later).
#pragma once

#include <cstdint>
#include <string>

namespace kiln {

enum class DeviceType : uint8_t { cpu, cuda };

struct Device {
  DeviceType type = DeviceType::cpu;
  int index = 0;

  friend bool operator==(const Device&, const Device&) = default;
  std::string str() const;  // "cpu", "cuda:0"
};

inline constexpr Device kCPU{DeviceType::cpu, 0};

}  // namespace kiln
