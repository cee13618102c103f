// Vector quantization (SPECS G5, spec 002): VectorQuantizer (EMA codebook,
// straight-through, commitment, dead-code re-init, highest-norm init) and
// ResidualVQ (L levels on residuals). Math and pitfalls: docs/vq.md.
// Letters: N = tokens (every leading dim flattened), K = codebook_size,
// D = dim (code width), L = levels.
//
//   nn::VectorQuantizer vq(256, 64);               // z [..., 64] -> quantized [..., 64], indices [...]
//   auto out = vq(z);                              // train mode: first call seeds the codebook
//   loss = mse + out.commitment_loss; loss.backward(); opt.step();
//   vq.ema_update(z, out.indices);                 // after the optimizer step
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kiln/core/generator.h"
#include "kiln/nn/containers.h"
#include "kiln/nn/module.h"

namespace kiln::nn {

class VectorQuantizer;
namespace vq_detail {
void ema_step(VectorQuantizer& vq, const Tensor& zf, const Tensor& idx);
}

struct VectorQuantizerOptions {
  double beta = 0.25;    // commitment weight: beta * mean((z_e - sg(z_q))^2)
  double decay = 0.99;   // EMA decay of cluster sizes and running sums
  double eps = 1e-5;     // Laplace smoothing of the cluster sizes
  // A code whose EMA share of the tokens (cluster_size[k] / sum(cluster_size))
  // falls below this is dead and re-seeded from the batch in ema_update. A
  // share, not a count per batch, so the same threshold means the same thing
  // at any batch size. 0 turns re-initialisation off.
  double dead_code_threshold = 1e-3;
  // Seed the codebook from the K highest-norm rows of the first training
  // batch (forward in train mode while `initialized` is 0). false: keep the
  // random N(0, 1) init.
  bool highest_norm_init = true;
  uint64_t seed = 0;  // the codebook's random init and the dead-code re-init stream
};

// What forward returns.
struct VQOutput {
  Tensor quantized;        // [..., D]: the codes' values; gradient passes straight to z_e
  Tensor indices;          // [...] i64 in [0, K)
  Tensor commitment_loss;  // scalar: beta * mean((z_e - sg(z_q))^2)
};

// Telemetry of a batch of indices (and the codebook's EMA state).
struct VQStats {
  int64_t used = 0;         // distinct codes among the indices
  double usage = 0;         // used / K
  double perplexity = 0;    // exp(entropy of the indices' code histogram), in [1, K]
  int64_t dead = 0;         // codes whose EMA share is under the threshold now
};

// Buffers (in the state dict, never parameters, so never in an optimizer):
//   codebook [K, D], cluster_size [K] (EMA counts), embed_sum [K, D] (EMA
//   running sums), initialized (i64 scalar: 1 once seeded).
// Buffers hold f32 (model.to(kF64) casts them); z must have their dtype.
class VectorQuantizer : public Module {
 public:
  VectorQuantizer(int64_t codebook_size, int64_t dim, VectorQuantizerOptions options = {});

  /// z [..., D] -> quantized [..., D], indices [...], commitment loss. In
  /// train mode, the first call seeds the codebook (highest_norm_init); it
  /// never changes the codebook otherwise (that is ema_update's job).
  VQOutput forward(const Tensor& z) const;
  /// Nearest code per row of z [..., D] -> i64 [...]: argmin_k ||z - c_k||^2
  /// as one matmul, ||c_k||^2 - 2 z . c_k (ties: the lowest index). No grad.
  Tensor encode(const Tensor& z) const;
  /// codebook[indices]: integer [...] -> [..., D]; no gradient (pure lookup).
  Tensor lookup(const Tensor& indices) const;

