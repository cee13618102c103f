// Compiled variants of the training workloads (issue 31, docs/compile.md):
// the same model, data and optimizer as the eager row of the same name
// without "_compiled", with the step recorded once by train::CompiledStep and
// replayed on every call. The update is train::update_guarded (the finite
// checks run at replay), so each compiled step does the eager row's work.
// Compare with the eager rows of the same run (kiln against kiln): speed and
// peak_mem.
#include "bench/bench.h"

#include <time.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "kiln/kiln.h"

namespace bench {

kiln::nn::Sequential cnn_b64_model(const kiln::nn::Init& init);  // train_cnn_bench.cpp

namespace {

using namespace kiln;

// Runs `body` compiled: the recording happens in the first (warm-up) call.
// The recording is an eager step that keeps every buffer until the passes
// have planned them, a one-time cost like torch.compile's; "peak_mem" is the
// steady state of the compiled step (the probe's high-water mark is reset
// after the recording, and the allocator's cache emptied, as the recording
// does), "peak_mem_recording" the peak up to the end of the recording. Both
// are measured from the same base as the eager row's peak_mem. The eager
// row's peak_mem includes its first step's one-time costs (oneDNN's JIT code,
// primitives, first reorders), which the compiled row's excludes; so this row
// measures eager's steady state exactly as it measures the compiled step's:
// after a warm-up step, the allocator's cache emptied, malloc_trim, the
// high-water mark reset, two eager steps: "peak_mem_eager", and
// "peak_mem_ratio" = peak_mem / peak_mem_eager. The process's RSS also holds
// what eager and compiled steps share (oneDNN's reordered inputs, scratchpads
// and JIT code), so the bench reports tensor memory too: "tensor_mem" is the
// allocator's peak of live tensor bytes (parameters, optimizer state and the
// step's buffers) over the replays, "tensor_mem_eager" the same over those two
// eager steps, "tensor_mem_ratio" the first over the second.
void run_compiled(const std::string& name, const Workload& w, const MemoryProbe& mem, train::CompiledStep::Fn body,
                  train::CompileOptions options, const std::vector<Tensor>& inputs) {
  auto settle = [] {  // the allocator's cache emptied, freed pages returned, the RSS high-water mark reset
    empty_cache();
    malloc_trim(0);
    if (std::FILE* f = std::fopen("/proc/self/clear_refs", "w")) {
      std::fputs("5", f);
      std::fclose(f);
    }
  };
  body(inputs);  // warm-up: oneDNN's primitives and JIT code, first reorders
  settle();
  reset_peak_memory_stats();
  body(inputs);
  body(inputs);
  const double eager_tensor_mb = double(memory_stats().peak_bytes) / (1024.0 * 1024.0);
  const double eager_rss_mb = mem.added_mb();
  // KILN_COMPILE_FUSION=0: the Fusion pass off, to measure what it brings (A B A B).
  if (const char* f = std::getenv("KILN_COMPILE_FUSION"); f && std::string(f) == "0") options.fusion = false;
  if (const char* p = std::getenv("KILN_COMPILE_EVIDENCE"); p && std::string(p) == "1") options.print_evidence = true;
  train::CompiledStep step(body, std::move(options));
  step(inputs);
  KILN_CHECK(step.evidence().replayable, "bench", "{}: the step was not compiled:\n{}", name,
             step.evidence().str());
  const double recording_mb = mem.added_mb();
  settle();
  reset_peak_memory_stats();
  run_workload(name, w, mem, [&] { step(inputs); });
  const double compiled_rss_mb = mem.added_mb(), compiled_tensor_mb = double(memory_stats().peak_bytes) / (1024.0 * 1024.0);
  emit(name, "peak_mem_recording", "MB", recording_mb);
  emit(name, "peak_mem_eager", "MB", eager_rss_mb);
  emit(name, "peak_mem_ratio", "x", compiled_rss_mb / std::max(eager_rss_mb, 1e-9));
  emit(name, "tensor_mem", "MB", compiled_tensor_mb);
  emit(name, "tensor_mem_eager", "MB", eager_tensor_mb);
  emit(name, "tensor_mem_ratio", "x", compiled_tensor_mb / std::max(eager_tensor_mb, 1e-9));
  // Process CPU time per step, the eager body and the replay alternately
  // (A B A B, five rounds of ~0.2 s of CPU each), medians: steadier than wall time
  // on a shared machine (run at KILN_NUM_THREADS=1 to compare).
  auto cpu_now = [] {
    timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9;
  };
  double c0 = cpu_now();
  for (int i = 0; i < 3; ++i) step(inputs);
  const double cpu_step = (cpu_now() - c0) / 3;
  const int64_t n = std::max<int64_t>(3, int64_t(0.2 / std::max(cpu_step, 1e-7)));
  std::vector<double> eager_us, compiled_us;
  for (int round = 0; round < 5; ++round) {
    double t0 = cpu_now();
    for (int64_t i = 0; i < n; ++i) body(inputs);
    double t1 = cpu_now();
    for (int64_t i = 0; i < n; ++i) step(inputs);
    double t2 = cpu_now();
    eager_us.push_back((t1 - t0) / double(n) * 1e6);
    compiled_us.push_back((t2 - t1) / double(n) * 1e6);
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  emit(name, "cpu_us_eager", "us/step", median(eager_us));
  emit(name, "cpu_us_compiled", "us/step", median(compiled_us));
  emit(name, "cpu_speedup", "x", median(eager_us) / median(compiled_us));
}

void mlp_compiled(const std::string& name, int64_t batch) {
  MemoryProbe mem;
  Rngs rngs(0);
  nn::Init init(rngs);
  nn::Sequential net(nn::Linear(784, 256, init), nn::ReLU(), nn::Linear(256, 256, init), nn::ReLU(),
                     nn::Linear(256, 10, init));
  optim::Adam opt(net.parameters(), {.lr = 1e-3});
  Generator gen(1);
  Tensor x = randn({batch, 784}, gen), y = randint(0, 10, {batch}, gen);
  double flops = 2.0 * double(batch) * (2 * (784 * 256 + 256 * 256 + 256 * 10) + 256 * 256 + 256 * 10);
  run_compiled(
      name, {.unit = "samples/s", .items_per_step = double(batch), .flops_per_step = flops}, mem,
      [&](const std::vector<Tensor>& in) {
        Tensor loss = cross_entropy(net.forward(in[0]), in[1]);
        return std::vector<Tensor>{loss, train::update_guarded(loss, opt)};
      },
      {.modules = {&net}}, {x, y});
}

void cnn_compiled(const std::string& name, int64_t batch) {
  MemoryProbe mem;
  Rngs rngs(0);
  nn::Init init(rngs);
  nn::Sequential net = cnn_b64_model(init);
  optim::Adam opt(net.parameters(), {.lr = 1e-3});
  Generator gen(1);
  Tensor x = randn({batch, 1, 28, 28}, gen), y = randint(0, 10, {batch}, gen);
  // The flops of train_cnn_bench.cpp's row are not needed to compare speeds: 0 here.
  run_compiled(
      name, {.unit = "samples/s", .items_per_step = double(batch), .flops_per_step = 0}, mem,
      [&](const std::vector<Tensor>& in) {
        Tensor loss = cross_entropy(net.forward(in[0]), in[1]);
        return std::vector<Tensor>{loss, train::update_guarded(loss, opt)};
      },
      {.modules = {&net}}, {x, y});
}

void gpt_compiled(const std::string& name) {
  MemoryProbe mem;
  Rngs rngs(0);
  models::GPTConfig cfg{};
  models::GPT gpt(cfg, rngs);
  optim::AdamW opt(gpt.parameters(), {.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.99, .weight_decay = 0.1});
  Generator gen(1);
  const int64_t B = 12, T = 64;
  Tensor idx = randint(0, cfg.vocab_size, {B, T}, gen);
  Tensor targets = randint(0, cfg.vocab_size, {B, T}, gen);
  run_compiled(
      name, {.unit = "tokens/s", .items_per_step = double(B * T), .flops_per_step = 0}, mem,
      [&](const std::vector<Tensor>& in) {
        Tensor loss = gpt.loss(in[0], in[1]);
        return std::vector<Tensor>{loss, train::update_guarded(loss, opt)};
      },
      {.modules = {&gpt}}, {idx, targets});
}

// train_rl_bench.cpp's actor-critic: trunk 4-64-64 tanh, policy head 2, value head 1.
struct ActorCritic : nn::Module {
  explicit ActorCritic(const nn::Init& init)
      : l1(register_module("l1", nn::Linear(4, 64, init))),
        l2(register_module("l2", nn::Linear(64, 64, init))),
        pi(register_module("pi", nn::Linear(64, 2, init))),
        v(register_module("v", nn::Linear(64, 1, init))) {}
  std::pair<Tensor, Tensor> forward(const Tensor& obs) const {
    Tensor h = tanh(l2(tanh(l1(obs))));
    return {pi(h), squeeze(v(h), -1)};
  }
  nn::Shared<nn::Linear> l1, l2, pi, v;
};

void ppo_update_compiled(const std::string& name, int64_t batch) {
  MemoryProbe mem;
  Rngs rngs(0);
  nn::Init init(rngs);
  ActorCritic net(init);
  optim::Adam opt(net.parameters(), {.lr = 3e-4});
  Generator gen(1);
  Tensor obs = randn({batch, 4}, gen);
  Tensor actions = unsqueeze(randint(0, 2, {batch}, gen), 1);
  Tensor old_logp = randn({batch}, gen) * 0.1 - 0.7;
  Tensor adv = randn({batch}, gen), returns = randn({batch}, gen);
  run_compiled(
      name, {.unit = "steps/s", .items_per_step = 1, .flops_per_step = 0}, mem,
      [&](const std::vector<Tensor>& in) {
        auto [logits, value] = net.forward(in[0]);
        Tensor logp_all = log_softmax(logits, -1);
        Tensor logp = squeeze(gather(logp_all, 1, in[1]), 1);
        Tensor ratio = exp(logp - in[2]);
        Tensor surr = minimum(ratio * in[3], clamp(ratio, 0.8, 1.2) * in[3]);
        Tensor entropy = mean(neg(sum(exp(logp_all) * logp_all, {-1})));
        Tensor loss = neg(mean(surr)) + 0.5 * mse_loss(value, in[4]) - 0.01 * entropy;
        return std::vector<Tensor>{loss, train::update_guarded(loss, opt)};
      },
      {.modules = {&net}}, {obs, actions, old_logp, adv, returns});
}

void ac_forward_compiled(const std::string& name) {
  MemoryProbe mem;
  Rngs rngs(0);
  nn::Init init(rngs);
  ActorCritic net(init);
  Generator gen(1);
  Tensor obs = randn({1, 4}, gen);
  NoGradGuard no_grad;  // grad mode is part of the signature: the whole bench runs without it
  run_compiled(
      name, {.unit = "us/call", .items_per_step = 1, .flops_per_step = 0}, mem,
      [&](const std::vector<Tensor>& in) {
        auto [logits, value] = net.forward(in[0]);
        return std::vector<Tensor>{logits, value};
      },
      {.modules = {&net}}, {obs});
}

}  // namespace

void compile_benches(std::vector<Bench>& out) {
  out.push_back({"mlp_b64_compiled", [](const std::string& n) { mlp_compiled(n, 64); }});
  out.push_back({"cnn_b64_compiled", [](const std::string& n) { cnn_compiled(n, 64); }});
  out.push_back({"gpt_char_compiled", [](const std::string& n) { gpt_compiled(n); }});
  out.push_back({"ppo_update_b64_compiled", [](const std::string& n) { ppo_update_compiled(n, 64); }});
  out.push_back({"ac_forward_b1_compiled", [](const std::string& n) { ac_forward_compiled(n); }});
}

}  // namespace bench
