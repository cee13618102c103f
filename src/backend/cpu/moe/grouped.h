// The grouped products' loop over experts, shared by the kernels (moe.cpp,
// oneDNN matmul per run) and their references (moe_ref.cpp, the triple loop):
// each expert's run of rows is a view of the operands, nothing is copied.
#pragma once

#include <cstdint>
#include <vector>

#include "kiln/core/tensor.h"
#include "src/backend/cpu/copy/copy.h"

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


}  // namespace kiln::backend::cpu::moe_detail
