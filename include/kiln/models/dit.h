// DiT: a class-conditional diffusion / flow Transformer on image patches
// (SPECS G6, L17; Peebles & Xie 2023, facebookresearch/DiT models.py).
// Letters: B batch, C in_channels, H = W image_size, p patch_size,
// N = (H / p)^2 tokens, D hidden_size, K num_classes.
//
//   x [B, C, H, W] --x_embedder (Conv2d p x p, stride p)--> [B, N, D] + pos_embed
//   c = t_embedder(t) + y_embedder(y)                         [B, D]
//   N blocks: h += gate * attn(modulate(norm1(h))), h += gate * mlp(modulate(norm2(h)))
//   final_layer: linear(modulate(norm_final(h), shift, scale)) [B, N, p*p*C] -> unpatchify [B, C, H, W]
//
// AdaLN-Zero: every modulation Linear and the final linear start at zero, so
// an untrained DiT outputs exactly 0 and each block is the identity.
// Classifier-free guidance: with class_dropout > 0 the label table has one
// more row, the null class K; training replaces a label by K with
// probability class_dropout, and sampling mixes v_null + w (v_class - v_null).
//
//   models::DiT dit({.image_size = 28, .patch_size = 4, .hidden_size = 128, .depth = 6, .num_heads = 4}, rngs);
//   Tensor v = dit.forward(x, t, y);                                    // velocity, x's shape
//   Tensor imgs = models::sample_dit(dit, labels, {.steps = 50, .guidance = 2.0, .seed = 1});
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "kiln/core/rngs.h"
#include "kiln/models/flow.h"
#include "kiln/nn/attention.h"
#include "kiln/nn/containers.h"
#include "kiln/nn/conv.h"
#include "kiln/nn/embedding.h"
#include "kiln/nn/init.h"
#include "kiln/nn/linear.h"
#include "kiln/nn/module.h"
#include "kiln/nn/moe.h"
#include "kiln/nn/norm.h"
#include "kiln/nn/time_embedding.h"

namespace kiln::models {

struct DiTConfig {
  int64_t image_size = 28;  // H = W; divisible by patch_size
  int64_t in_channels = 1;  // C (the output has C channels too: the velocity)
  int64_t patch_size = 4;   // p
  int64_t hidden_size = 128;  // D; divisible by num_heads, and by 4 for the sincos position embedding
  int64_t depth = 6;          // blocks
  int64_t num_heads = 4;
  double mlp_ratio = 4.0;     // the FFN's width F = mlp_ratio * D
  int64_t num_classes = 10;   // K; 0: unconditional (no y_embedder)
  double class_dropout = 0.1;  // label dropout for CFG; > 0 adds the null class row K
  bool learned_pos_embed = false;  // false: DiT's fixed 2-D sincos (a buffer); true: a parameter N(0, 0.02)
  int64_t frequency_dim = 256;     // the time sinusoid's width
  double time_scale = 1000.0;      // t in [0, 1] times this (nn/time_embedding.h)
  /// Mixture-of-experts FFN (nn::MoE, docs/moe.md): with moe_experts > 0
  /// each block's `mlp` child is an MoE of that many GELU experts of width
  /// mlp_ratio * D / moe_top_k (the dense FFN's active FLOPs), top-k routing
  /// and the given balancing; no other parameter changes name. 0: dense.
  int64_t moe_experts = 0;
  int64_t moe_top_k = 2;
  nn::MoEBalance moe_balance = nn::MoEBalance::bias;
};

/// The DiT's 2-D sincos position embedding (get_2d_sincos_pos_embed), f64
/// [grid * grid, D], row-major over the grid: token m = i * grid + j (row i,
/// column j) gets [sin(j w), cos(j w), sin(i w), cos(i w)], w_k = 10000^(-k / (D / 4)),
/// k < D / 4. D must be divisible by 4.
Tensor sincos_pos_embed_2d(int64_t dim, int64_t grid);

/// modulate(x, shift, scale) = x * (1 + scale) + shift; x [B, N, D], shift / scale [B, D].
Tensor modulate(const Tensor& x, const Tensor& shift, const Tensor& scale);

/// timm's PatchEmbed as DiT uses it: proj = Conv2d(C, D, p, stride p),
/// [B, C, H, W] -> [B, N, D].
class PatchEmbed : public nn::Module {
 public:
  PatchEmbed(int64_t in_channels, int64_t hidden_size, int64_t patch_size, const nn::Init& init);
  Tensor forward(const Tensor& x) const;
  nn::Shared<nn::Conv2d> proj;
};

/// DiT's LabelEmbedder: embedding_table [K + (class_dropout > 0), D]; row K is
/// the null class (unconditional).
class LabelEmbedding : public nn::Module {
 public:
  LabelEmbedding(int64_t num_classes, int64_t hidden_size, double class_dropout, const nn::Init& init);
  /// labels i64 [B] in [0, K) (or K, the null class, when there is one) -> [B, D].
  Tensor forward(const Tensor& labels) const;
  /// Labels with each replaced by the null class K with probability
  /// class_dropout (one uniform per label from gen); DiT's token_drop.
  Tensor drop(const Tensor& labels, Generator& gen) const;
  bool has_null() const { return class_dropout > 0; }

