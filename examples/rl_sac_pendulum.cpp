// SAC on Pendulum-v1 (kiln/rl/sac.h) with CleanRL's sac_continuous_action.py
// settings and a fixed alpha 0.2: trains for --steps environment steps and,
// every --eval-every, runs --eval-episodes deterministic (squashed-mean)
// episodes on a separate environment. Prints one line per evaluation and a
// summary: the first evaluation at or above -200.
//
//   build/examples/rl_sac_pendulum --seed 1 --steps 30000
#include <kiln/kiln.h>
#include <kiln/rl/evaluate.h>
#include <kiln/rl/sac.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

using namespace kiln;

int main(int argc, char** argv) {
  uint64_t seed = 1;
  int64_t steps = 30'000, eval_every = 2'000, eval_episodes = 10;
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
  set_num_threads(1);
  auto env = rl::make_vector_env("Pendulum-v1", 1);
  auto eval_env = rl::make_vector_env("Pendulum-v1", 1);
  rl::SAC sac(*env, {.total_timesteps = steps, .seed = seed});
  const auto t0 = std::chrono::steady_clock::now();
  int64_t solved_at = -1;
  double best = -1e300, last = 0;
  sac.learn(
      [&](const rl::SACStats& s) {
        rl::EvaluationResult r = rl::evaluate_policy(sac.deterministic_policy(), *eval_env,
                                                     {.episodes = eval_episodes, .seed = 10'000 + seed});
        const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        std::printf("step %6lld  qf_loss %8.3f  q1 %8.2f  actor_loss %8.2f  entropy %6.2f  train_return %7.1f  "
                    "eval %7.1f +- %5.1f  %6.1fs\n",
                    (long long)s.global_step, s.qf_loss, s.qf1_value, s.actor_loss, s.entropy, s.mean_return,
                    r.mean_return, r.std_return, wall);
        std::fflush(stdout);
        if (r.mean_return >= -200 && solved_at < 0) solved_at = s.global_step;
        best = std::max(best, r.mean_return);
        last = r.mean_return;
        return true;
      },
      eval_every);
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("summary seed %llu: first eval >= -200 at step %lld, best eval %.1f, final eval %.1f, %.1fs\n",
              (unsigned long long)seed, (long long)solved_at, best, last, wall);
  return 0;
}
