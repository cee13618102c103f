// Grouping by expert (a counting sort: O(M + E), stable, so deterministic)
// and the grouped products: f32 on the grouped GEMM kernel
// (isa/grouped_gemm.cpp), other dtypes as one matmul per expert's run of rows.
#include "src/backend/cpu/moe/moe.h"

#include <algorithm>

#include "kiln/core/parallel.h"
#include "src/backend/cpu/copy/copy.h"
#include "src/backend/cpu/dispatch.h"
#include "src/backend/cpu/linalg/matmul.h"
#include "src/backend/cpu/moe/grouped.h"
#include "src/backend/cpu/moe/isa/grouped_gemm.h"

namespace kiln::backend::cpu {

using moe_detail::grouped_rows;
using moe_detail::grouped_weight_grad_rows;

namespace {
const int64_t* rows_ptr(const Tensor& t) { return t.defined() ? static_cast<const int64_t*>(t.data_ptr()) : nullptr; }
}  // namespace

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

namespace {

// The f32 kernel's arguments: a [rows, K] (gathered by a_rows), b per
// expert, out [rows, N] (scattered by o_rows).
GroupedGemm grouped_gemm_args(const Tensor& a, const Tensor& b, const std::vector<int64_t>& sizes, const Tensor& out,
                              bool trans_b, const Tensor& a_rows, const Tensor& o_rows) {
  return GroupedGemm{.E = int64_t(sizes.size()),
                     .sizes = sizes.data(),
                     .a = static_cast<const float*>(a.data_ptr()),
                     .lda = a.size(1),
                     .a_rows = rows_ptr(a_rows),
                     .b = static_cast<const float*>(b.data_ptr()),
                     .trans_b = trans_b,
                     .K = a.size(1),
                     .N = out.size(1),
                     .out = static_cast<float*>(out.data_ptr()),
                     .ldo = out.size(1),
                     .o_rows = rows_ptr(o_rows)};
}

}  // namespace

void grouped_matmul(const Tensor& a, const Tensor& b, const std::vector<int64_t>& sizes, const Tensor& out,
                    bool trans_b, const Tensor& a_rows, const Tensor& o_rows) {
  if (out.dtype() == kF32) {
    GroupedGemm g = grouped_gemm_args(a, b, sizes, out, trans_b, a_rows, o_rows);
    KILN_ISA_CALL(grouped_gemm_f32, g);
    return;
  }
  grouped_rows(a, b, sizes, out, trans_b, a_rows, o_rows,
               [](const Tensor& x, const Tensor& w, const Tensor& o) { matmul(x, w, o); });
}

void grouped_matmul_gelu(const Tensor& a, const Tensor& b, const std::vector<int64_t>& sizes, const Tensor& out,
                         const Tensor& gelu_grad, const Tensor& a_rows, const Tensor& o_rows) {
  KILN_CHECK(out.dtype() == kF32, "grouped_linear_gelu", "the fused kernel is f32 only, got {}", name(out.dtype()));
  GroupedGemm g = grouped_gemm_args(a, b, sizes, out, /*trans_b=*/true, a_rows, o_rows);
  g.gelu = true;
  g.gelu_grad = gelu_grad.defined() ? static_cast<float*>(gelu_grad.data_ptr()) : nullptr;
  KILN_ISA_CALL(grouped_gemm_f32, g);
}

void grouped_matmul_weight_grad(const Tensor& dy, const Tensor& x, const std::vector<int64_t>& sizes,
                                const Tensor& dw, const Tensor& dy_rows, const Tensor& x_rows) {
  if (dw.dtype() == kF32) {
    GroupedGemmWeightGrad g{.E = int64_t(sizes.size()),
                            .sizes = sizes.data(),
                            .dy = static_cast<const float*>(dy.data_ptr()),
                            .ldy = dy.size(1),
                            .dy_rows = rows_ptr(dy_rows),
                            .x = static_cast<const float*>(x.data_ptr()),
                            .ldx = x.size(1),
                            .x_rows = rows_ptr(x_rows),
                            .N = dw.size(1),
                            .K = dw.size(2),
                            .dw = static_cast<float*>(dw.data_ptr())};
    KILN_ISA_CALL(grouped_gemm_weight_grad_f32, g);
    return;
  }
  grouped_weight_grad_rows(dy, x, sizes, dw, dy_rows, x_rows,
                           [](const Tensor& g, const Tensor& xe, const Tensor& o) { matmul(g, xe, o); });
}

void moe_combine(const Tensor& y, const Tensor& w, const Tensor& out) {
  const int64_t N = w.size(0), k = w.size(1), D = y.size(1);
  dispatch_only<bfloat16, float, double>(
      out.dtype(),
      [&](auto tag) {
        using T = typename decltype(tag)::type;
        using A = acc_t<T>;
        const T* yp = static_cast<const T*>(y.data_ptr());
        const T* wp = static_cast<const T*>(w.data_ptr());
        T* op = static_cast<T*>(out.data_ptr());
        parallel_for(0, N, std::max<int64_t>(1, 16384 / std::max<int64_t>(1, k * D)), [&](int64_t lo, int64_t hi) {
          std::vector<A> acc(static_cast<size_t>(D));
          for (int64_t n = lo; n < hi; ++n) {
            std::fill(acc.begin(), acc.end(), A(0));
            for (int64_t j = 0; j < k; ++j) {
              const A wj = A(wp[n * k + j]);
              const T* yr = yp + (n * k + j) * D;
#pragma omp simd
              for (int64_t d = 0; d < D; ++d) acc[size_t(d)] += wj * A(yr[d]);
            }
            for (int64_t d = 0; d < D; ++d) op[n * D + d] = T(acc[size_t(d)]);
          }
        });
      },
      "moe_combine");
}

void moe_combine_backward(const Tensor& g, const Tensor& y, const Tensor& w, const Tensor& dy, const Tensor& dw) {
  const int64_t N = w.size(0), k = w.size(1), D = y.size(1);
  dispatch_only<bfloat16, float, double>(
      g.dtype(),
      [&](auto tag) {
        using T = typename decltype(tag)::type;
        using A = acc_t<T>;
        const T* gp = static_cast<const T*>(g.data_ptr());
        const T* yp = static_cast<const T*>(y.data_ptr());
        const T* wp = static_cast<const T*>(w.data_ptr());
        T* dyp = dy.defined() ? static_cast<T*>(dy.data_ptr()) : nullptr;
        T* dwp = dw.defined() ? static_cast<T*>(dw.data_ptr()) : nullptr;
        parallel_for(0, N, std::max<int64_t>(1, 16384 / std::max<int64_t>(1, k * D)), [&](int64_t lo, int64_t hi) {
          for (int64_t n = lo; n < hi; ++n) {
            const T* gr = gp + n * D;
            for (int64_t j = 0; j < k; ++j) {
              const int64_t row = n * k + j;
              if (dyp) {
                const A wj = A(wp[row]);
                T* d = dyp + row * D;
#pragma omp simd
                for (int64_t c = 0; c < D; ++c) d[c] = T(wj * A(gr[c]));
              }
              if (dwp) {  // a dot product of D: vector partial sums (a fixed order, not a serial chain)
                const T* yr = yp + row * D;
                A s = 0;
#pragma omp simd reduction(+ : s)
                for (int64_t c = 0; c < D; ++c) s += A(gr[c]) * A(yr[c]);
                dwp[row] = T(s);
              }
            }
          }
        });
      },
      "moe_combine");
}

}  // namespace kiln::backend::cpu
