// VQVAE: conv encoder, VectorQuantizer / ResidualVQ, transposed-conv decoder (docs/vq.md).
#include "kiln/models/vqvae.h"

#include "kiln/core/error.h"
#include "kiln/nn/activation.h"
#include "kiln/nn/conv.h"
#include "kiln/ops/shape.h"

namespace kiln::models {

VQVAE::VQVAE(const nn::Init& init, VQVAEOptions o) : options(o) {
  KILN_CHECK(o.codebook_size > 0 && o.dim > 0 && o.hidden > 0, "VQVAE",
             "codebook_size {}, dim {} and hidden {} must be positive", o.codebook_size, o.dim, o.hidden);
  KILN_CHECK(o.levels >= 1, "VQVAE", "levels must be at least 1, got {}", o.levels);
  const int64_t D = o.dim, h = o.hidden;
  encoder = register_module("encoder", nn::Sequential(nn::Conv2d(1, h, 4, init, {.stride = 2, .padding = 1}),  // 14x14
                                                      nn::ReLU(),
                                                      nn::Conv2d(h, D, 4, init, {.stride = 2, .padding = 1}),  // 7x7
                                                      nn::ReLU(), nn::Conv2d(D, D, 3, init, {.padding = 1})));
  if (o.levels == 1)
    vq = register_module("vq", nn::VectorQuantizer(o.codebook_size, D, o.vq));
  else
    rvq = register_module("rvq", nn::ResidualVQ(o.levels, o.codebook_size, D, o.vq));
  decoder = register_module(
      "decoder", nn::Sequential(nn::Conv2d(D, D, 3, init, {.padding = 1}), nn::ReLU(),
                                nn::ConvTranspose2d(D, h, 4, init, {.stride = 2, .padding = 1}),  // 14x14
                                nn::ReLU(), nn::ConvTranspose2d(h, 1, 4, init, {.stride = 2, .padding = 1})));  // 28x28
}

Tensor VQVAE::encode(const Tensor& x) const {
  KILN_CHECK(x.defined() && x.dim() == 4 && x.size(1) == 1 && x.size(2) == 28 && x.size(3) == 28, "VQVAE",
             "input {} must be [B, 1, 28, 28]", describe(x));
  return encoder(x).permute({0, 2, 3, 1});  // [B, D, 7, 7] -> [B, 7, 7, D]
}

Tensor VQVAE::decode(const Tensor& z_q) const { return decoder(z_q.permute({0, 3, 1, 2}).contiguous()); }

VQVAEOutput VQVAE::forward(const Tensor& x) const {
  VQVAEOutput out;
  out.z_e = encode(x).contiguous();
  Tensor zq;  // [B, 7, 7, D]
  if (vq) {
    nn::VQOutput q = vq(out.z_e);
    zq = q.quantized;
    out.indices = q.indices;
    out.commitment_loss = q.commitment_loss;
  } else {
    nn::ResidualVQOutput q = rvq(out.z_e);
    zq = q.quantized;
    out.indices = q.indices;
    out.commitment_loss = q.commitment_loss;
  }
  out.recon = decode(zq);
  return out;
}

Tensor VQVAE::decode_indices(const Tensor& indices) const {
  return decode(vq ? vq->lookup(indices) : rvq->decode(indices));
}

void VQVAE::ema_update(const VQVAEOutput& out) {
  if (vq)
    vq->ema_update(out.z_e, out.indices);
  else
    rvq->ema_update(out.z_e, out.indices);
}

nn::VQStats VQVAE::stats(const Tensor& indices, int64_t level) const {
  if (vq) {
    KILN_CHECK(level == 0, "VQVAE.stats", "level {} of a single-level model", level);
    return vq->stats(indices);
  }
  return rvq->stats(indices, level);
}

}  // namespace kiln::models
