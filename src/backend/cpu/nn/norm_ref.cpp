// CPU layer and batch normalisation: the reference kernels (plain loops),
// the oracle for the fast ones in isa/norm.cpp.
#include "src/backend/cpu/nn/norm.h"

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "kiln/core/parallel.h"

namespace kiln::backend::cpu {

namespace ref {

namespace {
double at(const Tensor& t, int64_t i) {
  return dispatch(t.dtype(), [&](auto tag) -> double {
    using T = typename decltype(tag)::type;
    if constexpr (is_floating(dtype_v<T>)) return double(static_cast<const T*>(t.data_ptr())[i]);
    else return 0.0;
  });
}
void set(const Tensor& t, int64_t i, double v) {
  dispatch(t.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (is_floating(dtype_v<T>)) static_cast<T*>(t.data_ptr())[i] = T(v);
  });
}
}  // namespace

void layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps, bool rms, const Tensor& out,
                const Tensor& mean, const Tensor& rstd) {
  const int64_t M = rstd.numel();
  if (M == 0) return;
  const int64_t N = x.numel() / M;
  for (int64_t r = 0; r < M; ++r) {
    double m = 0, v = 0;
    if (!rms) {
      for (int64_t i = 0; i < N; ++i) m += at(x, r * N + i);
      m /= double(N);
    }
    for (int64_t i = 0; i < N; ++i) v += (at(x, r * N + i) - m) * (at(x, r * N + i) - m);
    const double s = 1.0 / std::sqrt(v / double(N) + eps);
    for (int64_t i = 0; i < N; ++i) {
      double y = (at(x, r * N + i) - m) * s;
      if (weight.defined()) y *= at(weight, i);
      if (bias.defined()) y += at(bias, i);
      set(out, r * N + i, y);
    }
    if (mean.defined()) set(mean, r, m);
    set(rstd, r, s);
  }
}

void layer_norm_backward(const Tensor& g, const Tensor& x, const Tensor& weight, const Tensor& mean,
                         const Tensor& rstd, bool rms, const Tensor& gx, const Tensor& gweight, const Tensor& gbias) {
  const int64_t M = rstd.numel();
  const int64_t N = M ? x.numel() / M : (gweight.defined() ? gweight.numel() : gbias.defined() ? gbias.numel() : 0);
  std::vector<double> gw(size_t(N), 0.0), gb(size_t(N), 0.0);
  for (int64_t r = 0; r < M; ++r) {
    const double m = rms ? 0.0 : at(mean, r), s = at(rstd, r);
    double s1 = 0, s2 = 0;
    for (int64_t i = 0; i < N; ++i) {
      const double h = at(g, r * N + i) * (weight.defined() ? at(weight, i) : 1.0);
      const double xh = (at(x, r * N + i) - m) * s;
      s1 += h;
      s2 += h * xh;
      gw[size_t(i)] += at(g, r * N + i) * xh;
      gb[size_t(i)] += at(g, r * N + i);
    }
    if (rms) s1 = 0;
    if (gx.defined())
      for (int64_t i = 0; i < N; ++i) {
        const double h = at(g, r * N + i) * (weight.defined() ? at(weight, i) : 1.0);
        const double xh = (at(x, r * N + i) - m) * s;
        set(gx, r * N + i, s * (h - s1 / double(N) - xh * s2 / double(N)));
      }
  }
  for (int64_t i = 0; i < N; ++i) {
    if (gweight.defined()) set(gweight, i, gw[size_t(i)]);
    if (gbias.defined()) set(gbias, i, gb[size_t(i)]);
  }
}

void batch_norm_stats(const Tensor& x, const Tensor& mean, const Tensor& var) {
  const int64_t B = x.size(0), C = x.size(1), L = x.numel() / std::max<int64_t>(B * C, 1);
  for (int64_t c = 0; c < C; ++c) {
    double m = 0, v = 0;
    for (int64_t b = 0; b < B; ++b)
      for (int64_t i = 0; i < L; ++i) m += at(x, (b * C + c) * L + i);
    m /= double(B * L);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t i = 0; i < L; ++i) v += (at(x, (b * C + c) * L + i) - m) * (at(x, (b * C + c) * L + i) - m);
    set(mean, c, m);
    set(var, c, v / double(B * L));
  }
}

void batch_norm_apply(const Tensor& x, const Tensor& mean, const Tensor& invstd, const Tensor& weight,
                      const Tensor& bias, const Tensor& out) {
  const int64_t B = x.size(0), C = x.size(1), L = x.numel() / std::max<int64_t>(B * C, 1);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t i = 0; i < L; ++i) {
        const int64_t k = (b * C + c) * L + i;
        double y = (at(x, k) - at(mean, c)) * at(invstd, c);
        if (weight.defined()) y *= at(weight, c);
        if (bias.defined()) y += at(bias, c);
        set(out, k, y);
      }
}

void batch_norm_backward(const Tensor& g, const Tensor& x, const Tensor& mean, const Tensor& invstd,
                         const Tensor& weight, bool training, const Tensor& gx, const Tensor& gweight,
                         const Tensor& gbias) {
  const int64_t B = x.size(0), C = x.size(1), L = x.numel() / std::max<int64_t>(B * C, 1);
  const double n = double(B * L);
  for (int64_t c = 0; c < C; ++c) {
    const double m = at(mean, c), s = at(invstd, c), w = weight.defined() ? at(weight, c) : 1.0;
    double sg = 0, sgxh = 0;
    for (int64_t b = 0; b < B; ++b)
      for (int64_t i = 0; i < L; ++i) {
        const int64_t k = (b * C + c) * L + i;
        sg += at(g, k);
        sgxh += at(g, k) * (at(x, k) - m) * s;
      }
    if (gweight.defined()) set(gweight, c, sgxh);
    if (gbias.defined()) set(gbias, c, sg);
    if (gx.defined())
      for (int64_t b = 0; b < B; ++b)
        for (int64_t i = 0; i < L; ++i) {
          const int64_t k = (b * C + c) * L + i;
          const double xh = (at(x, k) - m) * s;
          set(gx, k, training ? w * s * (at(g, k) - sg / n - xh * sgxh / n) : w * s * at(g, k));
        }
  }
}

}  // namespace ref

}  // namespace kiln::backend::cpu
