// The grouped products' loop over experts, shared by the non-f32 kernels
// (moe.cpp: one matmul per run) and the references (moe_ref.cpp, the triple
// loop): each expert's run of rows is a view of the operands; the row maps
// (fused gather / scatter, ../moe.h) become plain index_select copies here.
#pragma once

#include <cstdint>
#include <vector>

#include "kiln/core/tensor.h"
#include "src/backend/cpu/copy/copy.h"
#include "src/backend/cpu/index/index.h"

namespace kiln::backend::cpu::moe_detail {

inline Tensor view(const Tensor& t, Shape shape, Strides strides, int64_t offset) {
  return Tensor::make_view(t.storage(), std::move(shape), std::move(strides), t.storage_offset() + offset, t.dtype());
}

// Rows [r0, r0 + n) of a contiguous [M, C] tensor.
inline Tensor rows(const Tensor& t, int64_t r0, int64_t n) {
  const int64_t C = t.size(1);
  return view(t, {n, C}, {C, 1}, r0 * C);
}

// b[e] of a contiguous [E, P, Q] tensor, transposed to [Q, P] when trans.
inline Tensor slab(const Tensor& b, int64_t e, bool trans) {
  const int64_t P = b.size(1), Q = b.size(2);
  return trans ? view(b, {Q, P}, {1, Q}, e * P * Q) : view(b, {P, Q}, {Q, 1}, e * P * Q);
}

template <class Mm>
void grouped(const Tensor& a, const Tensor& b, const std::vector<int64_t>& sizes, const Tensor& out, bool trans_b,
             Mm&& mm) {
  int64_t r0 = 0;
  for (size_t e = 0; e < sizes.size(); ++e) {
    const int64_t n = sizes[e];
    if (n > 0) mm(rows(a, r0, n), slab(b, int64_t(e), trans_b), rows(out, r0, n));
    r0 += n;
  }
}

template <class Mm>
void grouped_weight_grad(const Tensor& dy, const Tensor& x, const std::vector<int64_t>& sizes, const Tensor& dw,
                         Mm&& mm) {
  const int64_t N = dy.size(1), K = x.size(1);
  int64_t r0 = 0;
  for (size_t e = 0; e < sizes.size(); ++e) {
    const int64_t n = sizes[e];
    Tensor dwe = view(dw, {N, K}, {K, 1}, int64_t(e) * N * K);
    if (n > 0) {
      mm(view(dy, {N, n}, {1, N}, r0 * N), rows(x, r0, n), dwe);  // dy_e^T [N, n] @ x_e [n, K]
    } else {
      fill(dwe, 0);
    }
    r0 += n;
  }
}

// a's rows in grouped order: a itself, or a copy gathered through rows [M].
inline Tensor gathered(const Tensor& a, const Tensor& rows) {
  if (!rows.defined()) return a;
  Tensor g = Tensor::empty({rows.numel(), a.size(1)}, a.dtype(), a.device());
  index_select(a, 0, rows, g);
  return g;
}

// grouped() through the row maps: out[o_rows[r]] = (a[a_rows[r]] @ op(b[e])).
template <class Mm>
void grouped_rows(const Tensor& a, const Tensor& b, const std::vector<int64_t>& sizes, const Tensor& out,
                  bool trans_b, const Tensor& a_rows, const Tensor& o_rows, Mm&& mm) {
  const Tensor ag = gathered(a, a_rows);
  if (!o_rows.defined()) {
    grouped(ag, b, sizes, out, trans_b, mm);
    return;
  }
  Tensor tmp = Tensor::empty({ag.size(0), out.size(1)}, out.dtype(), out.device());
  grouped(ag, b, sizes, tmp, trans_b, mm);
  const int64_t* rows = static_cast<const int64_t*>(o_rows.data_ptr());
  for (int64_t r = 0; r < tmp.size(0); ++r) copy(cpu::moe_detail::rows(tmp, r, 1), cpu::moe_detail::rows(out, rows[r], 1));
}

template <class Mm>
void grouped_weight_grad_rows(const Tensor& dy, const Tensor& x, const std::vector<int64_t>& sizes, const Tensor& dw,
                              const Tensor& dy_rows, const Tensor& x_rows, Mm&& mm) {
  grouped_weight_grad(gathered(dy, dy_rows), gathered(x, x_rows), sizes, dw, mm);
}

}  // namespace kiln::backend::cpu::moe_detail
