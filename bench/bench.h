// Shared by kiln_bench's sources: timing, JSON output and the bench table.
// Each family of benches lives in its own bench/<family>_bench.cpp and adds
// its entries through a function declared here and called from all_benches().
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <malloc.h>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "kiln/core/allocator.h"
#include "kiln/core/parallel.h"

namespace bench {

using Clock = std::chrono::steady_clock;

inline int g_reps = 7;  // repetitions per figure; each figure is their median

/// Runs a scope on `n` threads, then gives back the benches' usual pool: the
/// default one (adapting to contention) unless KILN_NUM_THREADS fixed a count.
class ScopedThreads {
 public:
  explicit ScopedThreads(int n) : saved_(kiln::get_num_threads()) { kiln::set_num_threads(n); }
  ~ScopedThreads() {
    if (std::getenv("KILN_NUM_THREADS")) kiln::set_num_threads(saved_);
    else kiln::use_default_threads();
  }
  ScopedThreads(const ScopedThreads&) = delete;
  ScopedThreads& operator=(const ScopedThreads&) = delete;

 private:
  int saved_;
};

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Median over g_reps repetitions of the seconds one call of fn takes; each
// repetition runs enough calls to last about `rep_seconds`.
template <class F>
double seconds_per_call(F&& fn, double rep_seconds) {
  for (int i = 0; i < 3; ++i) fn();  // warm-up: caches, primitives, pages
  int64_t calls = 1;
  for (;;) {  // calibrate
    auto t0 = Clock::now();
    for (int64_t i = 0; i < calls; ++i) fn();
    double sec = std::chrono::duration<double>(Clock::now() - t0).count();
    if (sec >= rep_seconds / 4 || calls >= (int64_t(1) << 30)) {
      calls = std::max<int64_t>(1, int64_t(double(calls) * rep_seconds / std::max(sec, 1e-9)));
      break;
    }
    calls *= 4;
  }
  std::vector<double> per_call;
  for (int r = 0; r < g_reps; ++r) {
    auto t0 = Clock::now();
    for (int64_t i = 0; i < calls; ++i) fn();
    per_call.push_back(std::chrono::duration<double>(Clock::now() - t0).count() / double(calls));
  }
  return median(per_call);
}

inline void emit(const std::string& bench, const char* metric, const char* unit, double value) {
  std::printf("{\"bench\": \"%s\", \"metric\": \"%s\", \"unit\": \"%s\", \"value\": %.6g}\n", bench.c_str(), metric,
              unit, value);
  std::fflush(stdout);
}

// ---- training workloads (issue 8) ----
//
// A workload bench times one full training step (forward + loss + backward +
// optimizer step + zero grad) on a fixed synthetic batch and emits, through
// emit_workload():
//   "throughput"  items per second; items are samples, tokens, sequences or
//                 steps (unit e.g. "samples/s"), or "time" in us/call when
//                 the workload is a single call (ac_forward_b1)
//   "gflops"      flops_per_step / seconds per step; bench/run divides it by
//                 fma_peak for "peak_fraction". flops_per_step counts the
//                 matmuls and convolutions a step must run, 2 flops per
//                 multiply-add: forward, weight grads, and input grads except
//                 the network input's (data needs no grad); forward only for
//                 inference. Both sides use the same count.
//   "peak_mem"    MB the workload adds at its peak: the process's peak RSS
//                 while building and running it, minus RSS before building
//   "peak_rss"    MB, the process's peak RSS over the same interval
// bench/torch_train_*.py do the same with torch_util.MemoryProbe.

// Peak-RSS probe: construction resets the kernel's high-water mark
// (/proc/self/clear_refs "5") and records the current RSS.
class MemoryProbe {
 public:
  MemoryProbe() {
    kiln::empty_cache();  // blocks cached by an earlier bench would hide this one's allocations
    malloc_trim(0);
    if (std::FILE* f = std::fopen("/proc/self/clear_refs", "w")) {
      std::fputs("5", f);
      std::fclose(f);
    }
    base_kb_ = status_kb("VmRSS:");
  }
  double peak_mb() const { return double(status_kb("VmHWM:")) / 1024.0; }
  double added_mb() const { return double(status_kb("VmHWM:") - base_kb_) / 1024.0; }

