// The GPU entry points of a build without a GPU backend (MLX's
// mlx/backend/no_gpu): each answers with an Error naming the op.
#include "src/backend/gpu.h"

#include "kiln/core/backends.h"

namespace kiln::backend::gpu {

bool is_built() { return false; }

void copy(const char* op, const Tensor& src, const Tensor& dst) {
  kiln::detail::no_gpu_backend(op, src.device().type != DeviceType::cpu ? src.device() : dst.device());
}

void unsupported(const char* op, Device device) { kiln::detail::no_gpu_backend(op, device); }

}  // namespace kiln::backend::gpu
