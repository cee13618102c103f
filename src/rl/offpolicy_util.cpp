// Helpers shared by DQN and SAC (src/rl/offpolicy_util.h).
#include "src/rl/offpolicy_util.h"

#include <chrono>

#include "kiln/core/error.h"
#include "kiln/core/grad_mode.h"
#include "kiln/ops/binary.h"
#include "kiln/ops/shape.h"

namespace kiln::rl::offpolicy {

void soft_update(nn::Module& target, const nn::Module& online, double tau) {
  NoGradGuard no_grad;
  auto dst = target.named_parameters(), src = online.named_parameters();
  KILN_CHECK(dst.size() == src.size(), "soft_update", "the target has {} parameters, the online network {}",
             dst.size(), src.size());
  for (size_t i = 0; i < dst.size(); ++i) {
    const Tensor& t = dst[i].second;
    const Tensor& p = src[i].second;
    KILN_CHECK(dst[i].first == src[i].first && t.sizes() == p.sizes(), "soft_update",
               "target parameter {} {} does not match online {} {}", dst[i].first, describe(t), src[i].first,
               describe(p));
    if (tau == 1.0) copy_(t, p);
    else copy_(t, tau * p + (1.0 - tau) * t);
  }
}

void track_episodes(const Transition& t, std::vector<double>& running_return, std::vector<int64_t>& running_length,
                    double& return_sum, double& length_sum, int64_t& episodes) {
  const std::vector<double> reward = t.reward.to_vector<double>();
  const std::vector<bool> done = t.done().to_vector<bool>();
  for (size_t e = 0; e < reward.size(); ++e) {
    running_return[e] += reward[e];
    running_length[e] += 1;
    if (!done[e]) continue;
    return_sum += running_return[e];
    length_sum += double(running_length[e]);
    ++episodes;
    running_return[e] = 0;
    running_length[e] = 0;
  }
}

uint64_t env_seed(uint64_t seed, int64_t step) {
  if (step == 0) return seed;
  auto b = Generator(seed).block(uint64_t(step));
  return uint64_t(b[0]) | (uint64_t(b[1]) << 32);
}

void learn_windows(const char* op, int64_t stats_every, const std::function<void()>& begin,
                   const std::function<bool()>& done, const std::function<int64_t()>& step,
                   const std::function<bool(double)>& report) {
  using Clock = std::chrono::steady_clock;
  KILN_CHECK(stats_every > 0, op, "stats_every must be positive, got {}", stats_every);
  begin();
  auto t0 = Clock::now();
  while (!done()) {
    const int64_t n = step();
    if (n % stats_every != 0 && !done()) continue;
    const auto now = Clock::now();
    const double seconds = std::chrono::duration<double>(now - t0).count();
    t0 = now;
    if (!report(seconds)) break;
  }
}

io::State run_state(int64_t step, int64_t updates, int64_t num_envs,
                    std::initializer_list<std::pair<std::string, const Generator*>> generators) {
  io::State s{{"step", std::to_string(step)}, {"updates", std::to_string(updates)},
              {"num_envs", std::to_string(num_envs)}};
  for (const auto& [name, gen] : generators) {
    s[name + ".seed"] = std::to_string(gen->seed());
    s[name + ".offset"] = std::to_string(gen->offset());
  }
  return s;
}

RunCounters load_run_state(const io::State& s, const char* op, const char* algo, int64_t num_envs,
                           int64_t num_steps, std::initializer_list<std::pair<std::string, Generator*>> generators) {
  const RunCounters c{io::state_i64(s, "step", op), io::state_i64(s, "updates", op)};
  const int64_t envs = io::state_i64(s, "num_envs", op);
  KILN_CHECK(envs == num_envs, op, "the state is of {} environments, this {} runs {}", envs, algo, num_envs);
  KILN_CHECK(c.step >= 0 && c.step <= num_steps && c.updates >= 0, op,
             "the state is at step {} ({} updates), outside this run's {} steps", c.step, c.updates, num_steps);
  std::vector<GeneratorState> states;
  for (const auto& [name, gen] : generators)
    states.push_back({io::state_u64(s, name + ".seed", op), io::state_u64(s, name + ".offset", op)});
  size_t i = 0;
  for (const auto& [name, gen] : generators) gen->set_state(states[i++]);
  return c;
}

}  // namespace kiln::rl::offpolicy