  /// The EMA step, after the optimizer step, with this step's z (any grad is
  /// ignored) and the indices forward returned for it. Train mode only.
  ///   n_k = #{i: idx_i = k}, s_k = sum_{idx_i = k} z_i
  ///   cluster_size = decay * cluster_size + (1 - decay) * n
  ///   embed_sum    = decay * embed_sum    + (1 - decay) * s
  ///   codebook_k   = embed_sum_k / ((cluster_size_k + eps) / (T + K eps) * T),  T = sum(cluster_size)
  /// then every dead code (share < threshold) is replaced in the same call by
  /// a random row of z (seeded), with cluster_size_k = T / K and embed_sum_k =
  /// z_r * T / K, so the next update keeps it where it was put.
  /// Checks everything before writing: on an error nothing changes.
  void ema_update(const Tensor& z, const Tensor& indices);
  /// Seeds the codebook with the K rows of latents [M >= K, D] of largest L2
  /// norm (ties: the lower row first), in that order; resets cluster_size to 1
  /// and embed_sum to the codebook; marks it initialized.
  void init_from(const Tensor& latents);
  /// usage, perplexity, dead codes for indices [...] (values in [0, K)).
  VQStats stats(const Tensor& indices) const;

  std::string extra_repr() const override;
  std::vector<std::pair<std::string, Generator*>> own_generators() override { return {{"reinit", &gen_}}; }

  int64_t codebook_size, dim;
  VectorQuantizerOptions options;
  Tensor codebook;      // [K, D]
  Tensor cluster_size;  // [K]
  Tensor embed_sum;     // [K, D]
  Tensor initialized;   // i64 scalar

 private:
  friend class ResidualVQ;
  friend void vq_detail::ema_step(VectorQuantizer& vq, const Tensor& zf, const Tensor& idx);
  Tensor flat(const char* what, const Tensor& z) const;  // [..., D] -> [N, D], checked
  void check_indices(const char* what, const Tensor& indices) const;
  Generator gen_;
};

struct ResidualVQOutput {
  Tensor quantized;        // [..., D]: the sum of every level's code; gradient straight to z_e
  Tensor indices;          // [..., L] i64
  Tensor commitment_loss;  // beta * mean((z_e - sg(quantized))^2), once on the total
};

// L VectorQuantizers: level 0 quantizes z, level q the residual z minus the
// codes of levels 0..q-1. Children "levels.0", "levels.1", ... Each level's
// options are `options` with seed + q.
class ResidualVQ : public Module {
 public:
  ResidualVQ(int64_t num_levels, int64_t codebook_size, int64_t dim, VectorQuantizerOptions options = {});

  ResidualVQOutput forward(const Tensor& z) const;
  /// z [..., D] -> indices [..., L] (no grad).
  Tensor encode(const Tensor& z) const;
  /// indices [..., l] with l <= L -> sum of levels 0..l-1's codes [..., D]
  /// (only the given prefix; summed shallow to deep, as forward sums them, so
  /// decode(encode(x)) equals forward(x).quantized bitwise).
  Tensor decode(const Tensor& indices) const;
  /// The first `levels` levels of indices [..., >= levels].
  Tensor decode(const Tensor& indices, int64_t levels) const;
  /// Each level's EMA step on its own residuals (all computed with the
  /// codebooks before any of them changes). Checks first; nothing changes on error.
  void ema_update(const Tensor& z, const Tensor& indices);
  /// Level q's stats on indices[..., q].
  VQStats stats(const Tensor& indices, int64_t level) const;

  std::string extra_repr() const override;
  int64_t num_levels() const { return int64_t(levels_.size()); }
  VectorQuantizer& level(int64_t q) const;

  int64_t codebook_size, dim;
  VectorQuantizerOptions options;

 private:
  // Codes of every level for z [N, D] (already flat): indices [N, L] and the
  // running sum; seeds uninitialised levels first when `seed` is set.
  std::pair<Tensor, Tensor> quantize_flat(const Tensor& z, bool seed) const;
  void check_levels(const char* what, const Tensor& indices, int64_t levels) const;
  Shared<ModuleList> list_;
  std::vector<VectorQuantizer*> levels_;
};

}  // namespace kiln::nn
