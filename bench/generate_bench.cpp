// lm_generate (issue 10; bench/torch_generate.py is PyTorch's side): batch-1
// generation tokens/s with the KV cache. nanoGPT's model (models::GPT: V 65,
// L 4, H 4, C 128, no bias, tied lm_head) with a longer context, block_size
// 256, at its initialisation; a 64-token prompt generated to block_size (192
// new tokens) at temperature 1, seed 0. One whole generate call per step, the
// prefill included; throughput counts the new tokens.
#include "bench/bench.h"
#include "kiln/kiln.h"
#include "kiln/models/generate.h"

namespace bench {

namespace {

constexpr int64_t kPrompt = 64, kBlock = 256;

void lm_generate_bench(const std::string& name) {
  using namespace kiln;
  MemoryProbe mem;
  Rngs rngs(0);
  const models::GPTConfig cfg{.block_size = kBlock};
  models::GPT gpt(cfg, rngs);
  gpt.eval();
  Generator gen(1);
  std::vector<int64_t> prompt(kPrompt, 0);
  for (auto& t : prompt) t = int64_t(gen.next_u64() % uint64_t(cfg.vocab_size));
  const models::GenerateOptions o{.max_new_tokens = kBlock - kPrompt, .temperature = 1.0, .seed = 0};
  const Workload w{.unit = "tokens/s", .items_per_step = double(o.max_new_tokens)};
  run_workload(name, w, mem, [&] { models::generate(gpt, prompt, o); });
}

}  // namespace

void generate_benches(std::vector<Bench>& out) { out.push_back({"lm_generate", lm_generate_bench}); }

}  // namespace bench
