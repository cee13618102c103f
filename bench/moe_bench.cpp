// moe_gpt_char (issue 26; bench/torch_moe.py is PyTorch's side): gpt_char's
// model, data and optimizer (train_gpt_bench.cpp) with every MLP replaced by
// an nn::MoE of E 4 experts, top-2, expert width 2 C = 256 (a token's active
// FLOPs equal the dense MLP's), GELU experts, no balancing. One full step per
// call. FLOPs are the active ones (the dense gpt_char's count plus the router).
#include "bench/bench.h"
#include "kiln/kiln.h"

namespace bench {

namespace {

void moe_gpt_step_bench(const std::string& name) {
  using namespace kiln;
  MemoryProbe mem;
  Rngs rngs(0);
  models::GPTConfig cfg{.moe_experts = 4, .moe_top_k = 2, .moe_hidden = 256};
  models::GPT gpt(cfg, rngs);
  optim::AdamW opt(gpt.parameters(), {.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.99, .weight_decay = 0.1});
  const int64_t B = 12, T = 64;
  Generator gen(1);
  Tensor idx = randint(0, cfg.vocab_size, {B, T}, gen);
  Tensor targets = randint(0, cfg.vocab_size, {B, T}, gen);
  const double N = double(B * T), C = double(cfg.n_embd);
  const double layer = N * (4 * C * C + 2 * 2 * C * 256 + C * 4) + 2.0 * double(B) * double(T) * double(T) * C;
  const double flops = 2.0 * 3.0 * (double(cfg.n_layer) * layer + N * C * double(cfg.vocab_size));
  const Workload w{.unit = "tokens/s", .items_per_step = N, .flops_per_step = flops};
  run_workload(name, w, mem, [&] { train::update(gpt.loss(idx, targets), opt); });
}

}  // namespace

void moe_benches(std::vector<Bench>& out) {
  out.push_back({"moe_gpt_char", [](const std::string& n) { moe_gpt_step_bench(n); }});
}

}  // namespace bench
