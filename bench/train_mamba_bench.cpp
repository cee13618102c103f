// Training workload mamba_lm (issue 25; bench/torch_train_mamba.py is
// PyTorch's side): models::MambaLM over bytes, 4 layers, d_model 128,
// d_state 64, expand 2, headdim 32 (H 8), batch 12 of 64 random bytes and
// random targets, AdamW lr 1e-3, betas (0.9, 0.99), weight decay 0.1 on the
// 2-D parameters only. One full step (forward, backward, update) per call.
#include "bench/bench.h"
#include "kiln/kiln.h"

namespace bench {

namespace {

void mamba_step_bench(const std::string& name) {
  using namespace kiln;
  MemoryProbe mem;
  Rngs rngs(0);
  models::MambaConfig cfg;  // d_model 128, 4 layers, bytes, d_state 64, headdim 32
  models::MambaLM lm(cfg, rngs);
  nn::ParameterList all = lm.parameters();
  auto matrices = all.filter([](const std::string&, const nn::Parameter& p) { return p.value().dim() >= 2; });
  auto others = all.filter([](const std::string&, const nn::Parameter& p) { return p.value().dim() < 2; });
  optim::AdamW opt({{matrices, {{"weight_decay", 0.1}}}, {others, {{"weight_decay", 0.0}}}},
                   {.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.99, .weight_decay = 0.1});
  const int64_t B = 12, T = 64;
  Generator gen(1);
  Tensor idx = randint(0, 256, {B, T}, gen);
  Tensor targets = randint(0, 256, {B, T}, gen);
  const Workload w{.unit = "tokens/s", .items_per_step = double(B * T)};
  run_workload(name, w, mem, [&] { train::update(lm.loss(idx, targets), opt); });
}

}  // namespace

void train_mamba_benches(std::vector<Bench>& out) {
  out.push_back({"mamba_lm", [](const std::string& n) { mamba_step_bench(n); }});
}

}  // namespace bench
