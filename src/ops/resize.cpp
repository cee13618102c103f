// interpolate: argument checks, PyTorch 1.13's output-size rule, per-axis
// source tables and the vjp. The forward and its backward are adjoint linear
// maps, each recorded with the other as its vjp, so create_graph works.
#include "kiln/ops/resize.h"

#include <cmath>
#include <memory>

#include <fmt/ranges.h>

#include "kiln/ops/record.h"
#include "kiln/ops/shape.h"
#include "src/backend/cpu/copy/resize.h"
#include "src/ops/checks.h"

namespace kiln {

namespace {

using backend::cpu::ResizeAxis;
using backend::cpu::ResizeGeom;
using Geom = std::shared_ptr<const ResizeGeom>;

const char* mode_name(InterpolateMode m) {
  switch (m) {
    case InterpolateMode::Nearest: return "nearest";
    case InterpolateMode::Linear: return "linear";
    case InterpolateMode::Bilinear: return "bilinear";
  }
  return "?";
}

// The table of one axis: in -> out samples. scale > 0 is the user's
// scale_factor (PyTorch samples with 1 / scale), 0 when a size was given.
ResizeAxis make_axis(bool linear, int64_t in, int64_t out, bool align_corners, double scale) {
  ResizeAxis a;
  a.nearest = !linear;
  const size_t n = size_t(out);
  a.i0f.resize(n), a.i1f.resize(n), a.i0d.resize(n), a.i1d.resize(n);
  a.l0f.resize(n), a.l1f.resize(n), a.l0d.resize(n), a.l1d.resize(n);
  for (int64_t o = 0; o < out; ++o) {
    const size_t u = size_t(o);
    int64_t j[4];
    if (linear) {
      backend::cpu::linear_source<float>(o, in, out, align_corners, scale, j[0], j[1], a.l0f[u], a.l1f[u]);
      backend::cpu::linear_source<double>(o, in, out, align_corners, scale, j[2], j[3], a.l0d[u], a.l1d[u]);
    } else {
      j[0] = j[1] = j[2] = j[3] = backend::cpu::nearest_source(o, in, out, scale);
      a.l0f[u] = 1, a.l1f[u] = 0, a.l0d[u] = 1, a.l1d[u] = 0;
    }
    a.i0f[u] = int32_t(j[0]), a.i1f[u] = int32_t(j[1]), a.i0d[u] = int32_t(j[2]), a.i1d[u] = int32_t(j[3]);
  }
  a.adjf = backend::cpu::make_adjoint(in, out, !linear, a.i0f.data(), a.i1f.data(), a.l0f.data(), a.l1f.data());
  a.adjd = backend::cpu::make_adjoint(in, out, !linear, a.i0d.data(), a.i1d.data(), a.l0d.data(), a.l1d.data());
  return a;
}

Tensor resize_backward(const Geom& g, const Shape& in_shape, const Tensor& gy);

// x4 [B, C, H, W] -> [B, C, OH, OW].
Tensor resize_forward(const Geom& g, const Tensor& x4) {
  const Shape& s = x4.shape();
  Tensor out = Tensor::empty({s[0], s[1], g->h.out(), g->w.out()}, x4.dtype(), x4.device());
  backend::cpu::resize2d(*g, x4, out);
  if (needs_grad(x4))
    record("interpolate", {x4}, {out}, {}, [g, in_shape = s](const VjpArgs& v) -> Grads {
      return {resize_backward(g, in_shape, v.grad())};
    });
  return out;
}

Tensor resize_backward(const Geom& g, const Shape& in_shape, const Tensor& gy) {
  Tensor gx = Tensor::empty(in_shape, gy.dtype(), gy.device());
  backend::cpu::resize2d_backward(*g, gy, gx);
  if (needs_grad(gy))
    record("interpolate_backward", {gy}, {gx}, {}, [g](const VjpArgs& v) -> Grads { return {resize_forward(g, v.grad())}; });
  return gx;
}

template <class V>
std::string list_str(const std::vector<V>& v) {
  return fmt::format("[{}]", fmt::join(v, ", "));
}

}  // namespace

Tensor interpolate(const Tensor& x, const InterpolateOptions& o) {
  const char* op = "interpolate";
  check_defined(op, x);
  KILN_CHECK(x.dim() == 3 || x.dim() == 4, op, "input {} must be 3-D [N, C, L] or 4-D [N, C, H, W], got {}-D",
             to_string(x.shape()), x.dim());
  KILN_CHECK(is_floating(x.dtype()), op, "expects a floating input, got {} {}", name(x.dtype()),
             to_string(x.shape()));
  const int nsp = int(x.dim()) - 2;
  const bool linear = o.mode != InterpolateMode::Nearest;
  KILN_CHECK(o.mode != InterpolateMode::Linear || nsp == 1, op,
             "mode linear needs a 3-D input [N, C, L], got {}-D {} (use bilinear for 4-D)", x.dim(),
             to_string(x.shape()));
  KILN_CHECK(o.mode != InterpolateMode::Bilinear || nsp == 2, op,
             "mode bilinear needs a 4-D input [N, C, H, W], got {}-D {} (use linear for 3-D)", x.dim(),
             to_string(x.shape()));
  KILN_CHECK(linear || !o.align_corners, op,
             "align_corners can only be set with the interpolating modes linear and bilinear, not {}",
             mode_name(o.mode));
  const bool has_size = !o.size.empty(), has_scale = !o.scale_factor.empty();
  KILN_CHECK(!(has_size && has_scale), op, "only one of size and scale_factor may be given, got size {} and scale_factor {}",
             list_str(o.size), list_str(o.scale_factor));
  KILN_CHECK(has_size || has_scale, op, "either size or scale_factor must be given");
  const size_t given = has_size ? o.size.size() : o.scale_factor.size();
  KILN_CHECK(given == 1 || given == size_t(nsp), op, "{} {} must have 1 or {} entries (one per spatial dim of input {})",
             has_size ? "size" : "scale_factor", has_size ? list_str(o.size) : list_str(o.scale_factor), nsp,
             to_string(x.shape()));
  for (int64_t d = 2; d < x.dim(); ++d)
    KILN_CHECK(x.shape()[size_t(d)] > 0, op, "input {} has an empty spatial dim", to_string(x.shape()));

  // Per spatial dim: output size and the scale PyTorch samples with.
  int64_t out[2] = {1, 1}, in[2] = {1, 1};
  double scale[2] = {0, 0};
  for (int i = 0; i < nsp; ++i) {
    const size_t k = given == 1 ? 0 : size_t(i);
    const int u = 2 - nsp + i;
    in[u] = x.shape()[size_t(2 + i)];
    if (has_size) {
      KILN_CHECK(o.size[k] > 0, op, "size must be positive, got {}", list_str(o.size));
      out[u] = o.size[k];
    } else {
      const double s = o.scale_factor[k];
      KILN_CHECK(s > 0 && std::isfinite(s), op, "scale_factor must be positive and finite, got {}",
                 list_str(o.scale_factor));
      out[u] = int64_t(std::floor(double(in[u]) * s));  // PyTorch truncates in * scale
      KILN_CHECK(out[u] > 0, op, "input {} with scale_factor {} gives an empty output", to_string(x.shape()),
                 list_str(o.scale_factor));
      scale[u] = s;
    }
  }

  for (int u = 0; u < 2; ++u)  // the kernels index a plane's rows and columns with int32
    KILN_CHECK(in[u] < (int64_t(1) << 31) && out[u] < (int64_t(1) << 31), op,
               "input {} -> output sizes ({}, {}) exceed 2^31 - 1 along a dim", to_string(x.shape()), out[0], out[1]);
  Tensor x4 = nsp == 1 ? unsqueeze(x, -2) : x;  // [N, C, 1, L] for 1-D
  auto g = std::make_shared<ResizeGeom>();
  g->N = x4.shape()[0] * x4.shape()[1], g->H = in[0], g->W = in[1];
  g->h = make_axis(linear && nsp == 2, in[0], out[0], o.align_corners, scale[0]);
  g->w = make_axis(linear, in[1], out[1], o.align_corners, scale[1]);
  Tensor y = resize_forward(g, x4);
  return nsp == 1 ? squeeze(y, -2) : y;
}

}  // namespace kiln
