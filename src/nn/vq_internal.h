// What VectorQuantizer and ResidualVQ share (src/nn/vq.cpp, src/nn/vq_residual.cpp).
// Letters: N = rows, K = codebook_size, D = dim.
#pragma once

#include "kiln/core/shape.h"
#include "kiln/core/tensor.h"
#include "kiln/nn/vq.h"

namespace kiln::nn::vq_detail {

// zq exactly in forward, the gradient at zq passed to z in backward.
Tensor straight_through(const Tensor& z, const Tensor& zq);
// s without its last dim.
Shape leading_shape(const Shape& s);
// Nearest code of each row of zf [N, D]: i64 [N]. Call without grad.
Tensor nearest(const Tensor& codebook, const Tensor& zf);
// The codebook from latents' K highest-norm rows (checked: M >= K).
void seed_highest_norm(const VectorQuantizer& vq, const Tensor& latents);
// The EMA update and dead-code re-init on checked, flat, detached inputs:
// zf [N, D], idx i64 [N] in [0, K).
void ema_step(VectorQuantizer& vq, const Tensor& zf, const Tensor& idx);

}  // namespace kiln::nn::vq_detail
