// VQ-VAE for 28x28 grey images (SPECS G5, docs/vq.md): a conv encoder to a
// 7x7 grid of D-wide latents, a VectorQuantizer (or a ResidualVQ with
// levels > 1) on each of the 49 latents, a transposed-conv decoder back to
// 28x28. Letters: B = batch, D = latent width (64), K = codebook size, L = levels.
//
//   Rngs rngs(0);
//   models::VQVAE model(rngs, {.codebook_size = 256});
//   auto out = model.forward(x);                  // x [B, 1, 28, 28] in [0, 1]
//   loss = mse_loss(out.recon, x) + out.commitment_loss; ... opt.step();
//   model.ema_update(out);                        // the codebook's EMA step
#pragma once

#include <cstdint>
#include <string>

#include "kiln/nn/containers.h"
#include "kiln/nn/init.h"
#include "kiln/nn/module.h"
#include "kiln/nn/vq.h"

namespace kiln::models {

struct VQVAEOptions {
  int64_t codebook_size = 256;  // K
  int64_t dim = 64;             // D: the latent and code width
  int64_t hidden = 32;          // channels of the first conv (14x14)
  int64_t levels = 1;           // 1: a VectorQuantizer; > 1: a ResidualVQ of that many levels
  nn::VectorQuantizerOptions vq = {};
  // The encoder and decoder run their convolutions on channel-blocked
  // activations with the ReLUs fused in (kiln/ops/conv_fused.h; same
  // parameters, results equal up to f32 rounding) where they can: f32, no
  // compute dtype, D and hidden multiples of 16, a CPU whose conv kernels
  // block by 16 (AVX-512; channel_blocked_native()). false: each module's forward.
  bool fused_convs = true;
};

struct VQVAEOutput {
  Tensor recon;            // [B, 1, 28, 28]
  Tensor z_e;              // [B, 7, 7, D]: the encoder's latents, channels last (what ema_update takes)
  Tensor indices;          // [B, 7, 7] (levels 1) or [B, 7, 7, L], i64
  Tensor commitment_loss;  // scalar
};

// Children: "encoder" (Sequential: Conv 1->h 4x4 s2 p1, ReLU, Conv h->D 4x4
// s2 p1, ReLU, Conv D->D 3x3 p1), "vq" or "rvq", "decoder" (Sequential: Conv
// D->D 3x3 p1, ReLU, ConvTranspose D->h 4x4 s2 p1, ReLU, ConvTranspose h->1
// 4x4 s2 p1).
class VQVAE : public nn::Module {
 public:
  VQVAE(const nn::Init& init, VQVAEOptions options = {});

  VQVAEOutput forward(const Tensor& x) const;
  /// x [B, 1, 28, 28] -> z_e [B, 7, 7, D].
  Tensor encode(const Tensor& x) const;
  /// Quantized latents [B, 7, 7, D] -> images [B, 1, 28, 28].
  Tensor decode(const Tensor& z_q) const;
  /// Codes [B, 7, 7] (or [B, 7, 7, l], l <= L, for the first l levels) -> images.
  Tensor decode_indices(const Tensor& indices) const;
  /// The quantizer's EMA step for this forward's z_e and indices (train mode).
  void ema_update(const VQVAEOutput& out);
  /// Level `level`'s usage, perplexity, dead codes over indices.
  nn::VQStats stats(const Tensor& indices, int64_t level = 0) const;
  int64_t levels() const { return options.levels; }
  /// Whether encode/decode take the fused conv path for this input (options.fused_convs).
  bool fused_path(const Tensor& t) const;

  VQVAEOptions options;
  nn::Shared<nn::Sequential> encoder, decoder;
  nn::Shared<nn::VectorQuantizer> vq;  // levels == 1
  nn::Shared<nn::ResidualVQ> rvq;      // levels > 1
};

}  // namespace kiln::models
