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

/// out[rows of run e] = a[rows of run e] @ op(b[e]) for each expert e, where
/// the runs are given by `sizes` (sum = M) and op(b[e]) is b[e]^T when
/// trans_b (b [E, N, K]) else b[e] (b [E, K, N]). a [M, K], out [M, N]
/// contiguous; empty runs are skipped. One dtype for all three.
void grouped_matmul(const Tensor& a, const Tensor& b, const std::vector<int64_t>& sizes, const Tensor& out,
                    bool trans_b);

/// dw[e] = dy[run e]^T @ x[run e] for each expert: dy [M, N], x [M, K],
/// dw [E, N, K] contiguous (written; zero for experts with empty runs).
void grouped_matmul_weight_grad(const Tensor& dy, const Tensor& x, const std::vector<int64_t>& sizes,
                                const Tensor& dw);

namespace ref {
/// The same contracts with std::stable_sort and the plain triple-loop matmul:
/// the oracles of the kernels above.
void moe_group(const Tensor& experts, int64_t num_experts, const Tensor& order, const Tensor& counts);
void grouped_matmul(const Tensor& a, const Tensor& b, const std::vector<int64_t>& sizes, const Tensor& out,
                    bool trans_b);
void grouped_matmul_weight_grad(const Tensor& dy, const Tensor& x, const std::vector<int64_t>& sizes,
                                const Tensor& dw);
}  // namespace ref

}  // namespace kiln::backend::cpu
