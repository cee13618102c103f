// Helpers shared by DQN and SAC (src/rl/offpolicy_util.h).
#include "src/rl/offpolicy_util.h"

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

void put_generator(io::State& state, const std::string& name, const Generator& gen) {
  state[name + ".seed"] = std::to_string(gen.seed());
  state[name + ".offset"] = std::to_string(gen.offset());
}

GeneratorState get_generator(const io::State& state, const std::string& name, const char* op) {
  return {io::state_u64(state, name + ".seed", op), io::state_u64(state, name + ".offset", op)};
}

}  // namespace kiln::rl::offpolicy
