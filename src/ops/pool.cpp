// max/avg/adaptive-avg pooling: argument checks, PyTorch's output-size rules
// (incl. ceil_mode), window tables, and vjps. Each backward is itself a
// recorded op (max: its vjp gathers at the argmax; avg: its vjp is the
// forward pool, the two being adjoint linear maps), so create_graph works.
#include "kiln/ops/pool.h"

#include <array>
#include <memory>

#include "kiln/ops/index.h"
#include "kiln/ops/record.h"
#include "kiln/ops/shape.h"
#include "src/backend/cpu/nn/pool.h"
#include "src/ops/checks.h"

namespace kiln {

namespace {

using backend::cpu::AvgWindows;
using backend::cpu::MaxPoolGeom;

using Pair = std::array<int64_t, 2>;

std::string dims_str(const Pair& s, int nsp) {
  return nsp == 1 ? fmt::format("{}", s[1]) : fmt::format("({}, {})", s[0], s[1]);
}

// x as [B, C, H, W] (a unit B for unbatched input, a unit H for 1-D).
struct Lifted {
  Tensor x4;
  bool batched = true;
};

Lifted lift_input(const char* op, const Tensor& x, int nsp) {
  check_defined(op, x);
  KILN_CHECK(x.dim() == nsp + 1 || x.dim() == nsp + 2, op,
             "input {} must be {}-D (batched [B, C, {}]) or {}-D (unbatched), got {}-D", to_string(x.shape()),
             nsp + 2, nsp == 1 ? "L" : "H, W", nsp + 1, x.dim());
  KILN_CHECK(is_floating(x.dtype()), op, "expects a floating input, got {} {}", name(x.dtype()),
             to_string(x.shape()));
  Lifted l;
  l.batched = x.dim() == nsp + 2;
  l.x4 = l.batched ? x : unsqueeze(x, 0);
  if (nsp == 1) l.x4 = unsqueeze(l.x4, -2);
  for (int64_t d = l.x4.dim() - nsp; d < l.x4.dim(); ++d)
    KILN_CHECK(l.x4.shape()[d] > 0, op, "input {} has an empty spatial dim", to_string(x.shape()));
  return l;
}

Tensor lower(const Tensor& t, int nsp, bool batched) {
  Tensor r = nsp == 1 ? squeeze(t, -2) : t;
  return batched ? r : squeeze(r, 0);
}

// PyTorch's pooling_output_shape: floor or ceil of the window count; with
// ceil_mode a last window must start inside the input or the left padding.
int64_t pooled_size(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d, bool ceil_mode) {
  const int64_t span = in + 2 * p - d * (k - 1) - 1;
  if (span < 0) return 0;
  int64_t out = (span + (ceil_mode ? s - 1 : 0)) / s + 1;
  if (ceil_mode && (out - 1) * s >= in + p) --out;
  return out;
}

struct PoolArgs {
  Pair k, s, p, d;
};

// Checks kernel/stride/padding/dilation (the public ops have resolved a
// std::nullopt stride to the kernel already) and returns the output sizes.
Pair check_pool(const char* op, int nsp, const Tensor& x, const Lifted& l, PoolArgs& a, bool ceil_mode) {
  Pair out{1, 1};
  for (int i = 2 - nsp; i < 2; ++i) {
    const size_t u = size_t(i);
    KILN_CHECK(a.k[u] > 0, op, "kernel_size must be positive, got {}", dims_str(a.k, nsp));
    KILN_CHECK(a.s[u] > 0, op, "stride must be positive, got {}", dims_str(a.s, nsp));
    KILN_CHECK(a.d[u] > 0, op, "dilation must be positive, got {}", dims_str(a.d, nsp));
    KILN_CHECK(a.p[u] >= 0 && a.p[u] <= a.k[u] / 2, op,
               "padding {} must be non-negative and at most half the kernel_size {}", dims_str(a.p, nsp),
               dims_str(a.k, nsp));
    const int64_t in = l.x4.shape()[2 + u];
    out[u] = pooled_size(in, a.k[u], a.s[u], a.p[u], a.d[u], ceil_mode);
    KILN_CHECK(out[u] > 0, op, "input {} is too small for kernel_size {} with padding {} and dilation {}",
               to_string(x.shape()), dims_str(a.k, nsp), dims_str(a.p, nsp), dims_str(a.d, nsp));
  }
  return out;
}

// ---- max ----

// Where each window's maximum is: i64 plane indices, or for 2x2 windows
// with stride 2 the one-byte taps of NOTE [2x2 max pooling] (src/backend/cpu/nn/pool.h).
struct Argmax {
  MaxPoolGeom g;
  Tensor indices;  // [B, C, OH, OW] i64, or undefined when taps is set
  Tensor taps;     // [B, C, OH, OW] u8
  Tensor plane_indices() const {
    if (indices.defined()) return indices;
    Tensor idx = Tensor::empty(taps.shape(), kI64, taps.device());
    const MaxPoolGeom geom = g;  // copies: a recorded launch must not reach this struct
    const Tensor t = taps;
    KILN_LAUNCH("max_pool2d_2x2_indices", backend::cpu::max_pool2d_2x2_indices(geom, t, idx));
    return idx;
  }
};

Tensor max_pool_backward(const char* op, const Argmax& am, const Shape& in_shape, const Tensor& gy);

// (values, indices); indices only when want_indices (the 2x2 kernel then
// expands its taps; max_pool2d alone never builds them).
std::pair<Tensor, Tensor> max_pool_any(const char* op, int nsp, const Tensor& x, PoolArgs a, bool ceil_mode,
                                       bool want_indices) {
  Lifted l = lift_input(op, x, nsp);
  const Pair out = check_pool(op, nsp, x, l, a, ceil_mode);
  const Shape& s4 = l.x4.shape();
  MaxPoolGeom g{s4[0] * s4[1], s4[2], s4[3], out[0], out[1], a.k[0], a.k[1], a.s[0],
                a.s[1],        a.p[0], a.p[1], a.d[0], a.d[1]};
  Tensor values = Tensor::empty({s4[0], s4[1], out[0], out[1]}, x.dtype(), x.device());
  Argmax am{g, {}, {}};
  if (backend::cpu::is_max_pool_2x2(g)) {
    am.taps = Tensor::empty({s4[0], s4[1], out[0], out[1]}, kU8, x.device());
    KILN_LAUNCH("max_pool2d_2x2", backend::cpu::max_pool2d_2x2(g, l.x4, values, am.taps));
  } else {
    am.indices = Tensor::empty({s4[0], s4[1], out[0], out[1]}, kI64, x.device());
    KILN_LAUNCH("max_pool2d", backend::cpu::max_pool2d(g, l.x4, values, am.indices));
  }
  if (needs_grad(l.x4))
    record(op, {l.x4}, {values}, {}, [op, am, in_shape = s4](const VjpArgs& v) -> Grads {
      return {max_pool_backward(op, am, in_shape, v.grad())};
    });
  Tensor indices = want_indices ? lower(am.plane_indices(), nsp, l.batched) : Tensor();
  return {lower(values, nsp, l.batched), indices};
}

Tensor max_pool_backward(const char* op, const Argmax& am, const Shape& in_shape, const Tensor& gy) {
  Tensor gx = Tensor::empty(in_shape, gy.dtype(), gy.device());
  if (am.taps.defined()) KILN_LAUNCH(op, backend::cpu::max_pool2d_2x2_backward(am.g, gy, am.taps, gx));
  else KILN_LAUNCH(op, backend::cpu::max_pool2d_backward(am.g, gy, am.indices, gx));
  if (needs_grad(gy))
    // Linear in gy: its adjoint reads the incoming gradient at each argmax.
    record(op, {gy}, {gx}, {}, [indices = am.plane_indices(), out_shape = gy.shape()](const VjpArgs& v) -> Grads {
      Tensor flat = flatten(v.grad(), 2);  // [B, C, H * W]
      return {reshape(gather(flat, 2, flatten(indices, 2)), out_shape)};
    });
  return gx;
}

// ---- average ----

// Window tables for one dim: avg_pool's (count_include_pad or not).
void avg_table(int64_t in, int64_t out, int64_t k, int64_t s, int64_t p, bool include_pad, std::vector<int64_t>& lo,
               std::vector<int64_t>& hi, std::vector<int64_t>& n) {
  for (int64_t o = 0; o < out; ++o) {
    int64_t a = o * s - p, b = std::min(a + k, in + p);
    const int64_t padded = b - a;
    a = std::max<int64_t>(a, 0), b = std::min(b, in);
    lo.push_back(a), hi.push_back(b), n.push_back(include_pad ? padded : b - a);
  }
}

// adaptive: cell o spans [floor(o * in / out), ceil((o + 1) * in / out)).
void adaptive_table(int64_t in, int64_t out, std::vector<int64_t>& lo, std::vector<int64_t>& hi,
                    std::vector<int64_t>& n) {
  for (int64_t o = 0; o < out; ++o) {
    const int64_t a = (o * in) / out, b = ((o + 1) * in + out - 1) / out;
    lo.push_back(a), hi.push_back(b), n.push_back(b - a);
  }
}

Tensor avg_backward(const char* op, const std::shared_ptr<const AvgWindows>& w, const Shape& in_shape,
                    const Tensor& gy);

Tensor avg_forward(const char* op, const std::shared_ptr<const AvgWindows>& w, const Tensor& x4) {
  const Shape& s4 = x4.shape();
  Tensor out = Tensor::empty({s4[0], s4[1], w->OH(), w->OW()}, x4.dtype(), x4.device());
  KILN_LAUNCH("avg_pool2d", backend::cpu::avg_pool2d(*w, x4, out));
  if (needs_grad(x4))
    record(op, {x4}, {out}, {}, [op, w, in_shape = s4](const VjpArgs& v) -> Grads {
      return {avg_backward(op, w, in_shape, v.grad())};
    });
  return out;
}

Tensor avg_backward(const char* op, const std::shared_ptr<const AvgWindows>& w, const Shape& in_shape,
                    const Tensor& gy) {
  Tensor gx = Tensor::empty(in_shape, gy.dtype(), gy.device());
  KILN_LAUNCH("avg_pool2d_backward", backend::cpu::avg_pool2d_backward(*w, gy, gx));
  if (needs_grad(gy))
    record(op, {gy}, {gx}, {}, [op, w](const VjpArgs& v) -> Grads { return {avg_forward(op, w, v.grad())}; });
  return gx;
}

Tensor avg_pool_any(const char* op, int nsp, const Tensor& x, PoolArgs a, bool ceil_mode, bool include_pad) {
  Lifted l = lift_input(op, x, nsp);
  const Pair out = check_pool(op, nsp, x, l, a, ceil_mode);
  const Shape& s4 = l.x4.shape();
  auto w = std::make_shared<AvgWindows>();
  w->N = s4[0] * s4[1], w->H = s4[2], w->W = s4[3];
  avg_table(w->H, out[0], a.k[0], a.s[0], a.p[0], include_pad, w->h0, w->h1, w->hn);
  avg_table(w->W, out[1], a.k[1], a.s[1], a.p[1], include_pad, w->w0, w->w1, w->wn);
  return lower(avg_forward(op, w, l.x4), nsp, l.batched);
}

Tensor adaptive_avg_any(const char* op, int nsp, const Tensor& x, Pair size) {
  Lifted l = lift_input(op, x, nsp);
  for (int i = 2 - nsp; i < 2; ++i)
    KILN_CHECK(size[size_t(i)] > 0, op, "output_size must be positive, got {}", dims_str(size, nsp));
  const Shape& s4 = l.x4.shape();
  auto w = std::make_shared<AvgWindows>();
  w->N = s4[0] * s4[1], w->H = s4[2], w->W = s4[3];
  adaptive_table(w->H, size[0], w->h0, w->h1, w->hn);
  adaptive_table(w->W, size[1], w->w0, w->w1, w->wn);
  return lower(avg_forward(op, w, l.x4), nsp, l.batched);
}

}  // namespace

Tensor max_pool1d(const Tensor& x, int64_t kernel_size, std::optional<int64_t> stride, int64_t padding,
                  int64_t dilation, bool ceil_mode) {
  const int64_t s = stride.value_or(kernel_size);
  return max_pool_any("max_pool1d", 1, x, {{1, kernel_size}, {1, s}, {0, padding}, {1, dilation}}, ceil_mode,
                      false)
      .first;
}

Tensor max_pool2d(const Tensor& x, Size2 kernel_size, std::optional<Size2> stride, Size2 padding, Size2 dilation,
                  bool ceil_mode) {
  const Size2 s = stride.value_or(kernel_size);
  return max_pool_any("max_pool2d", 2, x,
                      {{kernel_size.h, kernel_size.w}, {s.h, s.w}, {padding.h, padding.w},
                       {dilation.h, dilation.w}},
                      ceil_mode, false)
      .first;
}

std::pair<Tensor, Tensor> max_pool1d_with_indices(const Tensor& x, int64_t kernel_size, std::optional<int64_t> stride,
                                                  int64_t padding, int64_t dilation, bool ceil_mode) {
  const int64_t s = stride.value_or(kernel_size);
  return max_pool_any("max_pool1d", 1, x, {{1, kernel_size}, {1, s}, {0, padding}, {1, dilation}}, ceil_mode,
                      true);
}

std::pair<Tensor, Tensor> max_pool2d_with_indices(const Tensor& x, Size2 kernel_size, std::optional<Size2> stride,
                                                  Size2 padding, Size2 dilation, bool ceil_mode) {
  const Size2 s = stride.value_or(kernel_size);
  return max_pool_any("max_pool2d", 2, x,
                      {{kernel_size.h, kernel_size.w}, {s.h, s.w}, {padding.h, padding.w},
                       {dilation.h, dilation.w}},
                      ceil_mode, true);
}

Tensor avg_pool1d(const Tensor& x, int64_t kernel_size, std::optional<int64_t> stride, int64_t padding,
                  bool ceil_mode, bool count_include_pad) {
  const int64_t s = stride.value_or(kernel_size);
  return avg_pool_any("avg_pool1d", 1, x, {{1, kernel_size}, {1, s}, {0, padding}, {1, 1}}, ceil_mode,
                      count_include_pad);
}

Tensor avg_pool2d(const Tensor& x, Size2 kernel_size, std::optional<Size2> stride, Size2 padding, bool ceil_mode,
                  bool count_include_pad) {
  const Size2 s = stride.value_or(kernel_size);
  return avg_pool_any("avg_pool2d", 2, x,
                      {{kernel_size.h, kernel_size.w}, {s.h, s.w}, {padding.h, padding.w}, {1, 1}},
                      ceil_mode, count_include_pad);
}

Tensor adaptive_avg_pool1d(const Tensor& x, int64_t output_size) {
  return adaptive_avg_any("adaptive_avg_pool1d", 1, x, {1, output_size});
}

Tensor adaptive_avg_pool2d(const Tensor& x, Size2 output_size) {
  return adaptive_avg_any("adaptive_avg_pool2d", 2, x, {output_size.h, output_size.w});
}

}  // namespace kiln
