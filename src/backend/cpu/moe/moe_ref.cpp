// The plain references of the MoE kernels (moe.cpp): std::stable_sort for the
// grouping and the triple-loop matmul per run: the oracles the kernels are tested against.
#include <algorithm>

#include "src/backend/cpu/copy/copy.h"
#include "src/backend/cpu/linalg/matmul.h"
#include "src/backend/cpu/moe/moe.h"

namespace kiln::backend::cpu::ref {

namespace {

Tensor view(const Tensor& t, Shape shape, Strides strides, int64_t offset) {
  return Tensor::make_view(t.storage(), std::move(shape), std::move(strides), t.storage_offset() + offset, t.dtype());
}

// Rows [r0, r0 + n) of a contiguous [M, C] tensor.
Tensor rows(const Tensor& t, int64_t r0, int64_t n) {
  const int64_t C = t.size(1);
  return view(t, {n, C}, {C, 1}, r0 * C);
}

// b[e] of a contiguous [E, P, Q] tensor, transposed to [Q, P] when trans.
Tensor slab(const Tensor& b, int64_t e, bool trans) {
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

}  // namespace


void moe_group(const Tensor& experts, int64_t E, const Tensor& order, const Tensor& counts) {
  const int64_t M = experts.numel();
  const int64_t* ex = static_cast<const int64_t*>(experts.data_ptr());
  int64_t* ord = static_cast<int64_t*>(order.data_ptr());
  int64_t* cnt = static_cast<int64_t*>(counts.data_ptr());
  std::vector<int64_t> ids(static_cast<size_t>(M));
  for (int64_t i = 0; i < M; ++i) ids[size_t(i)] = i;
  std::stable_sort(ids.begin(), ids.end(), [&](int64_t p, int64_t q) { return ex[p] < ex[q]; });
  std::copy(ids.begin(), ids.end(), ord);
  for (int64_t e = 0; e < E; ++e) cnt[e] = int64_t(std::count(ex, ex + M, e));
}

void grouped_matmul(const Tensor& a, const Tensor& b, const std::vector<int64_t>& sizes, const Tensor& out,
                    bool trans_b) {
  grouped(a, b, sizes, out, trans_b, [](const Tensor& x, const Tensor& w, const Tensor& o) { cpu::ref::matmul(x, w, o); });
}

void grouped_matmul_weight_grad(const Tensor& dy, const Tensor& x, const std::vector<int64_t>& sizes,
                                const Tensor& dw) {
  grouped_weight_grad(dy, x, sizes, dw,
                      [](const Tensor& g, const Tensor& xe, const Tensor& o) { cpu::ref::matmul(g, xe, o); });
}

}  // namespace kiln::backend::cpu::ref