 private:
  static long status_kb(const char* key) {
    long kb = 0;
    if (std::FILE* f = std::fopen("/proc/self/status", "r")) {
      char line[256];
      size_t n = std::strlen(key);
      while (std::fgets(line, sizeof line, f))
        if (std::strncmp(line, key, n) == 0) kb = std::strtol(line + n, nullptr, 10);
      std::fclose(f);
    }
    return kb;
  }
  long base_kb_ = 0;
};

struct Workload {
  const char* unit = "samples/s";  // throughput's unit; "us/call" emits "time" instead
  double items_per_step = 0;       // samples, tokens, sequences or steps per call
  double flops_per_step = 0;       // see above
};

// Times `step` (about 0.5 s per repetition) and emits the figures above.
template <class F>
void run_workload(const std::string& name, const Workload& w, const MemoryProbe& mem, F&& step) {
  double sec = seconds_per_call(step, 0.5);
  if (std::strcmp(w.unit, "us/call") == 0) emit(name, "time", w.unit, sec * 1e6);
  else emit(name, "throughput", w.unit, w.items_per_step / sec);
  emit(name, "gflops", "GFLOP/s", w.flops_per_step / sec * 1e-9);
  emit(name, "peak_mem", "MB", mem.added_mb());
  emit(name, "peak_rss", "MB", mem.peak_mb());
}

struct Bench {
  std::string name;
  std::function<void(const std::string&)> run;  // called with the bench's name
};

// One per family (bench/<family>_bench.cpp); each appends its benches.
void core_benches(std::vector<Bench>& out);  // add, matmul, FMA peak: kiln_bench.cpp
void conv_benches(std::vector<Bench>& out);  // conv2d, max_pool2d fwd+bwd: conv_bench.cpp
void norm_benches(std::vector<Bench>& out);  // layer_norm, cross_entropy, batch_norm: norm_bench.cpp
void attention_benches(std::vector<Bench>& out);  // attention_bench.cpp
void resize_benches(std::vector<Bench>& out);  // interpolate, rotary_embedding fwd+bwd: resize_bench.cpp
void mha_benches(std::vector<Bench>& out);        // MultiheadAttention, TransformerBlock: mha_bench.cpp
void recurrent_benches(std::vector<Bench>& out);  // lstm, gru fwd+bwd: recurrent_bench.cpp
void optim_benches(std::vector<Bench>& out);      // one AdamW step, copy-bandwidth probe: optim_bench.cpp
void io_benches(std::vector<Bench>& out);         // checkpoint save and load: io_bench.cpp
void tokenizer_benches(std::vector<Bench>& out);  // BPE training, encode, decode: tokenizer_bench.cpp
// Training workloads (issue 8; bench/run workloads): one file per family.
void train_mlp_benches(std::vector<Bench>& out);  // mlp_b64, mlp_b256: train_mlp_bench.cpp
void train_cnn_benches(std::vector<Bench>& out);  // cnn_b64: train_cnn_bench.cpp
void train_gpt_benches(std::vector<Bench>& out);  // gpt_char: train_gpt_bench.cpp
void train_rl_benches(std::vector<Bench>& out);   // ppo_update_b64, ac_forward_b1: train_rl_bench.cpp
void train_lstm_benches(std::vector<Bench>& out);  // lstm: train_lstm_bench.cpp
void rl_env_benches(std::vector<Bench>& out);       // cartpole_step_e4096, cartpole_step_e8: rl_env_bench.cpp
void generate_benches(std::vector<Bench>& out);     // lm_generate (KV-cache sampling): generate_bench.cpp
void rl_ppo_benches(std::vector<Bench>& out);       // ppo_cartpole: rl_ppo_bench.cpp
void train_mamba_benches(std::vector<Bench>& out);  // mamba_lm: train_mamba_bench.cpp
void train_vqvae_benches(std::vector<Bench>& out);  // vqvae_b128, vqvae_rvq4_b128: train_vqvae_bench.cpp
void moe_benches(std::vector<Bench>& out);          // moe_gpt_char: moe_bench.cpp
void dit_benches(std::vector<Bench>& out);          // dit_b64 (flow matching DiT step): dit_bench.cpp
void compile_benches(std::vector<Bench>& out);      // the workloads compiled (*_compiled): compile_bench.cpp
void quant_benches(std::vector<Bench>& out);        // mem_bandwidth, quant_matvec, gpt_generate_q: quant_bench.cpp
void ddp_benches(std::vector<Bench>& out);          // ddp_cnn_b64, ddp_gpt_char, ddp_allreduce: ddp_bench.cpp

}  // namespace bench
