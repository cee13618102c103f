// The mixture-of-experts primitives (nn::MoE, docs/moe.md): grouping token
// assignments by expert, and the grouped product that runs every expert on
// its own contiguous run of rows. Letters: M assignments (tokens x top-k),
// E experts, I / O the product's input / output width.
#pragma once

#include <cstdint>
#include <vector>

#include "kiln/core/tensor.h"

namespace kiln {

/// The assignments sorted by expert.
struct MoEGroups {
  Tensor order;                 // [M] i64: order[p] = the assignment at sorted position p
  std::vector<int64_t> counts;  // [E]: run lengths (tokens routed to each expert)
};

/// Stable grouping of experts [M] (integer, values in [0, num_experts)) by
/// expert: expert 0's assignments first, each run in ascending assignment id.
/// Deterministic. Not differentiable (indices).
MoEGroups moe_group(const Tensor& experts, int64_t num_experts);

/// x [M, I] whose rows come in runs of group_sizes (E entries summing to M),
/// weight [E, O, I] -> [M, O]: run e times weight[e]^T (torch: for each
/// expert, linear(x[run e], weight[e])). Differentiable in x and weight
/// (first order); empty runs cost nothing and get zero weight gradients.
Tensor grouped_linear(const Tensor& x, const Tensor& weight, const std::vector<int64_t>& group_sizes);

/// grouped_linear with the permutations around it fused in (no permuted
/// copies): row r of the product's input is x[gather[r]] (gather [M] i64,
/// values in [0, x.size(0)); a row may be taken several times, e.g. a token
/// routed to k experts), and row r of the product lands at row scatter[r] of
/// the result (scatter [M] i64, a permutation of [0, M)). Either may be
/// undefined (the identity). Result [M, O]; the same as
///   index_select(grouped_linear(index_select(x, 0, gather), weight, group_sizes), 0, argsort(scatter))
/// and differentiable in x and weight like it (x's gradient sums the rows a
/// token was taken for, in row order: deterministic).
Tensor grouped_linear(const Tensor& x, const Tensor& weight, const std::vector<int64_t>& group_sizes,
                      const Tensor& gather, const Tensor& scatter);

/// gelu(grouped_linear(x, weight, group_sizes, gather, scatter)) (the exact,
/// erf GELU) as one kernel: the GELU is applied to each tile of the product
/// in the grouped GEMM's epilogue, together with its derivative, which the
/// backward multiplies in (one pass) instead of storing the pre-activation
/// and evaluating the derivative again. On f32 the values and gradients are
/// bit for bit those of the composition; other dtypes run the composition.
/// The expert MLP's first product (nn::MoE with GELU experts).
Tensor grouped_linear_gelu(const Tensor& x, const Tensor& weight, const std::vector<int64_t>& group_sizes,
                           const Tensor& gather, const Tensor& scatter);

}  // namespace kiln
