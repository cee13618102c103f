// ResidualVQ: L VectorQuantizers, each on what the levels before it left
// (docs/vq.md). Straight-through and commitment once, on the total.
#include <fmt/format.h>

#include "kiln/core/error.h"
#include "kiln/core/grad_mode.h"
#include "kiln/nn/vq.h"
#include "kiln/ops/binary.h"
#include "kiln/ops/index.h"
#include "kiln/ops/reduce.h"
#include "kiln/ops/shape.h"
#include "kiln/ops/unary.h"
#include "src/nn/vq_internal.h"

namespace kiln::nn {

using vq_detail::leading_shape;

ResidualVQ::ResidualVQ(int64_t L, int64_t K, int64_t D, VectorQuantizerOptions o)
    : codebook_size(K), dim(D), options(o) {
  KILN_CHECK(L > 0, "ResidualVQ", "num_levels must be positive, got {}", L);
  list_ = register_module("levels", ModuleList());
  for (int64_t q = 0; q < L; ++q) {
    VectorQuantizerOptions oq = o;
    oq.seed = o.seed + uint64_t(q);
    levels_.push_back(list_->push_back(VectorQuantizer(K, D, oq)).get());
  }
}

VectorQuantizer& ResidualVQ::level(int64_t q) const {
  KILN_CHECK(q >= 0 && q < num_levels(), "ResidualVQ.level", "level {} is outside [0, {})", q, num_levels());
  return *levels_[size_t(q)];
}

std::pair<Tensor, Tensor> ResidualVQ::quantize_flat(const Tensor& zf, bool seed) const {
  NoGradGuard no_grad;
  Tensor residual = zf, total;
  std::vector<Tensor> idx;
  for (VectorQuantizer* vq : levels_) {
    // A level seeds from its own residuals: the highest-norm ones are the rows
    // the levels above reproduce worst, never the zeros of rows they hit exactly.
    if (seed && vq->options.highest_norm_init && vq->initialized.item<int64_t>() == 0)
      vq_detail::seed_highest_norm(*vq, residual);
    Tensor i = vq_detail::nearest(vq->codebook, residual);
    Tensor c = index_select(vq->codebook, 0, i);
    total = total.defined() ? add(total, c) : c;  // shallow to deep, as decode sums
    residual = sub(residual, c);
    idx.push_back(i);
  }
  return {stack(idx, 1), total};  // [N, L], [N, D]
}

ResidualVQOutput ResidualVQ::forward(const Tensor& z) const {
  Tensor zf = levels_[0]->flat("ResidualVQ", z);
  auto [idx, total] = quantize_flat(zf.detach(), is_training());
  ResidualVQOutput out;
  Tensor total_sg = total.detach();
  out.commitment_loss = mul(mean(square(sub(zf, total_sg))), options.beta);
  out.quantized = vq_detail::straight_through(zf, total).reshape(z.shape());
  Shape s = leading_shape(z.shape());
  s.push_back(num_levels());
  out.indices = idx.reshape(s);
  return out;
}

Tensor ResidualVQ::encode(const Tensor& z) const {
  Tensor zf = levels_[0]->flat("ResidualVQ.encode", z);
  Shape s = leading_shape(z.shape());
  s.push_back(num_levels());
  return quantize_flat(zf.detach(), false).first.reshape(s);
}

void ResidualVQ::check_levels(const char* what, const Tensor& indices, int64_t levels) const {
  KILN_CHECK(indices.defined() && indices.dim() >= 1, what, "indices {} must be [..., levels]", describe(indices));
  KILN_CHECK(levels >= 1 && levels <= num_levels(), what, "levels {} must be in [1, {}] (num_levels)", levels,
             num_levels());
  KILN_CHECK(indices.shape().back() >= levels, what, "indices {} have {} levels, fewer than the {} asked for",
             describe(indices), indices.shape().back(), levels);
  for (int64_t q = 0; q < levels; ++q) levels_[size_t(q)]->check_indices(what, indices.select(-1, q));
}

Tensor ResidualVQ::decode(const Tensor& indices) const {
  KILN_CHECK(indices.defined() && indices.dim() >= 1, "ResidualVQ.decode", "indices {} must be [..., levels]",
             describe(indices));
  return decode(indices, indices.shape().back());
}

Tensor ResidualVQ::decode(const Tensor& indices, int64_t levels) const {
  check_levels("ResidualVQ.decode", indices, levels);
  NoGradGuard no_grad;
  Tensor flat_idx = indices.reshape({-1, indices.shape().back()});
  Tensor total;
  for (int64_t q = 0; q < levels; ++q) {
    Tensor c = index_select(levels_[size_t(q)]->codebook, 0, flat_idx.select(1, q).contiguous().to(kI64));
    total = total.defined() ? add(total, c) : c;
  }
  Shape s = leading_shape(indices.shape());
  s.push_back(dim);
  return total.reshape(s);
}

void ResidualVQ::ema_update(const Tensor& z, const Tensor& indices) {
  const char* op = "ResidualVQ.ema_update";
  KILN_CHECK(is_training(), op, "called in eval mode: the codebooks only learn in train mode");
  Tensor zf = levels_[0]->flat(op, z);
  check_levels(op, indices, num_levels());
  Shape want = leading_shape(z.shape());
  want.push_back(num_levels());
  KILN_CHECK(indices.shape() == want, op, "indices {} must be z's shape without its last dim, then {} levels ({})",
             describe(indices), num_levels(), to_string(want));
  KILN_CHECK(zf.size(0) > 0, op, "z {} holds no rows", describe(z));
  NoGradGuard no_grad;
  Tensor idx = indices.reshape({-1, num_levels()}).to(kI64);
  // Every level's residual with the codebooks as forward saw them, before
  // any level updates its own.
  std::vector<Tensor> residuals, level_idx;
  Tensor residual = zf.detach();
  for (int64_t q = 0; q < num_levels(); ++q) {
    Tensor i = idx.select(1, q).contiguous();
    residuals.push_back(residual);
    level_idx.push_back(i);
    residual = sub(residual, index_select(levels_[size_t(q)]->codebook, 0, i));
  }
  for (int64_t q = 0; q < num_levels(); ++q)
    vq_detail::ema_step(*levels_[size_t(q)], residuals[size_t(q)], level_idx[size_t(q)]);
}

VQStats ResidualVQ::stats(const Tensor& indices, int64_t q) const {
  check_levels("ResidualVQ.stats", indices, q + 1);
  return levels_[size_t(q)]->stats(indices.select(-1, q));
}

std::string ResidualVQ::extra_repr() const {
  return fmt::format("num_levels={}, codebook_size={}, dim={}, beta={}", num_levels(), codebook_size, dim,
                     options.beta);
}

}  // namespace kiln::nn