  int64_t num_classes;
  double class_dropout;
  nn::Shared<nn::Embedding> embedding_table;
};

/// One DiT block: children norm1, attn, norm2, mlp, adaLN_modulation (DiT's
/// order and names; attn is nn::MultiheadAttention, its in_proj = DiT's
/// attn.qkv, out_proj = attn.proj). LayerNorms without affine, eps 1e-6;
/// mlp = Linear(D, F), GELU(tanh), Linear(F, D) (keys mlp.0.*, mlp.2.*);
/// adaLN_modulation = SiLU, Linear(D, 6D) zero-initialised (keys
/// adaLN_modulation.1.*). The FFN is the one child `mlp`, called through
/// mlp_forward; with `moe` it is an nn::MoE (keys mlp.router.*, mlp.w1, ...)
/// and no other parameter changes name.
class DiTBlock : public nn::Module {
 public:
  DiTBlock(int64_t hidden_size, int64_t num_heads, double mlp_ratio, const nn::Init& init,
           const nn::MoEOptions* moe = nullptr);
  /// x [B, N, D], c [B, D] -> [B, N, D].
  Tensor forward(const Tensor& x, const Tensor& c) const;

  int64_t hidden_size;
  nn::Shared<nn::LayerNorm> norm1;
  nn::Shared<nn::MultiheadAttention> attn;
  nn::Shared<nn::LayerNorm> norm2;
  nn::Shared<nn::Module> mlp;                        // the FFN: nn::Sequential, or nn::MoE
  std::function<Tensor(const Tensor&)> mlp_forward;  // calls mlp
  nn::MoE* moe = nullptr;                            // mlp as an MoE, or null
  nn::Shared<nn::Sequential> adaLN_modulation;
};

/// DiT's FinalLayer: norm_final (no affine, eps 1e-6), linear D -> p*p*C and
/// adaLN_modulation = SiLU, Linear(D, 2D), both zero-initialised.
class FinalLayer : public nn::Module {
 public:
  FinalLayer(int64_t hidden_size, int64_t patch_size, int64_t out_channels, const nn::Init& init);
  /// x [B, N, D], c [B, D] -> [B, N, p*p*C].
  Tensor forward(const Tensor& x, const Tensor& c) const;

  nn::Shared<nn::LayerNorm> norm_final;
  nn::Shared<nn::Linear> linear;
  nn::Shared<nn::Sequential> adaLN_modulation;
};

class DiT : public nn::Module {
 public:
  /// Parameters as DiT's initialize_weights: every Linear (and the attention's
  /// whole [3D, D] in_proj) xavier_uniform with zero bias, the patch projection
  /// xavier_uniform over its [D, C*p*p] view, label table and time MLP
  /// N(0, 0.02), modulations and final linear zero.
  /// init supplies the generator, dtype and device (its initializers are not used).
  DiT(const DiTConfig& config, const nn::Init& init);

  /// The velocity v(x, t | y): x [B, C, H, W], t [B] (x's dtype), y i64 [B]
  /// (undefined for an unconditional model; K = the null class) -> [B, C, H, W]
  /// in x's dtype (also under a bf16 compute dtype, set_compute_dtype).
  Tensor forward(const Tensor& x, const Tensor& t, const Tensor& y = {}) const;
  /// Training: in training mode with class_dropout > 0 the labels are first
  /// dropped to the null class (rngs.next("label_dropout")).
  Tensor forward(const Tensor& x, const Tensor& t, const Tensor& y, Rngs& rngs) const;
  /// Classifier-free guidance: v_null + guidance * (v_y - v_null), one forward
  /// of the doubled batch. guidance 1: plain forward(x, t, y). Guidance != 1
  /// needs a conditional model with a null class (class_dropout > 0).
  Tensor guided(const Tensor& x, const Tensor& t, const Tensor& y, double guidance) const;

  /// [B, N, p*p*C] -> [B, C, H, W] (DiT's unpatchify: token (i, j) holds the
  /// p x p x C patch in (row, col, channel) order).
  Tensor unpatchify(const Tensor& x) const;
  int64_t num_patches() const { return grid * grid; }
  /// The blocks' MoE FFNs (empty when dense), for telemetry and update_bias.
  std::vector<nn::MoE*> moe_layers() const;
  /// The sum of the MoE layers' balancing losses of the latest forward (an
  /// untracked 0 when dense or balancing is off): add it to the training loss.
  Tensor aux_loss() const;
  std::string extra_repr() const override;

  DiTConfig config;
  int64_t grid;  // H / p
  nn::Shared<PatchEmbed> x_embedder;
  nn::Shared<nn::TimestepEmbedding> t_embedder;
  nn::Shared<LabelEmbedding> y_embedder;  // null when num_classes == 0
  Tensor pos_embed;                       // [1, N, D] fixed sincos buffer; undefined when learned
  nn::Parameter pos_embed_learned;        // [1, N, D] (key "pos_embed") when learned_pos_embed
  nn::Shared<nn::ModuleList> blocks;
  nn::Shared<FinalLayer> final_layer;

 private:
  void check_inputs(const Tensor& x, const Tensor& t, const Tensor& y) const;
};

struct DiTSampleOptions {
  int64_t steps = 50;
  FlowSolver solver = FlowSolver::euler;
  double guidance = 1.0;  // classifier-free guidance scale; 1: none
  uint64_t seed = 0;      // the noise x0 ~ N(0, I): a seed gives one set of images
};

/// Images [B, C, H, W] for labels i64 [B] (undefined with `batch` rows for an
/// unconditional model): Euler / Heun from t = 0 (noise) to 1 in eval mode,
/// without gradients. The DiT is left in the mode it was in.
Tensor sample_dit(DiT& model, const Tensor& labels, const DiTSampleOptions& options = {}, int64_t batch = 0);

}  // namespace kiln::models
