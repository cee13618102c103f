// The plain reference of the CPU rotary embeddings kernels (rotary.cpp): obvious loops the
// fast kernels are tested against.
#include "src/backend/cpu/nn/rotary.h"

#include <cmath>
#include <cstring>
#include <type_traits>

#include "kiln/core/parallel.h"
#include "src/backend/cpu/dispatch.h"

namespace kiln::backend::cpu {

namespace ref {

void rotary(const RotaryGeom& g, const Tensor& x_in, const std::vector<int64_t>& pos, double base, int sign,
            const Tensor& out) {
  Tensor x = x_in.contiguous();
  const int64_t half = g.rd / 2;
  dispatch_only<bfloat16, float, double>(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* xp = static_cast<const T*>(x.data_ptr());
    T* op = static_cast<T*>(out.data_ptr());
    for (int64_t r = 0; r < g.rows * g.T; ++r) {
      const int64_t t = r % g.T;
      for (int64_t d = 0; d < g.D; ++d) op[r * g.D + d] = xp[r * g.D + d];
      for (int64_t i = 0; i < half; ++i) {
        const double th = double(sign) * double(pos[size_t(t)]) * std::pow(base, -2.0 * double(i) / double(g.rd));
        const int64_t ia = g.interleaved ? 2 * i : i, ib = g.interleaved ? 2 * i + 1 : i + half;
        const double a = double(xp[r * g.D + ia]), b = double(xp[r * g.D + ib]);
        op[r * g.D + ia] = T(a * std::cos(th) - b * std::sin(th));
        op[r * g.D + ib] = T(b * std::cos(th) + a * std::sin(th));
      }
    }
  });
}

}  // namespace ref

}  // namespace kiln::backend::cpu
