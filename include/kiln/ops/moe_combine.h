// The MoE layer's combine step as one op (nn::MoE, docs/moe.md): each
// token's k expert outputs, weighted by its routing weights, summed.
// Letters: N tokens, k experts per token, D width.
#pragma once

#include "kiln/core/tensor.h"

namespace kiln {

/// y [N k, D] (row n k + j: token n's j-th expert output), weights [N, k]
/// -> [N, D]: out[n] = sum_j weights[n, j] y[n k + j], summed in j order in
/// acc_t. The same as sum(mul(reshape(y, {N, k, D}), unsqueeze(weights, 2)), {1})
/// without the [N, k, D] product; differentiable in y and weights (first
/// order). One floating dtype for both.
Tensor moe_combine(const Tensor& y, const Tensor& weights);

}  // namespace kiln
