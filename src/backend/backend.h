// The backend layer's entry for ops: which backend runs an op's kernels,
// chosen once per op by the device of its tensors.
#pragma once

#include "kiln/core/backends.h"
#include "kiln/core/error.h"
#include "kiln/core/replay.h"
#include "kiln/core/tensor.h"

// NOTE [Backend dispatch]
// src/backend holds one folder per backend, compiled in or out (MLX's
// mlx/backend/{cpu,no_gpu}):
//   cpu/     the CPU kernels (namespace kiln::backend::cpu), grouped by kernel
//            family, each with its plain reference in <name>_ref.cpp
//            (kiln::backend::cpu::ref); always built.
//   no_gpu/  the GPU entry points of a build without a GPU backend (gpu.h):
//            every one throws "[op] this build has no GPU backend".
// An op validates its arguments (src/ops/checks.h: check_defined also checks
// the tensor's device), resolves the device it runs on once with
// backend::device_of(op, tensors...) or check_device(op, device) for a new
// tensor, allocates its outputs on that device (Tensor::empty(shape, dtype,
// x.device()), zeros(shape, {.dtype, .device})), then calls the kernels of
// that device's backend: backend::cpu::<kernel>(...) for kCPU. That is one
// compare per op on the hot path, nothing per element, and no kernel ever
// sees a tensor of another device. A GPU backend adds a folder beside cpu/
// (replacing no_gpu/ in the build), its allocator case in
// src/core/allocator.cpp, and, per op it implements, a `case
// DeviceType::cuda:` calling its kernel; ops it does not implement keep
// refusing through gpu::unsupported. Its kernels are tested against the CPU
// ones (ggml's test-backend-ops), and their backward passes follow spec 001's
// rules (docs/adding_an_op.md).

namespace kiln::backend {

/// The device op's tensors live on (undefined ones are skipped; kCPU when
/// none is defined). Throws an Error naming op when this build has no backend
/// for one of them, or when two of them differ.
///   Device d = backend::device_of("add", a, b);
template <class... Ts>
Device device_of(const char* op, const Ts&... tensors) {
  replay::note_op(op);  // names the op in a rejected recording (kiln/core/replay.h)
  Device d = kCPU;
  bool first = true;
  auto visit = [&](const Tensor& t) {
    if (!t.defined()) return;
    check_device(op, t.device());
    if (first) {
      d = t.device();
      first = false;
    } else {
      KILN_CHECK(t.device() == d, op, "expected all tensors on one device, got {} and {}", d.str(),
                 t.device().str());
    }
  };
  (visit(tensors), ...);
  return d;
}

}  // namespace kiln::backend
