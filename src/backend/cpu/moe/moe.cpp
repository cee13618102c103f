// Grouping by expert (a counting sort: O(M + E), stable, so deterministic)
// and grouped products as one oneDNN matmul per expert's run of rows, on
// views of the operands (nothing copied).
#include "src/backend/cpu/moe/moe.h"

#include <algorithm>

#include "src/backend/cpu/copy/copy.h"
#include "src/backend/cpu/linalg/matmul.h"
#include "src/backend/cpu/moe/grouped.h"

namespace kiln::backend::cpu {

using moe_detail::grouped;
using moe_detail::grouped_weight_grad;

void moe_group(const Tensor& experts, int64_t E, const Tensor& order, const Tensor& counts) {
  const int64_t M = experts.numel();
  const int64_t* ex = static_cast<const int64_t*>(experts.data_ptr());
  int64_t* ord = static_cast<int64_t*>(order.data_ptr());
  int64_t* cnt = static_cast<int64_t*>(counts.data_ptr());
  std::fill(cnt, cnt + E, int64_t(0));
  for (int64_t i = 0; i < M; ++i) ++cnt[ex[i]];
  std::vector<int64_t> next(static_cast<size_t>(E), 0);  // the next free position of each expert's run
  for (int64_t e = 1; e < E; ++e) next[size_t(e)] = next[size_t(e - 1)] + cnt[e - 1];
  for (int64_t i = 0; i < M; ++i) ord[next[size_t(ex[i])]++] = i;
}

void grouped_matmul(const Tensor& a, const Tensor& b, const std::vector<int64_t>& sizes, const Tensor& out,
                    bool trans_b) {
  grouped(a, b, sizes, out, trans_b, [](const Tensor& x, const Tensor& w, const Tensor& o) { matmul(x, w, o); });
}

void grouped_matmul_weight_grad(const Tensor& dy, const Tensor& x, const std::vector<int64_t>& sizes,
                                const Tensor& dw) {
  grouped_weight_grad(dy, x, sizes, dw, [](const Tensor& g, const Tensor& xe, const Tensor& o) { matmul(g, xe, o); });
}

}  // namespace kiln::backend::cpu
