// Raw vectorised environment stepping (issue 9; bench/torch_rl_env.py is the
// NumPy side): one call is one CartPole step of E copies, with automatic
// resets; actions are drawn before timing, 64 batches used in turn.
//   cartpole_step_e4096: E = 4096, stepped in parallel chunks
//   cartpole_step_e8: E = 8, PPO's setting (per-call overhead dominates)
// Figure: throughput in environment steps per second (E per call).
#include "bench/bench.h"
#include "kiln/kiln.h"

namespace bench {

namespace {

using namespace kiln;

void cartpole_step_bench(const std::string& name, int64_t num_envs) {
  rl::CartPole env(num_envs);
  env.reset(0);
  Generator gen(1);
  std::vector<Tensor> actions;
  for (int i = 0; i < 64; ++i) actions.push_back(randint(0, 2, {num_envs}, gen));
  size_t next = 0;
  double sec = seconds_per_call(
      [&] {
        rl::Transition t = env.step(actions[next]);
        next = (next + 1) % actions.size();
      },
      0.3);
  emit(name, "throughput", "steps/s", double(num_envs) / sec);
}

}  // namespace

void rl_env_benches(std::vector<Bench>& out) {
  out.push_back({"cartpole_step_e4096", [](const std::string& n) { cartpole_step_bench(n, 4096); }});
  out.push_back({"cartpole_step_e8", [](const std::string& n) { cartpole_step_bench(n, 8); }});
}

}  // namespace bench
