// Training workload dit_b64 (issue 28; bench/torch_dit.py is PyTorch's side):
// one flow-matching training step of the Fashion-MNIST DiT (28x28x1 images,
// patch 4 -> 49 tokens, D 128, 6 blocks, 4 heads, MLP 4x, 10 classes, label
// dropout 0.1): t ~ U(0, 1) and noise drawn each step, x_t, the velocity
// MSE, backward, AdamW (lr 1e-4, no weight decay), batch 64 of fixed images
// and labels.
#include "bench/bench.h"
#include "kiln/kiln.h"

namespace bench {

namespace {

// Matmul FLOPs of one step (bench.h's convention: 2 per multiply-add, forward
// + both gradients = 3x forward). Per image: N tokens, per block qkv 3 D^2 +
// proj D^2 + MLP 8 D^2 per token, q k^T and att v 2 N^2 D, adaLN 6 D^2; the
// patch embedding and final linear N D p^2 C each, the final adaLN 2 D^2, the
// time MLP F D + D^2.
double dit_step_flops(const kiln::models::DiTConfig& c, int64_t B) {
  const double N = double(c.image_size / c.patch_size) * double(c.image_size / c.patch_size);
  const double D = double(c.hidden_size), P = double(c.patch_size * c.patch_size * c.in_channels);
  const double block = N * 12 * D * D + 2 * N * N * D + 6 * D * D;
  const double per_image = double(c.depth) * block + 2 * N * D * P + 2 * D * D + double(c.frequency_dim) * D + D * D;
  return 2.0 * 3.0 * double(B) * per_image;
}

// bf16: the same step with bf16 compute and f32 master weights
// (docs/mixed_precision.md, `kiln train flow --bf16`): the velocity comes back
// in f32 and the loss is taken there.
void dit_step_bench(const std::string& name, int64_t batch, bool bf16 = false) {
  using namespace kiln;
  MemoryProbe mem;
  Rngs rngs{{"params", 0}, {"flow", 1}, {"label_dropout", 2}};
  models::DiTConfig cfg{};  // the Fashion-MNIST DiT: D 128, 6 blocks, 4 heads, patch 4
  models::DiT dit(cfg, rngs);
  if (bf16) dit.set_compute_dtype(kBF16);
  dit.train();
  optim::AdamW opt(dit.parameters(), {.lr = 1e-4, .weight_decay = 0.0});
  models::FlowPath path;
  Generator gen(3);
  Tensor x1 = sub(mul(rand({batch, 1, 28, 28}, gen), 2.0), 1.0);
  Tensor y = randint(0, 10, {batch}, gen);
  const Workload w{.unit = "images/s", .items_per_step = double(batch), .flops_per_step = dit_step_flops(cfg, batch)};
  run_workload(name, w, mem, [&] {
    models::FlowSample s = path.sample(x1, rngs);
    train::update(path.loss(dit.forward(s.xt, s.t, y, rngs), s), opt);
  });
}

}  // namespace

void dit_benches(std::vector<Bench>& out) {
  out.push_back({"dit_b64", [](const std::string& n) { dit_step_bench(n, 64); }});
  // PyTorch's side runs it in f32 and under bf16 autocast (bench/run BF16_ROWS).
  out.push_back({"dit_b64_bf16", [](const std::string& n) { dit_step_bench(n, 64, /*bf16=*/true); }});
}

}  // namespace bench
