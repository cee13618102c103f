// kiln's half of bench/run: times kiln ops, oneDNN called directly (the
// floor for kiln's matmul wrapper) and the FMA peak, and prints one JSON
// line per measurement: {"bench", "metric", "unit", "value"}. bench/run joins
// these with bench/torch_bench.py's lines.
//
//   kiln_bench [--reps N] [--list] [NAME...]
// NAME: a bench's exact name, or a prefix when no bench has that exact name.
#include <omp.h>

#include <oneapi/dnnl/dnnl.hpp>

#include <cstdlib>
#include <string>
#include <unordered_map>
#include <vector>

#include "bench/bench.h"
#include "kiln/core/cpu_info.h"
#include "kiln/kiln.h"

double fma_peak_gflops(int threads, int64_t iters);  // fma_probe.cpp

namespace bench {

// ---- eager add on [1, 10] ----

void bench_add(const std::string& name, bool requires_grad) {
  kiln::Generator gen(0);
  kiln::Tensor a = kiln::randn({1, 10}, gen), b = kiln::randn({1, 10}, gen);
  if (requires_grad) a.requires_grad_(true);
  // Each call makes a fresh output (and, with grad, a graph node) and drops
  // it, as `torch.add(a, b)` does in a Python loop.
  double sec = seconds_per_call([&] { kiln::Tensor c = kiln::add(a, b); }, 0.1);
  emit(name, "time", "us/op", sec * 1e6);
}

// ---- matmul ----

struct MatmulShape {
  int64_t M, K, N;
};

double gflops(const MatmulShape& s, double sec) { return 2.0 * double(s.M * s.K * s.N) / sec * 1e-9; }

// kiln::matmul(a, b) on contiguous f32 operands (allocating its output).
double kiln_matmul_gflops(const MatmulShape& s) {
  kiln::Generator gen(1);
  kiln::Tensor a = kiln::randn({s.M, s.K}, gen), b = kiln::randn({s.K, s.N}, gen);
  double sec = seconds_per_call([&] { kiln::Tensor c = kiln::matmul(a, b); }, 0.2);
  return gflops(s, sec);
}

// The same product straight through oneDNN: one primitive, preallocated
// buffers, no kiln code on the path.
double onednn_matmul_gflops(const MatmulShape& s) {
  using md = dnnl::memory::desc;
  using tag = dnnl::memory::format_tag;
  const auto f32 = dnnl::memory::data_type::f32;
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  dnnl::stream strm(eng);
  md a_md({s.M, s.K}, f32, tag::ab), b_md({s.K, s.N}, f32, tag::ab), c_md({s.M, s.N}, f32, tag::ab);
  dnnl::matmul prim(dnnl::matmul::primitive_desc(dnnl::matmul::desc(a_md, b_md, c_md), eng));
  std::vector<float> a(size_t(s.M * s.K), 0.5f), b(size_t(s.K * s.N), 0.25f), c(size_t(s.M * s.N));
  dnnl::memory am(a_md, eng, a.data()), bm(b_md, eng, b.data()), cm(c_md, eng, c.data());
  std::unordered_map<int, dnnl::memory> args{{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}};
  omp_set_num_threads(kiln::get_num_threads());  // the count kiln runs oneDNN with
  double sec = seconds_per_call(
      [&] {
        prim.execute(strm, args);
        strm.wait();
      },
      0.2);
  return gflops(s, sec);
}

// ---- the table ----

void core_benches(std::vector<Bench>& out) {
  out.push_back({"add_1x10", [](const std::string& n) { bench_add(n, false); }});
  out.push_back({"add_1x10_grad", [](const std::string& n) { bench_add(n, true); }});
  const MatmulShape shapes[] = {{64, 64, 64},   {128, 128, 128}, {256, 256, 256},  {512, 512, 512},  {1024, 1024, 1024},
                                {2048, 2048, 2048}, {64, 784, 256}, {768, 128, 512}, {32, 256, 1024}};
  for (const MatmulShape& s : shapes) {
    std::string name = "matmul_" + std::to_string(s.M) + "x" + std::to_string(s.K) + "x" + std::to_string(s.N);
    out.push_back({name, [s](const std::string& n) {
                     emit(n, "gflops", "GFLOP/s", kiln_matmul_gflops(s));
                     emit(n, "onednn_gflops", "GFLOP/s", onednn_matmul_gflops(s));
                   }});
  }
  out.push_back({"fma_peak", [](const std::string& n) {
                   int threads = kiln::get_num_threads();
                   std::vector<double> v;
                   fma_peak_gflops(threads, int64_t(1) << 22);  // warm-up (clocks ramp)
                   for (int r = 0; r < g_reps; ++r) v.push_back(fma_peak_gflops(threads, int64_t(1) << 24));
                   emit(n, "gflops", "GFLOP/s", median(v));
                 }});
}

namespace {

std::vector<Bench> all_benches() {
  std::vector<Bench> out;
  core_benches(out);
  conv_benches(out);
  norm_benches(out);
  attention_benches(out);
  resize_benches(out);
  mha_benches(out);
  recurrent_benches(out);
  optim_benches(out);
  io_benches(out);
  tokenizer_benches(out);
  train_mlp_benches(out);
  train_cnn_benches(out);
  train_gpt_benches(out);
  train_rl_benches(out);
  train_lstm_benches(out);
  rl_env_benches(out);
  generate_benches(out);
  rl_ppo_benches(out);
  train_mamba_benches(out);
  train_vqvae_benches(out);
  moe_benches(out);
  dit_benches(out);
  compile_benches(out);
  quant_benches(out);
  ddp_benches(out);
  return out;
}

// A filter that names a bench exactly selects only it; otherwise it is a prefix.
bool selected(const std::string& name, const std::vector<std::string>& filters, const std::vector<Bench>& all) {
  if (filters.empty()) return true;
  for (const std::string& f : filters) {
    bool exact = std::any_of(all.begin(), all.end(), [&](const Bench& b) { return b.name == f; });
    if (exact ? name == f : name.rfind(f, 0) == 0) return true;
  }
  return false;
}

}  // namespace
}  // namespace bench

int main(int argc, char** argv) {
  using namespace bench;
  std::vector<std::string> filters;
  bool list = false;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--reps" && i + 1 < argc) g_reps = std::max(1, std::atoi(argv[++i]));
    else if (arg == "--list") list = true;
    else if (arg == "--cpu-info") {
      std::printf("%s\n", kiln::cpu_info().summary().c_str());  // the machine and kiln's kernel choices
      return 0;
    } else filters.push_back(arg);
  }
  const std::vector<Bench> all = all_benches();
  for (const Bench& b : all) {
    if (!selected(b.name, filters, all)) continue;
    if (list) std::printf("%s\n", b.name.c_str());
    else b.run(b.name);
  }
  return 0;
}
