// CPU resizing kernels over N independent planes [N, H, W] (N = batch *
// channels; a 1-D signal is a plane with H = 1): nearest and (bi)linear
// interpolation through per-axis tables, and their adjoints. PyTorch 1.13's
// source-index formulas live here too, shared by the table builder
// (src/ops/resize.cpp) and the plain ref:: loops.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "kiln/core/tensor.h"

namespace kiln::backend::cpu {

/// PyTorch's nearest_idx: the input index output o reads. scale > 0 is the
/// user's scale_factor (sampling step 1 / scale), 0 when a size was given
/// (step in / out). The step and the product are f32, as in PyTorch, so
/// indices match it bit for bit.
inline int64_t nearest_source(int64_t o, int64_t in, int64_t out, double scale) {
  if (out == in) return o;
  if (out == 2 * in) return o >> 1;
  const float step = scale > 0 ? float(1.0 / scale) : float(in) / float(out);
  return std::min(int64_t(std::floor(float(o) * step)), in - 1);
}

/// PyTorch's linear source (compute_source_index_and_lambda) in the op's
/// math type A (f32 for f32/bf16, f64 for f64): the two taps and weights of
/// output o. align_corners maps corner centres onto each other
/// (step (in - 1) / (out - 1)); otherwise centres scale by the step and the
/// position is clamped at 0.
template <class A>
void linear_source(int64_t o, int64_t in, int64_t out, bool align_corners, double scale, int64_t& i0, int64_t& i1,
                   A& l0, A& l1) {
  if (out == in) {
    i0 = i1 = o, l0 = A(1), l1 = A(0);
    return;
  }
  A step;
  if (align_corners)
    step = out > 1 ? A(in - 1) / A(out - 1) : A(0);
  else
    step = scale > 0 ? A(1.0 / scale) : A(in) / A(out);
  A real;
  if (align_corners) {
    real = step * A(o);
  } else {
    real = A(double(step) * (double(o) + 0.5) - 0.5);  // PyTorch evaluates this in double
    if (real < A(0)) real = A(0);
  }
  i0 = std::min(int64_t(real), in - 1);
  i1 = i0 + (i0 < in - 1 ? 1 : 0);
  l1 = std::min(std::max(real - A(i0), A(0)), A(1));
  l0 = A(1) - l1;
}

/// The adjoint of an axis, gather form: input i collects
/// sum_k w[k * in + i] * grad[idx[k * in + i]] over k < fan (fan: the most
/// outputs any input feeds; shorter lists padded with weight 0). Reading
/// instead of scatter-adding lets the backward vectorize across inputs.
template <class A>
struct AxisAdjoint {
  int64_t fan = 0;
  std::vector<int32_t> idx;
  std::vector<A> w;
};

/// One axis of a resize: output o = l0[o] * in[i0[o]] + l1[o] * in[i1[o]]
/// (nearest: l0 = 1, l1 = 0, i1 = i0). Taps and weights are kept twice, as
/// computed in f32 math and in f64 math (PyTorch's for f32/bf16 and for f64:
/// the two can pick different taps at exact boundaries), so one geometry
/// serves every dtype.
struct ResizeAxis {
  bool nearest = true;
  std::vector<int32_t> i0f, i1f, i0d, i1d;  // int32: gathers take 16 lanes, not 8 (sizes < 2^31)
  std::vector<float> l0f, l1f;
  std::vector<double> l0d, l1d;
  AxisAdjoint<float> adjf;
  AxisAdjoint<double> adjd;
  int64_t out() const { return int64_t(i0f.size()); }
  template <class A> const int32_t* i0() const { return std::is_same_v<A, float> ? i0f.data() : i0d.data(); }
  template <class A> const int32_t* i1() const { return std::is_same_v<A, float> ? i1f.data() : i1d.data(); }
  template <class A>
  const A* l0() const {
    if constexpr (std::is_same_v<A, float>) return l0f.data(); else return l0d.data();
  }
  template <class A>
  const A* l1() const {
    if constexpr (std::is_same_v<A, float>) return l1f.data(); else return l1d.data();
  }
  template <class A>
  const AxisAdjoint<A>& adjoint() const {
    if constexpr (std::is_same_v<A, float>) return adjf; else return adjd;
  }
};

/// The gather-form adjoint of taps (i0, i1, l0, l1) over `out` outputs from
/// `in` inputs (nearest: tap 1 is ignored).
template <class A>
AxisAdjoint<A> make_adjoint(int64_t in, int64_t out, bool nearest, const int32_t* i0, const int32_t* i1, const A* l0,
                            const A* l1) {
  std::vector<int64_t> count(size_t(in), 0);
  for (int64_t o = 0; o < out; ++o) {
    ++count[size_t(i0[o])];
    if (!nearest) ++count[size_t(i1[o])];
  }
  AxisAdjoint<A> a;
  for (int64_t c : count) a.fan = std::max(a.fan, c);
  a.idx.assign(size_t(a.fan * in), 0);
  a.w.assign(size_t(a.fan * in), A(0));
  std::fill(count.begin(), count.end(), 0);
  auto put = [&](int64_t i, int64_t o, A w) {
    const size_t at = size_t(count[size_t(i)]++ * in + i);
    a.idx[at] = int32_t(o), a.w[at] = w;
  };
  for (int64_t o = 0; o < out; ++o) {
    put(i0[o], o, l0[o]);
    if (!nearest) put(i1[o], o, l1[o]);
  }
  return a;
}

/// Planes [N, H, W] -> [N, OH, OW]; OH = h.out(), OW = w.out().
struct ResizeGeom {
  int64_t N = 0, H = 0, W = 0;
  ResizeAxis h, w;
};

/// out [N, OH, OW] (x's dtype) = the separable interpolation of x (any
/// floating layout of N * H * W elements).
void resize2d(const ResizeGeom& g, const Tensor& x, const Tensor& out);
/// grad_in [N, H, W] = the adjoint of resize2d applied to grad_out [N, OH, OW].
void resize2d_backward(const ResizeGeom& g, const Tensor& grad_out, const Tensor& grad_in);

namespace ref {
/// F.interpolate on planes x [N, H, W] -> out [N, OH, OW] (sizes from out),
/// one output element at a time from the formulas above, summed in f64.
/// scale_h / scale_w: the user's scale_factor, 0 when a size was given.
void interpolate(const Tensor& x, const Tensor& out, bool linear, bool align_corners, double scale_h, double scale_w);
/// Its adjoint: grad_in [N, H, W] from grad_out [N, OH, OW].
void interpolate_backward(const Tensor& grad_out, const Tensor& grad_in, bool linear, bool align_corners,
                          double scale_h, double scale_w);
}  // namespace ref

}  // namespace kiln::backend::cpu
