// CPU kernels of the mixture-of-experts layer (nn::MoE, docs/moe.md): grouping
// the (token, slot) assignments by expert, and grouped matrix products whose
// rows come in contiguous runs, one run per expert. Every token's k
// assignments are kept: nothing is dropped, no capacity.
#pragma once

#include <cstdint>
#include <vector>

#include "kiln/core/tensor.h"

namespace kiln::backend::cpu {

/// Groups M assignments by expert with a stable counting sort.
/// experts [M] i64 (contiguous), values in [0, E) (checked by the caller).
/// order [M] i64 (contiguous, written): order[p] is the assignment at sorted
/// position p (ascending expert, then ascending assignment id), so the run of
/// expert e is positions [offset_e, offset_e + counts[e]).
/// counts [E] i64 (contiguous, written).
void moe_group(const Tensor& experts, int64_t num_experts, const Tensor& order, const Tensor& counts);

/// out[o_row(r)] = a[a_row(r)] @ op(b[e]) for every row r of run e, where
/// the runs are given by `sizes` (sum = M) and op(b[e]) is b[e]^T when
/// trans_b (b [E, N, K]) else b[e] (b [E, K, N]). a [Ta, K], out [To, N]
/// contiguous; a_row(r) = a_rows[r] when a_rows ([M] i64, values in [0, Ta))
/// is given, else r (Ta = M): a fused gather; o_row(r) = o_rows[r] likewise
/// (distinct values: a fused scatter; rows of out no run writes are left as
/// they were). Empty runs are skipped. One dtype for a, b and out. f32 runs
/// on the grouped GEMM kernel (isa/grouped_gemm.cpp: one parallel loop over
/// (expert, row block), B packed per expert); bf16 and f64 gather into
/// copies and run one matmul per run.
void grouped_matmul(const Tensor& a, const Tensor& b, const std::vector<int64_t>& sizes, const Tensor& out,
                    bool trans_b, const Tensor& a_rows = {}, const Tensor& o_rows = {});

/// grouped_matmul (trans_b) with the exact GELU applied to the product in
/// the kernel's epilogue: out = gelu(product) and, when gelu_grad ([To, N],
/// like out) is defined, gelu_grad = gelu'(product), bit for bit the
/// elementwise gelu kernel and its backward's derivative on f32 (the
/// expert MLP's first product, whose pre-activation is then never stored).
/// f32 only (the op composes grouped_linear and gelu for the others).
void grouped_matmul_gelu(const Tensor& a, const Tensor& b, const std::vector<int64_t>& sizes, const Tensor& out,
                         const Tensor& gelu_grad, const Tensor& a_rows = {}, const Tensor& o_rows = {});

/// dw[e] = dy[dy_row(r) for r in run e]^T @ x[x_row(r) for r in run e] for
/// each expert: dy [Ty, N], x [Tx, K], dw [E, N, K] contiguous (written;
/// zero for experts with empty runs); dy_rows / x_rows as a_rows above.
/// Each dw[e] element is summed over its run in row order by one thread.
void grouped_matmul_weight_grad(const Tensor& dy, const Tensor& x, const std::vector<int64_t>& sizes,
                                const Tensor& dw, const Tensor& dy_rows = {}, const Tensor& x_rows = {});

/// The f32 kernels' arguments (isa/grouped_gemm.h): raw pointers, row-major
/// operands with leading dims; a null row map is the identity.
struct GroupedGemm {
  int64_t E = 0;
  const int64_t* sizes = nullptr;  // [E] run lengths
  const float* a = nullptr;        // [*, K], rows lda apart
  int64_t lda = 0;
  const int64_t* a_rows = nullptr;  // [M] or null
  const float* b = nullptr;         // [E, N, K] (trans_b) or [E, K, N], contiguous
  bool trans_b = true;
  int64_t K = 0, N = 0;
  float* out = nullptr;  // [*, N], rows ldo apart
  int64_t ldo = 0;
  const int64_t* o_rows = nullptr;  // [M] or null
  // Epilogue: gelu stores the exact GELU of the product (bitwise fn::Gelu),
  // and gelu_grad (null: not computed; laid out as out, same rows) its
  // derivative (bitwise math::gelu_grad_f32), from one Phi and exponential.
  bool gelu = false;
  float* gelu_grad = nullptr;
};
struct GroupedGemmWeightGrad {
  int64_t E = 0;
  const int64_t* sizes = nullptr;
  const float* dy = nullptr;  // [*, N], rows ldy apart
  int64_t ldy = 0;
  const int64_t* dy_rows = nullptr;
  const float* x = nullptr;  // [*, K], rows ldx apart
  int64_t ldx = 0;
  const int64_t* x_rows = nullptr;
  int64_t N = 0, K = 0;
  float* dw = nullptr;  // [E, N, K] contiguous
};

/// out [N, D] = sum_j w[n, j] y[n k + j, :] (acc_t, j in order): y [N k, D],
/// w [N, k], out [N, D], all contiguous, one floating dtype.
void moe_combine(const Tensor& y, const Tensor& w, const Tensor& out);
/// Its vjp: dy[n k + j, :] = w[n, j] g[n, :] and dw[n, j] = sum_d g[n, d]
/// y[n k + j, d] (acc_t, d in order); dy / dw undefined: not computed.
void moe_combine_backward(const Tensor& g, const Tensor& y, const Tensor& w, const Tensor& dy, const Tensor& dw);

namespace ref {
/// The same contracts with std::stable_sort and the plain triple-loop matmul:
/// the oracles of the kernels above.
void moe_group(const Tensor& experts, int64_t num_experts, const Tensor& order, const Tensor& counts);
void grouped_matmul(const Tensor& a, const Tensor& b, const std::vector<int64_t>& sizes, const Tensor& out,
                    bool trans_b, const Tensor& a_rows = {}, const Tensor& o_rows = {});
void grouped_matmul_weight_grad(const Tensor& dy, const Tensor& x, const std::vector<int64_t>& sizes,
                                const Tensor& dw, const Tensor& dy_rows = {}, const Tensor& x_rows = {});
}  // namespace ref

}  // namespace kiln::backend::cpu
