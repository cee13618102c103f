// VQVAE: conv encoder, VectorQuantizer / ResidualVQ, transposed-conv decoder (docs/vq.md).
#include "kiln/models/vqvae.h"

#include "kiln/core/error.h"
#include "kiln/nn/activation.h"
#include "kiln/nn/conv.h"
#include "kiln/ops/conv_fused.h"
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

// NOTE [VQ-VAE fused convs]: the conv stack computes on channel-blocked
// activations [B, C/16, H, W, 16] (oneDNN's nChw16c), so no conv reorders
// its input or output between NCHW and that layout, and the ReLUs run inside
// the convolutions (a oneDNN post-op in the forward; the backward's mask is
// the pass that makes the gradient contiguous anyway). The latents' layout
// change to channels last [B, 7, 7, D] is the one copy either way. 1-thread
// CPU per training step (batch 128, Zen 4): docs/performance.md, "third
// pass: VQ-VAE".
bool VQVAE::fused_path(const Tensor& t) const {
  if (!options.fused_convs || options.dim % 16 != 0 || options.hidden % 16 != 0 || t.dtype() != kF32 ||
      !channel_blocked_native())
    return false;
  const auto c1 = encoder->at<nn::Conv2d>(0);
  return !c1->compute_dtype() && c1->weight.dtype() == kF32;
}

Tensor VQVAE::encode(const Tensor& x) const {
  KILN_CHECK(x.defined() && x.dim() == 4 && x.size(1) == 1 && x.size(2) == 28 && x.size(3) == 28, "VQVAE",
             "input {} must be [B, 1, 28, 28]", describe(x));
  if (!fused_path(x)) return encoder(x).permute({0, 2, 3, 1});  // [B, D, 7, 7] -> [B, 7, 7, D]
  const auto c1 = encoder->at<nn::Conv2d>(0), c2 = encoder->at<nn::Conv2d>(2), c3 = encoder->at<nn::Conv2d>(4);
  Tensor h = conv2d_fused(x, c1->weight, c1->bias, {.stride = 2, .padding = 1, .output_blocked = true, .relu = true});
  h = conv2d_fused(h, c2->weight, c2->bias,
                   {.stride = 2, .padding = 1, .input_blocked = true, .output_blocked = true, .relu = true});
  h = conv2d_fused(h, c3->weight, c3->bias, {.padding = 1, .input_blocked = true, .output_blocked = true});
  return from_channel_blocked(h, /*channels_last=*/true);  // [B, D/16, 7, 7, 16] -> [B, 7, 7, D]
}

Tensor VQVAE::decode(const Tensor& z_q) const {
  KILN_CHECK(z_q.defined() && z_q.dim() == 4 && z_q.size(3) == options.dim, "VQVAE.decode",
             "latents {} must be [B, H, W, {}]", describe(z_q), options.dim);
  if (!fused_path(z_q)) return decoder(z_q.permute({0, 3, 1, 2}).contiguous());
  const auto c4 = decoder->at<nn::Conv2d>(0);
  const auto t5 = decoder->at<nn::ConvTranspose2d>(2), t6 = decoder->at<nn::ConvTranspose2d>(4);
  Tensor h = to_channel_blocked(permute(z_q, {0, 3, 1, 2}));  // [B, H, W, D] -> [B, D/16, H, W, 16]
  h = conv2d_fused(h, c4->weight, c4->bias, {.padding = 1, .input_blocked = true, .output_blocked = true, .relu = true});
  // ConvTranspose2d stores [O, C, K, K]; conv_transpose2d takes PyTorch's [C, O, K, K].
  h = conv_transpose2d_fused(h, transpose(t5->weight, 0, 1), t5->bias,
                             {.stride = 2, .padding = 1, .input_blocked = true, .output_blocked = true, .relu = true});
  return conv_transpose2d_fused(h, transpose(t6->weight, 0, 1), t6->bias,
                                {.stride = 2, .padding = 1, .input_blocked = true});
}

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
