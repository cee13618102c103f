// Joining and rearranging: cat/stack, split/chunk/unbind (views), flip, roll,
// constant pad, repeat, tril/triu. Vjps are the inverse rearrangements.
#include <algorithm>

#include "kiln/core/grad_mode.h"
#include "kiln/ops/creation.h"
#include "kiln/ops/index.h"
#include "kiln/ops/record.h"
#include "kiln/ops/shape.h"
#include "src/backend/cpu/copy/copy.h"
#include "src/backend/cpu/index/index.h"
#include "src/ops/checks.h"

namespace kiln {

namespace {

Tensor alias(const Tensor& x, Shape shape, Strides strides, int64_t offset) {
  return Tensor::make_view(x.storage(), std::move(shape), std::move(strides), offset, x.dtype());
}

// The window of t starting at `start` with sizes `len` (a view, not recorded).
Tensor window(const Tensor& t, const Shape& start, const Shape& len) {
  int64_t off = t.storage_offset();
  for (size_t d = 0; d < start.size(); ++d) off += start[d] * t.strides()[d];
  return alias(t, len, t.strides(), off);
}

// PyTorch skips 1-D empty tensors in cat whatever the other shapes are.
bool skipped_in_cat(const Tensor& t) { return t.dim() == 1 && t.shape()[0] == 0; }

}  // namespace

Tensor cat(const std::vector<Tensor>& xs, int64_t dim) {
  KILN_CHECK(!xs.empty(), "cat", "expected a non-empty list of tensors");
  int64_t first = -1;  // the tensor whose shape the others must match
  DType dtype = xs[0].defined() ? xs[0].dtype() : kF32;
  for (size_t i = 0; i < xs.size(); ++i) {
    KILN_CHECK(xs[i].defined(), "cat", "tensor {} is undefined", i);
    check_device("cat", xs[i].device());
    KILN_CHECK(xs[i].dim() > 0, "cat", "tensor {} is 0-dim and cannot be concatenated", i);
    dtype = promote_types(dtype, xs[i].dtype());
    if (first < 0 && !skipped_in_cat(xs[i])) first = int64_t(i);
  }
  // When every input is skipped the result is an empty [0] like them.
  const Tensor& ref = xs[size_t(std::max<int64_t>(first, 0))];
  int64_t d = first < 0 ? 0 : wrap_dim("cat", dim, ref.dim());
  Shape s = ref.shape();
  s[size_t(d)] = 0;
  std::vector<Tensor> used;
  for (size_t i = 0; i < xs.size(); ++i) {
    const Tensor& x = xs[i];
    if (skipped_in_cat(x)) continue;
    KILN_CHECK(x.dim() == ref.dim(), "cat", "tensor {} has {} dims ({}), expected {} like tensor {} ({})", i, x.dim(),
               to_string(x.shape()), ref.dim(), first, to_string(ref.shape()));
    for (int64_t k = 0; k < ref.dim(); ++k)
      KILN_CHECK(k == d || x.shape()[size_t(k)] == ref.shape()[size_t(k)], "cat",
                 "sizes must match except in dim {}: tensor {} has shape {} but tensor {} has {} (dim {}: {} vs {})", d,
                 i, to_string(x.shape()), first, to_string(ref.shape()), k, x.shape()[size_t(k)],
                 ref.shape()[size_t(k)]);
    s[size_t(d)] += x.shape()[size_t(d)];
    used.push_back(x);
  }
  Tensor out = Tensor::empty(s, dtype, ref.device());
  KILN_LAUNCH("cat", backend::cpu::cat(used, d, out));
  if (is_floating(dtype) && needs_grad(std::span<const Tensor>(xs))) {
    // Per input: where its slice starts along d, its size and dtype (-1: skipped).
    struct Part {
      int64_t start, size;
      DType dtype;
    };
    std::vector<Part> parts;
    int64_t start = 0;
    for (const Tensor& x : xs) {
      bool skip = skipped_in_cat(x);
      parts.push_back({skip ? -1 : start, x.shape()[skip ? 0 : size_t(d)], x.dtype()});
      if (!skip) start += x.shape()[size_t(d)];
    }
    record("cat", std::span<const Tensor>(xs), std::span<const Tensor>(&out, 1), {},
           [d, parts = std::move(parts)](const VjpArgs& a) -> Grads {
             Grads g(parts.size());
             for (size_t i = 0; i < parts.size(); ++i) {
               if (!a.needs(i)) continue;
               g[i] = parts[i].start < 0 ? zeros({0}, {.dtype = parts[i].dtype, .device = a.grad().device()})
                                         : to(narrow(a.grad(), d, parts[i].start, parts[i].size), parts[i].dtype);
             }
             return g;
           });
  }
  return out;
}

Tensor stack(const std::vector<Tensor>& xs, int64_t dim) {
  KILN_CHECK(!xs.empty(), "stack", "expected a non-empty list of tensors");
  for (size_t i = 0; i < xs.size(); ++i) {
    KILN_CHECK(xs[i].defined(), "stack", "tensor {} is undefined", i);
    check_device("stack", xs[i].device());
    KILN_CHECK(xs[i].shape() == xs[0].shape(), "stack", "tensor {} has shape {}, expected {} like tensor 0", i,
               to_string(xs[i].shape()), to_string(xs[0].shape()));
  }
  int64_t d = wrap_dim("stack", dim, xs[0].dim() + 1);
  std::vector<Tensor> parts;
  parts.reserve(xs.size());
  for (const Tensor& x : xs) parts.push_back(unsqueeze(x, d));
  return cat(parts, d);
}

namespace {

// The gradients of split's pieces as one view when they already are the
// consecutive slices along d of one tensor (same storage, dtype and strides,
// each starting where the one before ends): the attention's q, k, v gradients
// written into one [B, T, 3 C] buffer join with no copy. Undefined otherwise,
// and always under create_graph (the view would not be on the tape).
Tensor joined(const std::vector<Tensor>& gs, int64_t d) {
  if (GradMode::is_enabled() || gs.empty()) return {};
  const Tensor& g0 = gs[0];
  if (!g0.defined() || g0.requires_grad()) return {};
  const int64_t step = g0.strides()[size_t(d)];
  if (step <= 0) return {};  // expanded along d: cat makes a fresh tensor
  int64_t next = g0.storage_offset(), len = 0;
  for (const Tensor& g : gs) {
    if (!g.defined() || g.requires_grad() || !g.is_same_storage(g0) || g.dtype() != g0.dtype() ||
        g.strides() != g0.strides() || g.storage_offset() != next || g.shape()[size_t(d)] == 0)
      return {};
    for (int64_t k = 0; k < g.dim(); ++k)
      if (k != d && g.shape()[size_t(k)] != g0.shape()[size_t(k)]) return {};
    next += g.shape()[size_t(d)] * step;
    len += g.shape()[size_t(d)];
  }
  Shape s = g0.shape();
  s[size_t(d)] = len;
  return alias(g0, std::move(s), g0.strides(), g0.storage_offset());
}

// Views of x along d with the given sizes (dropping d when `drop_dim`, for
// unbind), recorded as one node whose vjp joins the gradients back.
std::vector<Tensor> pieces(const char* op, const Tensor& x, int64_t d, const std::vector<int64_t>& sizes,
                           bool drop_dim) {
  std::vector<Tensor> out;
  out.reserve(sizes.size());
  int64_t start = 0;
  for (int64_t len : sizes) {
    Shape s = x.shape();
    Strides st = x.strides();
    s[size_t(d)] = len;
    if (drop_dim) {
      s.erase(size_t(d));
      st.erase(size_t(d));
    }
    out.push_back(alias(x, std::move(s), std::move(st), x.storage_offset() + start * x.strides()[size_t(d)]));
    start += len;
  }
  if (needs_grad(x))
    record(op, std::span<const Tensor>(&x, 1), std::span<const Tensor>(out), {}, [d, drop_dim](const VjpArgs& a) -> Grads {
      std::vector<Tensor> gs(a.grads.begin(), a.grads.end());
      if (!drop_dim) {
        if (Tensor whole = joined(gs, d); whole.defined()) return {whole};
      }
      return {drop_dim ? stack(gs, d) : cat(gs, d)};
    });
  return out;
}

int64_t split_dim(const char* op, const Tensor& x, int64_t dim) {
  check_defined(op, x);
  KILN_CHECK(x.dim() > 0, op, "cannot split a 0-dim tensor");
  return wrap_dim(op, dim, x.dim());
}

std::vector<int64_t> sizes_of_split(const char* op, int64_t n, int64_t size) {
  KILN_CHECK(size > 0 || (size == 0 && n == 0), op, "split size must be positive (0 only for an empty dim), got {} for a dim of size {}", size, n);
  if (n == 0) return {0};
  std::vector<int64_t> sizes;
  for (int64_t s = 0; s < n; s += size) sizes.push_back(std::min(size, n - s));
  return sizes;
}

}  // namespace

std::vector<Tensor> split(const Tensor& x, int64_t size, int64_t dim) {
  int64_t d = split_dim("split", x, dim);
  return pieces("split", x, d, sizes_of_split("split", x.shape()[size_t(d)], size), false);
}

std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim) {
  int64_t d = split_dim("split", x, dim);
  int64_t total = 0;
  for (int64_t s : sizes) {
    KILN_CHECK(s >= 0, "split", "sizes must be non-negative, got {}", to_string(Shape(sizes)));
    total += s;
  }
  KILN_CHECK(total == x.shape()[size_t(d)], "split", "sizes {} add up to {}, but dim {} of input {} has size {}",
             to_string(Shape(sizes)), total, d, to_string(x.shape()), x.shape()[size_t(d)]);
  return pieces("split", x, d, sizes, false);
}

