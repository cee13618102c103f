// The plain references of the MoE kernels (moe.cpp): std::stable_sort for the
// grouping and the triple-loop matmul per run: the oracles the kernels are tested against.
#include <algorithm>

#include "src/backend/cpu/copy/copy.h"
#include "src/backend/cpu/linalg/matmul.h"
#include "src/backend/cpu/moe/grouped.h"
#include "src/backend/cpu/moe/moe.h"

namespace kiln::backend::cpu::ref {

using moe_detail::grouped_rows;
using moe_detail::grouped_weight_grad_rows;


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
                    bool trans_b, const Tensor& a_rows, const Tensor& o_rows) {
  grouped_rows(a, b, sizes, out, trans_b, a_rows, o_rows,
               [](const Tensor& x, const Tensor& w, const Tensor& o) { cpu::ref::matmul(x, w, o); });
}

void grouped_matmul_weight_grad(const Tensor& dy, const Tensor& x, const std::vector<int64_t>& sizes,
                                const Tensor& dw, const Tensor& dy_rows, const Tensor& x_rows) {
  grouped_weight_grad_rows(dy, x, sizes, dw, dy_rows, x_rows,
                           [](const Tensor& g, const Tensor& xe, const Tensor& o) { cpu::ref::matmul(g, xe, o); });
}

}  // namespace kiln::backend::cpu::ref
