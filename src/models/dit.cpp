#include "kiln/models/dit.h"

#include <cmath>
#include <vector>

#include <fmt/format.h>

#include "kiln/core/error.h"
#include "kiln/core/grad_mode.h"
#include "kiln/nn/activation.h"
#include "kiln/ops/binary.h"
#include "kiln/ops/creation.h"
#include "kiln/ops/index.h"
#include "kiln/ops/linear_gelu.h"
#include "kiln/ops/modulate.h"
#include "kiln/ops/random.h"
#include "kiln/ops/reduce.h"
#include "kiln/ops/shape.h"
#include "kiln/ops/unary.h"

namespace kiln::models {

namespace {
constexpr const char* kDiT = "DiT";

std::string shape_of(const Tensor& t) { return t.defined() ? to_string(t.shape()) : "undefined"; }

// DiT's xavier_uniform_ on every weight seen as 2-D [shape[0], rest]: fan_out
// = rows, fan_in = the rest (the patch projection's [D, C*p*p] view, the
// attention's whole qkv [3D, D]), whatever fans the layer itself would pass.
nn::Initializer xavier_2d() {
  return [](const Shape& s, nn::Fan, Generator& gen, DType dtype) {
    int64_t rest = 1;
    for (size_t i = 1; i < s.size(); ++i) rest *= s[i];
    return nn::init::xavier_uniform()(s, nn::Fan{rest, s[0]}, gen, dtype);
  };
}

nn::Init with(const nn::Init& base, nn::Initializer weight, nn::Initializer bias) {
  nn::Init i = base;
  i.weight = std::move(weight);
  i.bias = std::move(bias);
  return i;
}
}  // namespace

Tensor sincos_pos_embed_2d(int64_t dim, int64_t grid) {
  KILN_CHECK(dim > 0 && dim % 4 == 0, kDiT, "the sincos position embedding needs hidden_size divisible by 4, got {}",
             dim);
  KILN_CHECK(grid > 0, kDiT, "grid must be positive, got {}", grid);
  const int64_t q = dim / 4;
  std::vector<double> out(static_cast<size_t>(grid * grid * dim));
  for (int64_t i = 0; i < grid; ++i) {
    for (int64_t j = 0; j < grid; ++j) {
      double* row = out.data() + (i * grid + j) * dim;
      for (int64_t k = 0; k < q; ++k) {
        const double w = 1.0 / std::pow(10000.0, double(k) / double(q));
        row[k] = std::sin(double(j) * w);  // DiT's first half: the grid's column coordinate
        row[q + k] = std::cos(double(j) * w);
        row[2 * q + k] = std::sin(double(i) * w);  // second half: the row coordinate
        row[3 * q + k] = std::cos(double(i) * w);
      }
    }
  }
  return tensor(out, {grid * grid, dim});
}

// One fused pass each way (kiln/ops/modulate.h) where the composed ops took
// four or five (docs/performance.md, "third pass: DiT").
Tensor modulate(const Tensor& x, const Tensor& shift, const Tensor& scale) { return adaln_modulate(x, shift, scale); }

// ---- PatchEmbed ----

PatchEmbed::PatchEmbed(int64_t C, int64_t D, int64_t p, const nn::Init& init) {
  proj = register_module("proj", nn::Conv2d(C, D, p, init, {.stride = p}));
}

Tensor PatchEmbed::forward(const Tensor& x) const {
  return proj->forward(x).flatten(2).transpose(1, 2);  // [B, D, h, w] -> [B, N, D]
}

// ---- LabelEmbedding ----

LabelEmbedding::LabelEmbedding(int64_t K, int64_t D, double p, const nn::Init& init)
    : num_classes(K), class_dropout(p) {
  embedding_table = register_module("embedding_table", nn::Embedding(K + (p > 0 ? 1 : 0), D, init));
}

Tensor LabelEmbedding::forward(const Tensor& labels) const { return embedding_table->forward(labels); }

Tensor LabelEmbedding::drop(const Tensor& labels, Generator& gen) const {
  if (class_dropout <= 0) return labels;
  Tensor u = rand({labels.size(0)}, gen, {.dtype = kF64});
  return where(lt(u, class_dropout), full({labels.size(0)}, num_classes, {.dtype = labels.dtype()}), labels);
}

// ---- DiTBlock ----

DiTBlock::DiTBlock(int64_t D, int64_t H, double mlp_ratio, const nn::Init& init, const nn::MoEOptions* moe_options)
    : hidden_size(D) {
  const nn::Init lin = with(init, xavier_2d(), nn::init::zeros());
  const nn::Init zero = with(init, nn::init::zeros(), nn::init::zeros());
  const int64_t F = std::llround(mlp_ratio * double(D));
  KILN_CHECK(F > 0, "DiTBlock", "mlp_ratio {} gives no FFN width for hidden_size {}", mlp_ratio, D);
  const nn::LayerNormOptions no_affine{.eps = 1e-6, .elementwise_affine = false};
  norm1 = register_module("norm1", nn::LayerNorm({D}, init, no_affine));
  attn = register_module("attn", nn::MultiheadAttention(D, H, lin));
  norm2 = register_module("norm2", nn::LayerNorm({D}, init, no_affine));
  if (moe_options) {
    auto experts = register_module("mlp", nn::MoE(D, *moe_options, lin));
    mlp = experts;
    moe = experts.get();
    mlp_forward = [m = experts.get()](const Tensor& h) { return m->forward(h); };
  } else {
    auto dense = register_module(
        "mlp", nn::Sequential(nn::Linear(D, F, lin), nn::GELU(GeluApproximation::tanh), nn::Linear(F, D, lin)));
    mlp = dense;
    // mlp.0 and its GELU as one fused op (kiln/ops/linear_gelu.h: the GELU's
    // derivative kept from the forward, the bias gradient summed in the
    // backward's pass); a quantized mlp.0 (inference) runs the Sequential.
    mlp_forward = [m = dense.get(), fc1 = dense->at<nn::Linear>(0).get(),
                   fc2 = dense->at<nn::Linear>(2).get()](const Tensor& h) {
      if (fc1->quantized) return m->forward(h);
      return fc2->forward(linear_gelu(fc1->to_compute(h), fc1->to_compute(fc1->weight), fc1->to_compute(fc1->bias),
                                      GeluApproximation::tanh));
    };
  }
  adaLN_modulation = register_module("adaLN_modulation", nn::Sequential(nn::SiLU(), nn::Linear(D, 6 * D, zero)));
}

Tensor DiTBlock::forward(const Tensor& x, const Tensor& c) const {
  // shift, scale, gate for attention, then for the MLP: six [B, D].
  std::vector<Tensor> m = chunk(adaLN_modulation->forward(c), 6, 1);
  auto attend = [&](const Tensor& h) { return attn->forward(h, h, h, {.need_weights = false}).output; };
  // norm then modulate as one fused op (the norms have no affine parameters):
  // layer_norm_modulate(x, shift, scale, eps) = modulate(norm(x), shift, scale).
  Tensor h = gated_residual(x, m[2], attend(layer_norm_modulate(x, m[0], m[1], norm1->eps)));
  return gated_residual(h, m[5], mlp_forward(layer_norm_modulate(h, m[3], m[4], norm2->eps)));
}

// ---- FinalLayer ----

FinalLayer::FinalLayer(int64_t D, int64_t p, int64_t C, const nn::Init& init) {
  const nn::Init zero = with(init, nn::init::zeros(), nn::init::zeros());
  norm_final = register_module("norm_final", nn::LayerNorm({D}, init, {.eps = 1e-6, .elementwise_affine = false}));
  linear = register_module("linear", nn::Linear(D, p * p * C, zero));
  adaLN_modulation = register_module("adaLN_modulation", nn::Sequential(nn::SiLU(), nn::Linear(D, 2 * D, zero)));
}

Tensor FinalLayer::forward(const Tensor& x, const Tensor& c) const {
  std::vector<Tensor> m = chunk(adaLN_modulation->forward(c), 2, 1);  // shift, scale
  return linear->forward(layer_norm_modulate(x, m[0], m[1], norm_final->eps));
}

// ---- DiT ----

std::vector<nn::MoE*> DiT::moe_layers() const {
  std::vector<nn::MoE*> layers;
  for (const auto& b : *blocks)
    if (auto* moe = static_cast<const DiTBlock&>(*b).moe) layers.push_back(moe);
  return layers;
}

Tensor DiT::aux_loss() const {
  Tensor total;
  for (nn::MoE* m : moe_layers()) total = total.defined() ? add(total, m->aux_loss()) : m->aux_loss();
  return total.defined() ? total : zeros({}, {.dtype = final_layer->linear->weight.value().dtype()});
}

DiT::DiT(const DiTConfig& cfg, const nn::Init& init) : config(cfg), grid(0) {
  const int64_t p = cfg.patch_size, D = cfg.hidden_size;
  KILN_CHECK(cfg.image_size > 0 && p > 0 && cfg.in_channels > 0, kDiT,
             "image_size {}, patch_size {} and in_channels {} must be positive", cfg.image_size, p, cfg.in_channels);
  KILN_CHECK(cfg.image_size % p == 0, kDiT, "image_size {} is not divisible by patch_size {}", cfg.image_size, p);
  KILN_CHECK(D > 0 && cfg.num_heads > 0 && D % cfg.num_heads == 0, kDiT,
             "hidden_size {} must be a positive multiple of num_heads {}", D, cfg.num_heads);
  KILN_CHECK(cfg.learned_pos_embed || D % 4 == 0, kDiT,
             "the fixed sincos position embedding needs hidden_size divisible by 4, got {}", D);
  KILN_CHECK(cfg.depth >= 1, kDiT, "depth must be at least 1, got {}", cfg.depth);
  KILN_CHECK(cfg.num_classes >= 0, kDiT, "num_classes must be >= 0, got {}", cfg.num_classes);
  KILN_CHECK(cfg.class_dropout >= 0 && cfg.class_dropout < 1, kDiT, "class_dropout must be in [0, 1), got {}",
             cfg.class_dropout);
  KILN_CHECK(cfg.num_classes > 0 || cfg.class_dropout == 0, kDiT,
             "class_dropout {} needs a class-conditional model (num_classes > 0)", cfg.class_dropout);
  KILN_CHECK(cfg.moe_experts == 0 || (cfg.moe_top_k >= 1 && cfg.moe_top_k <= cfg.moe_experts), kDiT,
             "moe_top_k {} must be in [1, moe_experts = {}]", cfg.moe_top_k, cfg.moe_experts);
  KILN_CHECK(cfg.moe_experts >= 0, kDiT, "moe_experts must be >= 0, got {}", cfg.moe_experts);
  grid = cfg.image_size / p;

  const nn::Init lin = with(init, xavier_2d(), nn::init::zeros());
  const nn::Init small = [&] {
    nn::Init i = with(init, nn::init::normal(0.0, 0.02), nn::init::zeros());
    i.embedding = nn::init::normal(0.0, 0.02);
    return i;
  }();
  x_embedder = register_module("x_embedder", PatchEmbed(cfg.in_channels, D, p, lin));
  t_embedder = register_module("t_embedder",
                               nn::TimestepEmbedding(D, small, cfg.frequency_dim, 10000.0, cfg.time_scale));
  if (cfg.num_classes > 0)
    y_embedder = register_module("y_embedder", LabelEmbedding(cfg.num_classes, D, cfg.class_dropout, small));
  if (cfg.learned_pos_embed)
    pos_embed_learned = register_parameter("pos_embed", small.make(nn::init::normal(0.0, 0.02), {1, grid * grid, D},
                                                           {D, D}, /*decay=*/false));
  else
    pos_embed = register_buffer("pos_embed", kiln::to(sincos_pos_embed_2d(D, grid), init.dtype).reshape({1, grid * grid, D}));
  blocks = register_module("blocks", nn::ModuleList());
  // The MoE's experts share the dense FFN's active FLOPs: width F / k each.
  const nn::MoEOptions moe{
      .num_experts = cfg.moe_experts,
      .top_k = cfg.moe_top_k,
      .expert_hidden = std::max<int64_t>(1, std::llround(cfg.mlp_ratio * double(D)) / std::max<int64_t>(1, cfg.moe_top_k)),
      .balance = cfg.moe_balance};
  for (int64_t i = 0; i < cfg.depth; ++i)
    blocks->push_back(DiTBlock(D, cfg.num_heads, cfg.mlp_ratio, lin, cfg.moe_experts > 0 ? &moe : nullptr));
  // Attention keeps policy Auto: up to 64 tokens (the Fashion-MNIST DiT's 49)
  // that is scaled_dot_product_attention's fused small-sequence kernel (NOTE
  // [Small attention path] in src/ops/attention.cpp; docs/performance.md,
  // "third pass: DiT"), beyond it the flash kernel.
  final_layer = register_module("final_layer", FinalLayer(D, p, cfg.in_channels, init));
}

void DiT::check_inputs(const Tensor& x, const Tensor& t, const Tensor& y) const {
  const int64_t S = config.image_size;
  KILN_CHECK(x.defined() && x.dim() == 4 && x.size(1) == config.in_channels && x.size(2) == S && x.size(3) == S, kDiT,
             "x {} must be [B, C = {}, H = {}, W = {}]", shape_of(x), config.in_channels, S, S);
  const int64_t B = x.size(0);
  KILN_CHECK(t.defined() && t.dim() == 1 && t.size(0) == B && is_floating(t.dtype()), kDiT,
             "t {} must be a floating [B = {}] for x {}", shape_of(t), B, to_string(x.shape()));
  if (config.num_classes == 0) {
    KILN_CHECK(!y.defined(), kDiT, "labels y {} given to an unconditional model (num_classes 0)", shape_of(y));
    return;
  }
  KILN_CHECK(y.defined() && y.dim() == 1 && y.size(0) == B && y.dtype() == kI64, kDiT,
             "labels y {} must be i64 [B = {}] for x {}", shape_of(y), B, to_string(x.shape()));
  const int64_t hi = config.num_classes + (y_embedder->has_null() ? 1 : 0);  // K: the null class
  for (int64_t v : y.to_vector<int64_t>())
    KILN_CHECK(v >= 0 && v < hi, kDiT, "class id {} out of range [0, {}){}", v, config.num_classes,
               y_embedder->has_null() ? fmt::format(" (or {}, the null class)", config.num_classes) : "");
}

Tensor DiT::forward(const Tensor& x, const Tensor& t, const Tensor& y) const {
  check_inputs(x, t, y);
  const Tensor& pe = config.learned_pos_embed ? pos_embed_learned.value() : pos_embed;
  Tensor h = add(x_embedder->forward(to_compute(x)), to_compute(pe));  // [B, N, D]
  Tensor c = t_embedder->forward(t);                                           // [B, D]
  if (y_embedder) c = add(c, y_embedder->forward(y));
  for (const auto& b : *blocks) h = static_cast<const DiTBlock&>(*b).forward(h, c);
  // With a compute dtype (bf16) the velocity comes back in x's dtype: samplers
  // and losses keep their state in f32.
  Tensor v = unpatchify(final_layer->forward(h, c));
  return v.dtype() == x.dtype() ? v : kiln::to(v, x.dtype());
}

Tensor DiT::forward(const Tensor& x, const Tensor& t, const Tensor& y, Rngs& rngs) const {
  if (!is_training() || !y_embedder || !y_embedder->has_null() || !y.defined()) return forward(x, t, y);
  check_inputs(x, t, y);  // the labels before dropping, so a bad id is reported as given
  Generator gen = rngs.next("label_dropout");
  return forward(x, t, y_embedder->drop(y, gen));
}

Tensor DiT::guided(const Tensor& x, const Tensor& t, const Tensor& y, double guidance) const {
  KILN_CHECK(std::isfinite(guidance), kDiT, "guidance must be finite, got {}", guidance);
  if (guidance == 1.0) return forward(x, t, y);
  KILN_CHECK(y_embedder && y_embedder->has_null(), kDiT,
             "guidance {} needs a class-conditional model trained with label dropout (num_classes > 0 and "
             "class_dropout > 0); this one has num_classes {}, class_dropout {}",
             guidance, config.num_classes, config.class_dropout);
  check_inputs(x, t, y);
  const int64_t B = x.size(0);
  Tensor null = full({B}, config.num_classes, {.dtype = kI64});
  Tensor v = forward(cat({x, x}), cat({t, t}), cat({y, null}));  // [2B, C, H, W]
  Tensor vc = narrow(v, 0, 0, B), vu = narrow(v, 0, B, B);
  return add(vu, mul(sub(vc, vu), guidance));
}

Tensor DiT::unpatchify(const Tensor& x) const {
  const int64_t p = config.patch_size, C = config.in_channels, B = x.size(0);
  KILN_CHECK(x.dim() == 3 && x.size(1) == grid * grid && x.size(2) == p * p * C, kDiT,
             "unpatchify: x {} must be [B, N = {}, p*p*C = {}]", to_string(x.shape()), grid * grid, p * p * C);
  // [B, h, w, p, q, C] -> [B, C, h, p, w, q] -> [B, C, h*p, w*q]
  return permute(x.reshape({B, grid, grid, p, p, C}), {0, 5, 1, 3, 2, 4}).reshape({B, C, grid * p, grid * p});
}

std::string DiT::extra_repr() const {
  return fmt::format(
      "image_size={}, in_channels={}, patch_size={}, hidden_size={}, depth={}, num_heads={}, num_classes={}, "
      "class_dropout={}, pos_embed={}",
      config.image_size, config.in_channels, config.patch_size, config.hidden_size, config.depth, config.num_heads,
      config.num_classes, config.class_dropout, config.learned_pos_embed ? "learned" : "sincos");
}

Tensor sample_dit(DiT& model, const Tensor& labels, const DiTSampleOptions& o, int64_t batch) {
  const bool conditional = model.config.num_classes > 0;
  KILN_CHECK(!conditional || labels.defined(), kDiT, "sample_dit: a class-conditional model needs labels");
  KILN_CHECK(conditional || !labels.defined(), kDiT, "sample_dit: labels {} given to an unconditional model",
             shape_of(labels));
  const int64_t B = conditional ? labels.size(0) : batch;
  KILN_CHECK(B > 0, kDiT, "sample_dit: no samples asked for (batch {})", B);
  const bool was_training = model.is_training();
  model.eval();
  const int64_t S = model.config.image_size;
  Generator gen(o.seed);
  const DType dt = model.final_layer->linear->weight.dtype();  // the noise and the ODE state: the parameters' dtype
  Tensor out;
  try {
    out = sample_flow([&](const Tensor& x, const Tensor& t) { return model.guided(x, t, labels, o.guidance); },
                      {B, model.config.in_channels, S, S}, gen, {.steps = o.steps, .solver = o.solver}, dt);
  } catch (...) {
    model.train(was_training);
    throw;
  }
  model.train(was_training);
  return out;
}

}  // namespace kiln::models
