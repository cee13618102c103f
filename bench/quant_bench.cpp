// Quantized inference (issue 29, docs/model_files.md; no PyTorch side):
//   quant_matvec   batch-1 y = W x on 8192 x 8192 (256 MiB of f32, far larger
//                  than the caches): us/call for f32 (linear), Q8_0 and Q4_0,
//                  the speedups over f32, and each one's effective bandwidth
//                  (bytes of W read per second) and its fraction of mem_bandwidth
//   mem_bandwidth  this machine's streaming read bandwidth: GB/s of summing a
//                  1 GiB f32 array on all threads (the ceiling of a batch-1 product)
//   gpt_generate_q batch-1 generation tokens/s of a 12-layer, width-768 GPT
//                  (GPT-2 small's shape: V 50257, H 12, block 1024) at f32,
//                  Q8_0 and Q4_0 (nn::quantize: every Linear, each block's
//                  packed attention in-projection and the tied lm_head), a
//                  16-token prompt and 48 new tokens (KILN_BENCH_GPT_TOKENS=N
//                  for a quick smoke run)
#include <algorithm>
#include <cstdlib>
#include <mutex>

#include "bench/bench.h"
#include "kiln/kiln.h"
#include "kiln/models/generate.h"
#include "kiln/nn/quantized.h"

namespace bench {

namespace {

constexpr int64_t kN = 8192;

/// GB/s of a streaming read of `bytes` (summing floats, all threads).
double read_bandwidth(const float* p, int64_t n) {
  double sink = 0;
  double sec = seconds_per_call(
      [&] {
        std::mutex mu;
        kiln::parallel_for(0, n, int64_t(1) << 20, [&](int64_t a, int64_t b) {
          float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
          int64_t i = a;
          for (; i + 64 <= b; i += 64) {
            for (int k = 0; k < 16; ++k) s0 += p[i + k];
            for (int k = 16; k < 32; ++k) s1 += p[i + k];
            for (int k = 32; k < 48; ++k) s2 += p[i + k];
            for (int k = 48; k < 64; ++k) s3 += p[i + k];
          }
          for (; i < b; ++i) s0 += p[i];
          std::lock_guard<std::mutex> lock(mu);  // once per chunk
          sink += double(s0 + s1 + s2 + s3);
        });
      },
      0.5);
  if (sink == 12345.678) std::printf("#\n");  // keep the sum
  return double(n) * 4 / sec * 1e-9;
}

double g_bandwidth = 0;  // mem_bandwidth's figure, when it ran first (bench/run runs them in order)

void mem_bandwidth_bench(const std::string& name) {
  using namespace kiln;
  Tensor a = full({int64_t(1) << 28}, 1.0f);  // 1 GiB
  g_bandwidth = read_bandwidth(a.data<float>(), a.numel());
  emit(name, "read_bandwidth", "GB/s", g_bandwidth);
}

void quant_matvec_bench(const std::string& name) {
  using namespace kiln;
  NoGradGuard no_grad;
  Generator gen(0);
  Tensor w = randn({kN, kN}, gen), x = randn({1, kN}, gen);
  double t32 = seconds_per_call([&] { linear(x, w); }, 0.5);
  nn::QuantizedTensor q8 = nn::quantize(w, nn::QuantType::q8_0);
  nn::QuantizedTensor q4 = nn::quantize(w, nn::QuantType::q4_0);
  w = Tensor();  // 256 MiB back before timing the quantized products
  double t8 = seconds_per_call([&] { nn::quantized_linear(x, q8); }, 0.5);
  double t4 = seconds_per_call([&] { nn::quantized_linear(x, q4); }, 0.5);
  emit(name, "f32_time", "us/call", t32 * 1e6);
  emit(name, "q8_time", "us/call", t8 * 1e6);
  emit(name, "q4_time", "us/call", t4 * 1e6);
  emit(name, "q8_speedup", "x", t32 / t8);
  emit(name, "q4_speedup", "x", t32 / t4);
  double b32 = double(kN) * kN * 4 / t32 * 1e-9, b8 = double(q8.nbytes()) / t8 * 1e-9,
         b4 = double(q4.nbytes()) / t4 * 1e-9;
  emit(name, "f32_bandwidth", "GB/s", b32);
  emit(name, "q8_bandwidth", "GB/s", b8);
  emit(name, "q4_bandwidth", "GB/s", b4);
  if (g_bandwidth == 0) {
    Tensor a = full({int64_t(1) << 28}, 1.0f);
    g_bandwidth = read_bandwidth(a.data<float>(), a.numel());
  }
  emit(name, "q4_bandwidth_fraction", "fraction", b4 / g_bandwidth);
  emit(name, "q8_bandwidth_fraction", "fraction", b8 / g_bandwidth);
}

void gpt_generate_q_bench(const std::string& name) {
  using namespace kiln;
  Rngs rngs(0);
  const models::GPTConfig cfg{.vocab_size = 50257, .block_size = 1024, .n_layer = 12, .n_head = 12, .n_embd = 768};
  models::GPT gpt(cfg, rngs);
  gpt.eval();
  Generator gen(1);
  std::vector<int64_t> prompt(16);
  for (auto& t : prompt) t = int64_t(gen.next_u64() % uint64_t(cfg.vocab_size));
  const char* tokens = std::getenv("KILN_BENCH_GPT_TOKENS");
  const models::GenerateOptions o{.max_new_tokens = tokens ? std::max(1, std::atoi(tokens)) : 48, .temperature = 1.0,
                                  .seed = 0};
  for (const char* kind : {"f32", "q8_0", "q4_0"}) {
    if (std::string(kind) != "f32") nn::quantize(gpt, nn::parse_quant_type(kind));
    double sec = seconds_per_call([&] { models::generate(gpt, prompt, o); }, 2.0);
    emit(name, (std::string("tokens_per_s_") + kind).c_str(), "tokens/s", double(o.max_new_tokens) / sec);
  }
}

}  // namespace

void quant_benches(std::vector<Bench>& out) {
  out.push_back({"mem_bandwidth", mem_bandwidth_bench});
  out.push_back({"quant_matvec", quant_matvec_bench});
  out.push_back({"gpt_generate_q", gpt_generate_q_bench});
}

}  // namespace bench
