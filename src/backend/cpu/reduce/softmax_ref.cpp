// CPU softmax, log_softmax and logsumexp: the reference kernels (plain
// loops), the oracle for the fast ones in isa/softmax.cpp.
#include <algorithm>
#include <cmath>
#include <limits>

#include "kiln/core/parallel.h"
#include "src/backend/cpu/dispatch.h"
#include "src/backend/cpu/reduce/reduce.h"
#include "src/backend/cpu/vec_math.h"

namespace kiln::backend::cpu {

namespace ref {

void softmax(const Tensor& x, int64_t dim, const Tensor& out, bool log) {
  Rows R = rows_around(x, dim);
  dispatch_only<bfloat16, float, double>(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* xp = static_cast<const T*>(R.c.data_ptr());
    T* op = static_cast<T*>(out.data_ptr());
    for (int64_t o = 0; o < R.outer; ++o)
      for (int64_t i = 0; i < R.inner; ++i) {
        auto at = [&](int64_t r) { return o * R.n * R.inner + r * R.inner + i; };
        double m = -INFINITY, s = 0;
        for (int64_t r = 0; r < R.n; ++r) m = std::max(m, double(xp[at(r)]));
        for (int64_t r = 0; r < R.n; ++r) s += std::exp(double(xp[at(r)]) - m);
        for (int64_t r = 0; r < R.n; ++r) {
          double v = double(xp[at(r)]) - m;
          op[at(r)] = T(log ? v - std::log(s) : std::exp(v) / s);
        }
      }
    });
}

void logsumexp(const Tensor& x, int64_t dim, const Tensor& out) {
  Rows R = rows_around(x, dim);
  dispatch_only<bfloat16, float, double>(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* xp = static_cast<const T*>(R.c.data_ptr());
    T* op = static_cast<T*>(out.data_ptr());
    for (int64_t o = 0; o < R.outer; ++o)
      for (int64_t i = 0; i < R.inner; ++i) {
        double m = -INFINITY, s = 0;
        for (int64_t r = 0; r < R.n; ++r) m = std::max(m, double(xp[(o * R.n + r) * R.inner + i]));
        double shift = std::isinf(m) ? 0.0 : m;
        for (int64_t r = 0; r < R.n; ++r) s += std::exp(double(xp[(o * R.n + r) * R.inner + i]) - shift);
        op[o * R.inner + i] = T(std::log(s) + shift);
      }
    });
}

}  // namespace ref

}  // namespace kiln::backend::cpu
