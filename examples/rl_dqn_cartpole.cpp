// DQN on CartPole-v1 (kiln/rl/dqn.h) with CleanRL's dqn.py settings: trains for --steps environment steps and, every
// --eval-every, runs --eval-episodes deterministic (greedy) episodes on a
// separate environment. Prints one line per evaluation and a summary:
// the first evaluation at or above 475 (CartPole-v1's solved threshold).
//
//   build/examples/rl_dqn_cartpole --seed 1 --steps 200000
#include <kiln/kiln.h>
#include <kiln/rl/dqn.h>
#include <kiln/rl/evaluate.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

using namespace kiln;

int main(int argc, char** argv) {
  uint64_t seed = 1;
  int64_t steps = 200'000, eval_every = 10'000, eval_episodes = 10;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const int64_t v = std::atoll(argv[i + 1]);
    if (flag == "--seed") seed = uint64_t(v);
    else if (flag == "--steps") steps = v;
    else if (flag == "--eval-every") eval_every = v;
    else if (flag == "--eval-episodes") eval_episodes = v;
    else {
      std::fprintf(stderr, "usage: %s [--seed S] [--steps N] [--eval-every K] [--eval-episodes M]\n", argv[0]);
      return 2;
    }
  }
  set_num_threads(1);  // tiny networks: threads cost more than they give
  auto env = rl::make_vector_env("CartPole-v1", 1);
  auto eval_env = rl::make_vector_env("CartPole-v1", 1);
  rl::DQN dqn(*env, {.total_timesteps = steps, .seed = seed});
  const auto t0 = std::chrono::steady_clock::now();
  int64_t solved_at = -1;
  double best = -1e300, last = 0;
  dqn.learn(
      [&](const rl::DQNStats& s) {
        rl::EvaluationResult r =
            rl::evaluate_policy(dqn.greedy_policy(), *eval_env, {.episodes = eval_episodes, .seed = 10'000 + seed});
        const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        std::printf("step %7lld  eps %.3f  td_loss %8.4f  q %7.2f  train_return %6.1f  eval %6.1f +- %5.1f  %6.1fs\n",
                    (long long)s.global_step, s.epsilon, s.td_loss, s.q_value, s.mean_return, r.mean_return,
                    r.std_return, wall);
        std::fflush(stdout);
        if (r.mean_return >= 475 && solved_at < 0) solved_at = s.global_step;
        best = std::max(best, r.mean_return);
        last = r.mean_return;
        return true;
      },
      eval_every);
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("summary seed %llu: first eval >= 475 at step %lld, best eval %.1f, final eval %.1f, %.1fs\n",
              (unsigned long long)seed, (long long)solved_at, best, last, wall);
  return 0;
}
