// Training workload mamba_lm (issue 25; bench/torch_train_mamba.py is
// PyTorch's side): models::MambaLM over bytes, 4 layers, d_model 128,
// d_state 64, expand 2, headdim 32 (H 8), batch 12 of 64 random bytes and
// random targets, AdamW lr 1e-3, betas (0.9, 0.99), weight decay 0.1 on the
// 2-D parameters only. One full step (forward, backward, update) per call.
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <ctime>

#include "bench/bench.h"
#include "kiln/kiln.h"
#include "kiln/models/mamba_lm.h"

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
  auto step = [&] { train::update(lm.loss(idx, targets), opt); };
  // KILN_MAMBA_BENCH_STEPS=n: instead of the timed loop, one warm-up step
  // and n steps, reporting the process CPU time per step (all threads) —
  // the figure to compare two builds by on a busy machine (A B A B).
  if (const char* e = std::getenv("KILN_MAMBA_BENCH_STEPS"); e && std::atoi(e) > 0) {
    const int n = std::atoi(e);
    step();
    auto cpu = [] {
      timespec ts{};
      clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
      return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
    };
    const double c0 = cpu();
    for (int i = 0; i < n; ++i) step();
    emit(name, "cpu_per_step", "ms", (cpu() - c0) / n * 1e3);
    return;
  }
  run_workload(name, w, mem, step);
}

// mamba_generate (issue 25, kiln only): the generation cost of the same
// model (at its initialisation, eval) is flat in the length. Batch 1, a
// 16-byte prompt, 1000 bytes sampled at temperature 1 (seed 0) through
// models::generate (one forward over the prompt, then one step() per byte);
// the time of each byte is taken between consecutive token callbacks. Per
// repetition: bytes 1-100 and 900-999 (the first byte comes from the
// prompt's forward, not a step); every figure is the median over
// repetitions. Target: last100_over_first100 <= 1.15. The state's size does
// not depend on the length (tests/models/mamba_lm_test.cpp), and peak_mem
// says what a whole generation added.
void mamba_generate_bench(const std::string& name) {
  using namespace kiln;
  MemoryProbe mem;
  Rngs rngs(0);
  models::MambaConfig cfg;
  models::MambaLM lm(cfg, rngs);
  lm.eval();
  constexpr int64_t kNew = 1000, kWindow = 100;
  Generator gen(1);
  std::vector<int64_t> prompt(16);
  for (auto& t : prompt) t = int64_t(gen.next_u64() % 256);
  const models::GenerateOptions o{.max_new_tokens = kNew, .temperature = 1.0, .seed = 0};
  using Clock = std::chrono::steady_clock;
  std::vector<double> first, last, per_token;
  for (int r = 0; r < std::max(g_reps, 3); ++r) {
    std::vector<Clock::time_point> at;
    at.reserve(kNew);
    const auto t0 = Clock::now();
    models::generate(lm, prompt, o, [&](int64_t) { at.push_back(Clock::now()); });
    const auto t1 = Clock::now();
    auto ms = [](Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double, std::milli>(b - a).count(); };
    first.push_back(ms(at[0], at[kWindow]) / kWindow);
    last.push_back(ms(at[kNew - 1 - kWindow], at[kNew - 1]) / kWindow);
    per_token.push_back(ms(t0, t1) / kNew);
  }
  emit(name, "throughput", "tokens/s", 1e3 / median(per_token));
  emit(name, "first100", "ms/token", median(first));
  emit(name, "last100", "ms/token", median(last));
  std::vector<double> ratio;
  for (size_t i = 0; i < first.size(); ++i) ratio.push_back(last[i] / first[i]);
  emit(name, "last100_over_first100", "x", median(ratio));
  emit(name, "peak_mem", "MB", mem.added_mb());
  emit(name, "peak_rss", "MB", mem.peak_mb());
}

}  // namespace

void train_mamba_benches(std::vector<Bench>& out) {
  out.push_back({"mamba_lm", [](const std::string& n) { mamba_step_bench(n); }});
  out.push_back({"mamba_generate", [](const std::string& n) { mamba_generate_bench(n); }});
}

}  // namespace bench
