// Training workload gpt_char (issue 8; bench/torch_train_gpt.py is PyTorch's
// side): nanoGPT's CPU Shakespeare-char model (models::GPT defaults: V 65,
// L 4, H 4, C 128, context T 64, no bias, tied lm_head), batch B 12 of random
// tokens and random targets, AdamW lr 1e-3, betas (0.9, 0.99), weight decay
// 0.1 on the matrices and embeddings only (nanoGPT's configure_optimizers: kiln
// decays exactly the parameters with decay(), which are those). One full step
// per call.
#include <cmath>
#include <functional>

#include "bench/bench.h"
#include "kiln/kiln.h"

namespace bench {

namespace {

struct GptBench {
  int64_t batch = 12;
  int64_t context = 64;
  // Runs on the built model before the optimizer is made: how a variant (a
  // dtype policy, bf16 autocast) is switched on in one line.
  std::function<void(kiln::models::GPT&)> prepare{};
};

// Matmul FLOPs of one step (bench.h's convention: 2 per multiply-add, forward
// + weight grads + input grads; the embeddings are gathers, 0 flops). N = B T
// tokens; per layer forward: qkv 3 C^2 + out_proj C^2 + MLP 8 C^2 per token,
// and q k^T, att v: 2 B H T T Dh = 2 B T T C multiply-adds (full T x T, as
// PyTorch's masked path computes); lm_head N C V. Backward is twice forward
// (every matmul's input is a differentiable activation).
double gpt_step_flops(const kiln::models::GPTConfig& c, int64_t B, int64_t T) {
  const double N = double(B * T), C = double(c.n_embd);
  const double layer = N * 12 * C * C + 2.0 * double(B) * double(T) * double(T) * C;
  const double forward = double(c.n_layer) * layer + N * C * double(c.vocab_size);
  return 2.0 * 3.0 * forward;
}

void gpt_step_bench(const std::string& name, const GptBench& b) {
  using namespace kiln;
  MemoryProbe mem;
  Rngs rngs(0);
  models::GPTConfig cfg{};  // nanoGPT's CPU config: block_size 64
  models::GPT gpt(cfg, rngs);
  if (b.prepare) b.prepare(gpt);
  optim::AdamW opt(gpt.parameters(), {.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.99, .weight_decay = 0.1});
  Generator gen(1);
  Tensor idx = randint(0, cfg.vocab_size, {b.batch, b.context}, gen);
  Tensor targets = randint(0, cfg.vocab_size, {b.batch, b.context}, gen);
  const Workload w{.unit = "tokens/s",
                   .items_per_step = double(b.batch * b.context),
                   .flops_per_step = gpt_step_flops(cfg, b.batch, b.context)};
  run_workload(name, w, mem, [&] {
    train::update(gpt.loss(idx, targets), opt);
  });
}

// ---- gpt_char_bf16: the same model, data and optimizer with bf16 compute (docs/mixed_precision.md) ----

const GptBench kGptBf16{.prepare = [](kiln::models::GPT& g) { g.set_compute_dtype(kiln::kBF16); }};

// The accuracy check: |loss_bf16 - loss_f32| / loss_f32 after 50 steps
// from the same init on the workload's batch (GPT::loss takes f32 logits).
void gpt_loss_rel_diff(const std::string& name) {
  using namespace kiln;
  double loss[2] = {0, 0};
  for (int bf16 = 0; bf16 < 2; ++bf16) {
    Rngs rngs(0);
    models::GPTConfig cfg{};
    models::GPT gpt(cfg, rngs);
    if (bf16) kGptBf16.prepare(gpt);
    optim::AdamW opt(gpt.parameters(), {.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.99, .weight_decay = 0.1});
    Generator gen(1);
    Tensor idx = randint(0, cfg.vocab_size, {kGptBf16.batch, kGptBf16.context}, gen);
    Tensor targets = randint(0, cfg.vocab_size, {kGptBf16.batch, kGptBf16.context}, gen);
    for (int s = 0; s < 50; ++s) {
      Tensor l = gpt.loss(idx, targets);
      train::update(l, opt);
      loss[bf16] = l.item<float>();
    }
  }
  emit(name, "loss50_f32", "loss", loss[0]);
  emit(name, "loss50_bf16", "loss", loss[1]);
  emit(name, "loss_rel_diff", "fraction", std::abs(loss[1] - loss[0]) / loss[0]);
}

}  // namespace

void train_gpt_benches(std::vector<Bench>& out) {
  out.push_back({"gpt_char", [](const std::string& n) { gpt_step_bench(n, {}); }});
  out.push_back({"gpt_char_bf16", [](const std::string& n) {
                   gpt_step_bench(n, kGptBf16);
                   gpt_loss_rel_diff(n);
                 }});
}

}  // namespace bench
