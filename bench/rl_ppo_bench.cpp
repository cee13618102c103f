// PPO end to end (issue 9; bench/torch_rl_ppo.py is PyTorch's side):
// ppo_cartpole, CleanRL's ppo.py settings (PPOOptions' defaults) on 8
// environments: 128-step rollouts, then 4 epochs of 4 minibatches of 256 on
// the tanh 64-64 actor and critic (MlpActorCritic's defaults). One
// call is one PPO iteration (collection, GAE, the 16 updates); the figure is
// environment steps per second (1024 per call). kiln runs on one thread, as
// `kiln rl ppo` does by default and as PyTorch's side runs: at these sizes
// (batch 8 forwards, 256-row updates) a second thread only adds hand-offs,
// and on shared cores OpenMP's spinning makes them far worse.
#include "bench/bench.h"
#include "kiln/kiln.h"

namespace bench {

namespace {

using namespace kiln;

void ppo_cartpole_bench(const std::string& name) {
  bench::ScopedThreads one(1);
  const rl::PPOOptions o{.total_timesteps = int64_t(1) << 40};  // never done; the rate anneals negligibly
  rl::CartPole env(8);
  Rngs rngs{{"params", 1}};
  rl::MlpActorCritic agent(env.spec(), nn::Init(rngs));
  rl::PPO ppo(env, agent, o);
  const double sec = seconds_per_call([&] { ppo.iterate(); }, 1.0);
  emit(name, "throughput", "steps/s", double(o.num_steps * env.num_envs()) / sec);
}

}  // namespace

void rl_ppo_benches(std::vector<Bench>& out) { out.push_back({"ppo_cartpole", ppo_cartpole_bench}); }

}  // namespace bench
