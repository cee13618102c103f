// PPO on CartPole-v1 with the tuned preset: train 8 environments for up to
// 200k steps, evaluate the deterministic (argmax) policy every 10k steps on
// 10 episodes, and stop once the mean return reaches 475 (CartPole-v1's
// reward_threshold). Seeded: the same seed gives the same run.
//   build/examples/rl_ppo_cartpole [seed]
#include <kiln/kiln.h>

#include <cstdio>
#include <cstdlib>

using namespace kiln;

int main(int argc, char** argv) {
  const uint64_t seed = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 1;
  set_num_threads(1);  // batch-8 forwards: one core beats two

  rl::PPOPreset preset = rl::ppo_preset("cartpole");  // 8 envs x 32 steps, 20 epochs, 200k steps
  preset.ppo.seed = seed;                             // actions, minibatch order, resets
  auto env = rl::make_vector_env(preset.env, preset.num_envs);
  auto eval_env = rl::make_vector_env(preset.env, 10);
  Rngs rngs{{"params", seed}};
  rl::MlpActorCritic agent(env->spec(), nn::Init(rngs), preset.agent);  // tanh 64-64 actor and critic
  rl::PPO ppo(*env, agent, preset.ppo);

  int64_t next_eval = 10'000;
  ppo.learn([&](const rl::PPOStats& s) {
    if (s.global_step < next_eval) return true;
    next_eval += 10'000;
    rl::EvaluationResult r = rl::evaluate_policy(agent, *eval_env, {.episodes = 10, .seed = 1'000'000 + seed});
    std::printf("step %6lld  training return %6.1f  evaluation %6.1f +- %5.1f\n", (long long)s.global_step,
                s.mean_return, r.mean_return, r.std_return);
    if (r.mean_return < preset.target_return) return true;
    std::printf("solved at step %lld\n", (long long)s.global_step);
    return false;  // stop learning
  });
  return 0;
}