std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim) {
  int64_t d = split_dim("chunk", x, dim);
  KILN_CHECK(chunks > 0, "chunk", "chunks must be positive, got {}", chunks);
  int64_t n = x.shape()[size_t(d)];
  // Like torch: an empty dim gives `chunks` empty pieces.
  if (n == 0) return pieces("chunk", x, d, std::vector<int64_t>(size_t(chunks), 0), false);
  return pieces("chunk", x, d, sizes_of_split("chunk", n, (n + chunks - 1) / chunks), false);
}

std::vector<Tensor> unbind(const Tensor& x, int64_t dim) {
  int64_t d = split_dim("unbind", x, dim);
  return pieces("unbind", x, d, std::vector<int64_t>(size_t(x.shape()[size_t(d)]), 1), true);
}

Tensor flip(const Tensor& x, const Shape& dims) {
  check_defined("flip", x);
  // Reading x through negative strides and copying gives the flipped tensor.
  Strides st = x.strides();
  int64_t off = x.storage_offset();
  std::vector<bool> seen(size_t(std::max<int64_t>(x.dim(), 1)), false);
  for (int64_t dim : dims) {
    int64_t d = wrap_dim("flip", dim, x.dim());
    KILN_CHECK(!seen[size_t(d)], "flip", "dim {} appears more than once in dims {}", d, to_string(dims));
    seen[size_t(d)] = true;
    if (x.dim() == 0) continue;
    off += (x.shape()[size_t(d)] - 1) * st[size_t(d)];
    st[size_t(d)] = -st[size_t(d)];
  }
  Tensor out = Tensor::empty(x.shape(), x.dtype(), x.device());
  if (out.numel() > 0) KILN_LAUNCH("copy", backend::cpu::copy(alias(x, x.shape(), st, off), out));
  if (needs_grad(x)) record("flip", {x}, {out}, {}, [dims](const VjpArgs& a) -> Grads { return {flip(a.grad(), dims)}; });
  return out;
}

