// Training workloads mlp_b64 and mlp_b256 (issue 8; bench/torch_train_mlp.py
// is PyTorch's side): MLP 784-256-256-10 with ReLU, cross-entropy, Adam
// (lr 1e-3), one full step per call on a fixed synthetic batch.
#include "bench/bench.h"
#include "kiln/kiln.h"

namespace bench {

namespace {

void mlp_step_bench(const std::string& name, int64_t batch) {
  using namespace kiln;
  MemoryProbe mem;
  Rngs rngs(0);
  nn::Init init(rngs);
  nn::Sequential net(nn::Linear(784, 256, init), nn::ReLU(), nn::Linear(256, 256, init), nn::ReLU(),
                     nn::Linear(256, 10, init));
  optim::Adam opt(net.parameters(), {.lr = 1e-3});
  Generator gen(1);
  Tensor x = randn({batch, 784}, gen), y = randint(0, 10, {batch}, gen);
  double flops = 2.0 * double(batch) * (2 * (784 * 256 + 256 * 256 + 256 * 10) + 256 * 256 + 256 * 10);
  run_workload(name, {.unit = "samples/s", .items_per_step = double(batch), .flops_per_step = flops}, mem, [&] {
    train::update(cross_entropy(net.forward(x), y), opt);
  });
}

}  // namespace

void train_mlp_benches(std::vector<Bench>& out) {
  out.push_back({"mlp_b64", [](const std::string& n) { mlp_step_bench(n, 64); }});
  out.push_back({"mlp_b256", [](const std::string& n) { mlp_step_bench(n, 256); }});
}

}  // namespace bench
