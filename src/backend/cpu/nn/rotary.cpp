// CPU rotary embedding: the per-call cos/sin table [2, T, rd / 2] and one
// pass over the rows [rows * T, D], parallel over rows. The half-split
// convention reads two contiguous halves (vectorizes directly); the
// interleaved one reads even/odd lanes.
#include "src/backend/cpu/nn/rotary.h"

#include <cmath>
#include <cstring>
#include <type_traits>

#include "kiln/core/parallel.h"
#include "src/backend/cpu/dispatch.h"

namespace kiln::backend::cpu {

namespace {

// Rows per parallel task: about 32K elements each.
int64_t row_grain(int64_t d) { return std::max<int64_t>(1, 32768 / std::max<int64_t>(d, 1)); }

}  // namespace

void rotary_table(const std::vector<int64_t>& pos, double base, int64_t rd, const Tensor& table) {
  const int64_t T = int64_t(pos.size()), half = rd / 2;
  dispatch_only<bfloat16, float, double>(table.dtype(), [&](auto tag) {
    using A = typename decltype(tag)::type;
    if constexpr (!std::is_same_v<A, bfloat16>) {
      A* c = static_cast<A*>(table.data_ptr());
      A* s = c + T * half;
      parallel_for(0, T, std::max<int64_t>(1, 2048 / std::max<int64_t>(half, 1)), [&](int64_t lo, int64_t hi) {
        for (int64_t t = lo; t < hi; ++t)
          for (int64_t i = 0; i < half; ++i) {
            // f64 angle: a position in the thousands times an f32 frequency
            // would be off by ~1e-4 rad.
            const double th = double(pos[size_t(t)]) * std::pow(base, -2.0 * double(i) / double(rd));
            c[t * half + i] = A(std::cos(th));
            s[t * half + i] = A(std::sin(th));
          }
      });
    }
  });
}

void rotary(const RotaryGeom& g, const Tensor& x_in, const Tensor& table, int sign, const Tensor& out) {
  if (out.numel() == 0) return;
  Tensor x = x_in.contiguous();
  const int64_t half = g.rd / 2, D = g.D, T = g.T;
  dispatch_only<bfloat16, float, double>(x.dtype(), [&](auto tag) {
    using T_ = typename decltype(tag)::type;
    using A = acc_t<T_>;
    const T_* xp = static_cast<const T_*>(x.data_ptr());
    T_* op = static_cast<T_*>(out.data_ptr());
    const A* cos_t = static_cast<const A*>(table.data_ptr());
    const A* sin_t = cos_t + T * half;
    const A sg = A(sign);
    parallel_for(0, g.rows * T, row_grain(D), [&](int64_t lo, int64_t hi) {
      for (int64_t r = lo; r < hi; ++r) {
        const T_* xr = xp + r * D;
        T_* orow = op + r * D;
        const A* c = cos_t + (r % T) * half;
        const A* s = sin_t + (r % T) * half;
        if (g.interleaved) {
#pragma omp simd
          for (int64_t i = 0; i < half; ++i) {
            const A a = A(xr[2 * i]), b = A(xr[2 * i + 1]), sn = sg * s[i];
            orow[2 * i] = T_(a * c[i] - b * sn);
            orow[2 * i + 1] = T_(b * c[i] + a * sn);
          }
        } else {
#pragma omp simd
          for (int64_t i = 0; i < half; ++i) {
            const A a = A(xr[i]), b = A(xr[i + half]), sn = sg * s[i];
            orow[i] = T_(a * c[i] - b * sn);
            orow[i + half] = T_(b * c[i] + a * sn);
          }
        }
        if (g.rd < D) std::memcpy(orow + g.rd, xr + g.rd, size_t(D - g.rd) * sizeof(T_));
      }
    });
  });
}

}  // namespace kiln::backend::cpu