Tensor roll(const Tensor& x, int64_t shift, int64_t dim) {
  check_defined("roll", x);
  int64_t d = wrap_dim("roll", dim, x.dim());
  if (x.dim() == 0) return clone(x);
  int64_t n = x.shape()[size_t(d)];
  int64_t s = n == 0 ? 0 : ((shift % n) + n) % n;
  if (s == 0) return clone(x);
  // The last s elements move to the front.
  return cat({narrow(x, d, n - s, s), narrow(x, d, 0, n - s)}, d);
}

Tensor roll(const Tensor& x, int64_t shift) {
  check_defined("roll", x);
  if (x.dim() == 1) return roll(x, shift, 0);
  return reshape(roll(flatten(x), shift, 0), x.shape());
}

Tensor pad(const Tensor& x, const std::vector<int64_t>& pad_, Scalar value) {
  check_defined("pad", x);
  const int64_t nd = x.dim(), pairs = int64_t(pad_.size()) / 2;
  KILN_CHECK(pad_.size() % 2 == 0, "pad", "padding {} has odd length {}; it must be (lo, hi) pairs",
             to_string(Shape(pad_)), pad_.size());
  KILN_CHECK(pairs <= nd, "pad", "padding {} covers {} dims, but input {} has only {}", to_string(Shape(pad_)),
             pairs, to_string(x.shape()), nd);
  // Pair j pads dim nd-1-j. Out sizes; the window of x that survives and
  // where it lands in out.
  Shape s = x.shape(), src_start = Shape::filled(size_t(nd), 0), dst_start = Shape::filled(size_t(nd), 0),
        len = x.shape();
  for (int64_t j = 0; j < pairs; ++j) {
    size_t d = size_t(nd - 1 - j);
    int64_t lo = pad_[size_t(2 * j)], hi = pad_[size_t(2 * j + 1)], n = x.shape()[d];
    KILN_CHECK(n + lo + hi >= 0, "pad", "dim {} of size {} padded by ({}, {}) would have negative size {} (input {})",
               d, n, lo, hi, n + lo + hi, to_string(x.shape()));
    s[d] = n + lo + hi;
    src_start[d] = std::max<int64_t>(0, -lo);
    dst_start[d] = std::max<int64_t>(0, lo);
    len[d] = std::max<int64_t>(0, n + std::min<int64_t>(lo, 0) + std::min<int64_t>(hi, 0));
    len[d] = std::min(len[d], s[d]);
  }
  Tensor out = full(s, value, {.dtype = x.dtype(), .device = x.device()});
  if (numel(len) > 0) KILN_LAUNCH("copy", backend::cpu::copy(window(x, src_start, len), window(out, dst_start, len)));
  if (needs_grad(x))
    record("pad", {x}, {out}, {}, [pad_](const VjpArgs& a) -> Grads {
      // Cropping undoes padding and zero-padding undoes cropping.
      std::vector<int64_t> inv(pad_.size());
      for (size_t i = 0; i < pad_.size(); ++i) inv[i] = -pad_[i];
      return {pad(a.grad(), inv, 0)};
    });
  return out;
}

