// kiln's attention benches: causal self-attention forward + backward on the
// flash path (attention_b12h4t64), and the peak extra memory of forward +
// backward on both paths as T grows (attention_memory_t*).
#include "bench/bench.h"
#include "kiln/kiln.h"

namespace bench {

namespace {

struct Qkv {
  kiln::Tensor q, k, v;
};

// Leaves q, k, v [B, H, T, D] f32 that require grad.
Qkv make_qkv(int64_t B, int64_t H, int64_t T, int64_t D) {
  kiln::Generator gen(5);
  Qkv x{kiln::randn({B, H, T, D}, gen), kiln::randn({B, H, T, D}, gen), kiln::randn({B, H, T, D}, gen)};
  for (kiln::Tensor* t : {&x.q, &x.k, &x.v}) t->requires_grad_(true);
  return x;
}

// One training-style step: out = attention(q, k, v), sum(out).backward(),
// grads dropped (as `q.grad = None` on the torch side).
void step(const Qkv& x, kiln::AttentionBackend policy) {
  kiln::Tensor out = kiln::scaled_dot_product_attention(x.q, x.k, x.v, {.causal = true, .policy = policy}).out;
  kiln::sum(out).backward();
  for (const kiln::Tensor* t : {&x.q, &x.k, &x.v}) t->set_grad(kiln::Tensor());
}

void bench_time(const std::string& name, int64_t B, int64_t H, int64_t T, int64_t D) {
  Qkv x = make_qkv(B, H, T, D);
  emit(name, "time", "us/iter", seconds_per_call([&] { step(x, kiln::AttentionBackend::Flash); }, 0.3) * 1e6);
  emit(name, "standard_time", "us/iter",
       seconds_per_call([&] { step(x, kiln::AttentionBackend::Standard); }, 0.3) * 1e6);
}

// Peak bytes allocated above the inputs during one step (kiln::memory_stats).
int64_t peak_extra(const Qkv& x, kiln::AttentionBackend policy) {
  step(x, policy);  // warm-up; the peak counts bytes handed out, whether from the cache or malloc
  const int64_t base = kiln::memory_stats().current_bytes;
  kiln::reset_peak_memory_stats();
  step(x, policy);
  return kiln::memory_stats().peak_bytes - base;
}

void bench_memory(const std::string& name, int64_t T) {
  const int64_t B = 2, H = 4, D = 32;
  Qkv x = make_qkv(B, H, T, D);
  emit(name, "peak_extra_bytes", "bytes", double(peak_extra(x, kiln::AttentionBackend::Flash)));
  emit(name, "standard_peak_extra_bytes", "bytes", double(peak_extra(x, kiln::AttentionBackend::Standard)));
}

}  // namespace

void attention_benches(std::vector<Bench>& out) {
  out.push_back({"attention_b12h4t64", [](const std::string& n) { bench_time(n, 12, 4, 64, 32); }});
  for (int64_t T : {64, 256, 1024})
    out.push_back({"attention_memory_t" + std::to_string(T), [T](const std::string& n) { bench_memory(n, T); }});
}

}  // namespace bench
