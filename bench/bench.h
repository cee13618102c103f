// Shared by kiln_bench's sources: timing, JSON output and the bench table.
// Each family of benches lives in its own bench/<family>_bench.cpp and adds
// its entries through a function declared here and called from all_benches().
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

namespace bench {

using Clock = std::chrono::steady_clock;

inline int g_reps = 7;  // repetitions per figure; each figure is their median

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

}  // namespace bench