Tensor repeat(const Tensor& x, const Shape& repeats) {
  check_defined("repeat", x);
  const int64_t nr = int64_t(repeats.size()), lead = nr - x.dim();
  KILN_CHECK(lead >= 0, "repeat", "{} repeats {} given for input {} with {} dims; need at least {}", nr,
             to_string(repeats), to_string(x.shape()), x.dim(), x.dim());
  // x viewed as [1, s0, 1, s1, ...] and expanded to [r0, s0, r1, s1, ...];
  // a contiguous copy of that, viewed as [r0 * s0, r1 * s1, ...], is the result.
  Shape inter, big, out;
  for (int64_t i = 0; i < nr; ++i) {
    KILN_CHECK(repeats[size_t(i)] >= 0, "repeat", "repeats must be non-negative, got {}", to_string(repeats));
    int64_t si = i < lead ? 1 : x.shape()[size_t(i - lead)];
    inter.push_back(1);
    inter.push_back(si);
    big.push_back(repeats[size_t(i)]);
    big.push_back(si);
    out.push_back(repeats[size_t(i)] * si);
  }
  return view(clone(expand(reshape(x, inter), big)), out);
}

namespace {
Tensor triangle(const char* op, const Tensor& x, int64_t k, bool lower) {
  check_defined(op, x);
  KILN_CHECK(x.dim() >= 2, op, "input {} has {} dims, expected at least 2", to_string(x.shape()), x.dim());
  Tensor out = Tensor::empty(x.shape(), x.dtype(), x.device());
  KILN_LAUNCH("triangle", backend::cpu::triangle(x, k, lower, out));
  if (needs_grad(x))
    record(op, {x}, {out}, {}, [k, lower](const VjpArgs& a) -> Grads {
      return {lower ? tril(a.grad(), k) : triu(a.grad(), k)};
    });
  return out;
}
}  // namespace

Tensor tril(const Tensor& x, int64_t k) { return triangle("tril", x, k, true); }
Tensor triu(const Tensor& x, int64_t k) { return triangle("triu", x, k, false); }

}  // namespace kiln
