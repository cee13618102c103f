// Matrix products on oneDNN. Shapes: M x K times K x N gives M x N.
#pragma once

#include <optional>

#include "kiln/core/tensor.h"

namespace kiln {

/// torch.matmul: 1-D x 1-D is a dot product, 1-D operands gain and then lose a
/// unit dim, N-D operands are batches of matrices with broadcast batch dims.
Tensor matmul(const Tensor& a, const Tensor& b);
/// [B, M, K] x [B, K, N] -> [B, M, N], no broadcasting.
Tensor bmm(const Tensor& a, const Tensor& b);
/// 2-D only: [M, K] x [K, N].
Tensor mm(const Tensor& a, const Tensor& b);
/// x [..., I], weight [O, I], bias [O] (optional) -> [..., O]; one fused GEMM.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = {});
/// beta * input + alpha * (a @ b) for 2-D a, b; input broadcasts to [M, N].
Tensor addmm(const Tensor& input, const Tensor& a, const Tensor& b, Scalar beta = 1, Scalar alpha = 1);
/// Outer product of two vectors: [M] x [N] -> [M, N].
Tensor outer(const Tensor& a, const Tensor& b);
/// Dot product of two vectors.
Tensor dot(const Tensor& a, const Tensor& b);

}  // namespace kiln
