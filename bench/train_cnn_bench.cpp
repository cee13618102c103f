// Training workload cnn_b64 (issue 8; bench/torch_train_cnn.py is PyTorch's
// side): Conv2d(1->32, 3x3, pad 1)-ReLU-MaxPool2d(2)-Conv2d(32->64, 3x3, pad 1)
// -ReLU-MaxPool2d(2)-Flatten-Linear(3136->128)-ReLU-Linear(128->10), convs with
// bias, cross-entropy, Adam (lr 1e-3), batch 64 of [1, 28, 28] randn images with
// randint(10) labels; one full step per call on that fixed batch.
#include <cmath>

#include "bench/bench.h"
#include "kiln/kiln.h"

namespace bench {

// The cnn_b64 model: [B, 1, 28, 28] -> [B, 10] logits. Its own function so a
// variant (e.g. bf16 compute) can reuse the same layers.
kiln::nn::Sequential cnn_b64_model(const kiln::nn::Init& init) {
  using namespace kiln;
  return nn::Sequential(nn::Conv2d(1, 32, 3, init, {.padding = 1}), nn::ReLU(), nn::MaxPool2d(2),
                        nn::Conv2d(32, 64, 3, init, {.padding = 1}), nn::ReLU(), nn::MaxPool2d(2), nn::Flatten(),
                        nn::Linear(3136, 128, init), nn::ReLU(), nn::Linear(128, 10, init));
}

namespace {

// Multiply-adds per sample, 2 flops each (bench.h): conv1 forward + weight grad
// (the input needs no grad), conv2, fc1 and fc2 forward + weight grad + input grad.
double cnn_flops_per_sample() {
  double conv1 = 32.0 * 28 * 28 * (1 * 9), conv2 = 64.0 * 14 * 14 * (32 * 9);
  double fc1 = 3136.0 * 128, fc2 = 128.0 * 10;
  return 2.0 * (2 * conv1 + 3 * (conv2 + fc1 + fc2));
}

void cnn_step_bench(const std::string& name, int64_t batch) {
  using namespace kiln;
  MemoryProbe mem;
  Rngs rngs(0);
  nn::Init init(rngs);
  nn::Sequential net = cnn_b64_model(init);
  optim::Adam opt(net.parameters(), {.lr = 1e-3});
  Generator gen(1);
  Tensor x = randn({batch, 1, 28, 28}, gen), y = randint(0, 10, {batch}, gen);
  Workload w{.unit = "samples/s",
             .items_per_step = double(batch),
             .flops_per_step = double(batch) * cnn_flops_per_sample()};
  run_workload(name, w, mem, [&] {
    train::update(cross_entropy(net.forward(x), y), opt);
  });
}

// ---- cnn_b64_bf16: the same model, data and optimizer with bf16 compute (docs/mixed_precision.md) ----

// The cnn_b64 model trained `steps` steps on the workload's batch, with bf16
// compute or not; the loss is taken on f32 logits (precision-sensitive).
struct CnnBf16Run {
  kiln::Rngs rngs{0};
  kiln::nn::Sequential net;
  kiln::optim::Adam opt;
  kiln::Tensor x, y;
  CnnBf16Run(int64_t batch, bool bf16)
      : net(cnn_b64_model(kiln::nn::Init(rngs))), opt(net.parameters(), {.lr = 1e-3}) {
    using namespace kiln;
    if (bf16) net.set_compute_dtype(kBF16);
    Generator gen(1);
    x = randn({batch, 1, 28, 28}, gen);
    y = randint(0, 10, {batch}, gen);
  }
  double step() {
    kiln::Tensor loss = kiln::cross_entropy(kiln::to(net.forward(x), kiln::kF32), y);
    kiln::train::update(loss, opt);
    return loss.item<float>();
  }
};

void cnn_bf16_step_bench(const std::string& name, int64_t batch) {
  {
    MemoryProbe mem;
    CnnBf16Run run(batch, true);
    Workload w{.unit = "samples/s", .items_per_step = double(batch), .flops_per_step = double(batch) * cnn_flops_per_sample()};
    run_workload(name, w, mem, [&] { run.step(); });
  }
  // The accuracy check: |loss_bf16 - loss_f32| / loss_f32 after 50 steps
  // from the same init on the same batch (the loss values are emitted too: this
  // fixed batch is memorized, the loss falls to about 1e-3 by step 50).
  double loss[2] = {0, 0};
  for (int bf16 = 0; bf16 < 2; ++bf16) {
    CnnBf16Run run(batch, bf16 == 1);
    for (int s = 0; s < 50; ++s) loss[bf16] = run.step();
  }
  emit(name, "loss50_f32", "loss", loss[0]);
  emit(name, "loss50_bf16", "loss", loss[1]);
  emit(name, "loss_rel_diff", "fraction", std::abs(loss[1] - loss[0]) / loss[0]);
}

}  // namespace

void train_cnn_benches(std::vector<Bench>& out) {
  out.push_back({"cnn_b64", [](const std::string& n) { cnn_step_bench(n, 64); }});
  out.push_back({"cnn_b64_bf16", [](const std::string& n) { cnn_bf16_step_bench(n, 64); }});
}

}  // namespace bench
