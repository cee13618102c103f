// Training workloads ppo_update_b64 and ac_forward_b1 (issue 8;
// bench/torch_train_rl.py is PyTorch's side): an actor-critic MLP
// 4-64-64-(2+1) with tanh, the shared trunk Linear(4->64)-Tanh-Linear(64->64)-
// Tanh feeding a policy head Linear(64->2) (logits of a categorical over two
// actions) and a value head Linear(64->1).
//   ppo_update_b64: one PPO update on a fixed synthetic batch of 64: clipped
//     surrogate (clip 0.2) + 0.5 * value MSE - 0.01 * mean entropy, Adam
//     (lr 3e-4); forward, loss, backward, step, zero grad per call.
//   ac_forward_b1: the forward at batch 1 under NoGradGuard (logits, value).
// Both are dominated by per-op overhead (about 30 small ops per PPO step).
#include "bench/bench.h"
#include "kiln/kiln.h"

namespace bench {

namespace {

using namespace kiln;

struct ActorCritic : nn::Module {
  explicit ActorCritic(const nn::Init& init)
      : l1(register_module("l1", nn::Linear(4, 64, init))),
        l2(register_module("l2", nn::Linear(64, 64, init))),
        pi(register_module("pi", nn::Linear(64, 2, init))),
        v(register_module("v", nn::Linear(64, 1, init))) {}

  // obs [B, 4] -> logits [B, 2], value [B]
  std::pair<Tensor, Tensor> forward(const Tensor& obs) const {
    Tensor h = tanh(l2(tanh(l1(obs))));
    return {pi(h), squeeze(v(h), -1)};
  }

  nn::Shared<nn::Linear> l1, l2, pi, v;
};

// Matmul flops of one forward at batch b (2 per multiply-add).
double forward_flops(int64_t b) { return 2.0 * double(b) * (4 * 64 + 64 * 64 + 64 * 2 + 64 * 1); }

void ppo_update_bench(const std::string& name, int64_t batch) {
  MemoryProbe mem;
  Rngs rngs(0);
  nn::Init init(rngs);
  ActorCritic net(init);
  optim::Adam opt(net.parameters(), {.lr = 3e-4});
  Generator gen(1);
  Tensor obs = randn({batch, 4}, gen);
  Tensor actions = unsqueeze(randint(0, 2, {batch}, gen), 1);  // [B, 1] for gather
  Tensor old_logp = randn({batch}, gen) * 0.1 - 0.7;
  Tensor adv = randn({batch}, gen), returns = randn({batch}, gen);
  // forward + weight grads of every layer + input grads of all but the first
  double flops = 2 * forward_flops(batch) + 2.0 * double(batch) * (64 * 64 + 64 * 2 + 64 * 1);
  run_workload(name, {.unit = "steps/s", .items_per_step = 1, .flops_per_step = flops}, mem, [&] {
    auto [logits, value] = net.forward(obs);
    Tensor logp_all = log_softmax(logits, -1);
    Tensor logp = squeeze(gather(logp_all, 1, actions), 1);
    Tensor ratio = exp(logp - old_logp);
    Tensor surr = minimum(ratio * adv, clamp(ratio, 0.8, 1.2) * adv);
    Tensor entropy = mean(neg(sum(exp(logp_all) * logp_all, {-1})));
    Tensor loss = neg(mean(surr)) + 0.5 * mse_loss(value, returns) - 0.01 * entropy;
    train::update(loss, opt);
  });
}

void ac_forward_bench(const std::string& name) {
  MemoryProbe mem;
  Rngs rngs(0);
  nn::Init init(rngs);
  ActorCritic net(init);
  Generator gen(1);
  Tensor obs = randn({1, 4}, gen);
  run_workload(name, {.unit = "us/call", .items_per_step = 1, .flops_per_step = forward_flops(1)}, mem, [&] {
    NoGradGuard no_grad;
    auto out = net.forward(obs);
  });
}

}  // namespace

void train_rl_benches(std::vector<Bench>& out) {
  out.push_back({"ppo_update_b64", [](const std::string& n) { ppo_update_bench(n, 64); }});
  out.push_back({"ac_forward_b1", [](const std::string& n) { ac_forward_bench(n); }});
}

}  // namespace bench
