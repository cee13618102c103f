// evaluate_policy (kiln/rl/evaluate.h).
#include "kiln/rl/evaluate.h"

#include <cmath>

#include "kiln/core/error.h"
#include "kiln/core/grad_mode.h"
#include "kiln/rl/distributions.h"

namespace kiln::rl {

EvaluationResult evaluate_policy(ActorCritic& agent, VectorEnv& env, const EvaluationOptions& o) {
  NoGradGuard no_grad;
  const bool was_training = agent.is_training();
  agent.eval();
  struct Restore {
    nn::Module& m;
    bool on;
    ~Restore() { m.train(on); }
  } restore{agent, was_training};
  const Space& action_space = env.spec().action;
  Generator gen(o.seed);
  return evaluate_policy(
      [&](const Tensor& obs) {
        PolicyOutput out = agent.evaluate(obs);
        ActionDistribution pi(action_space, out.params, out.log_std);
        return o.deterministic ? pi.mode() : pi.sample(gen).action;
      },
      env, o);
}

EvaluationResult evaluate_policy(const Policy& policy, VectorEnv& env, const EvaluationOptions& o) {
  constexpr const char* op = "evaluate_policy";
  KILN_CHECK(bool(policy), op, "the policy is empty");
  KILN_CHECK(o.episodes > 0, op, "episodes must be positive, got {}", o.episodes);
  KILN_CHECK(o.max_steps > 0, op, "max_steps must be positive, got {}", o.max_steps);
  const int64_t E = env.num_envs();
  NoGradGuard no_grad;

  std::vector<int64_t> target(static_cast<size_t>(E)), done_count(size_t(E), 0), length(size_t(E), 0);
  for (int64_t i = 0; i < E; ++i) target[i] = (o.episodes + i) / E;
  std::vector<double> running(size_t(E), 0.0);
  EvaluationResult r;
  Tensor obs = env.reset(o.seed);
  int64_t remaining = o.episodes;
  for (int64_t step = 0; remaining > 0; ++step) {
    KILN_CHECK(step < o.max_steps, op, "{}: {} of {} episodes still running after {} steps", env.spec().name,
               remaining, o.episodes, o.max_steps);
    Transition t = env.step(policy(obs));
    r.env_steps += E;
    const std::vector<double> reward = t.reward.to_vector<double>();
    const std::vector<bool> done = t.done().to_vector<bool>();
    for (int64_t i = 0; i < E; ++i) {
      running[i] += reward[i];
      length[i] += 1;
      if (!done[i]) continue;
      if (done_count[i] < target[i]) {
        r.returns.push_back(running[i]);
        r.lengths.push_back(length[i]);
        ++done_count[i];
        --remaining;
      }
      running[i] = 0;
      length[i] = 0;
    }
    obs = t.obs;
  }
  const double n = double(r.returns.size());
  for (size_t k = 0; k < r.returns.size(); ++k) {
    r.mean_return += r.returns[k] / n;
    r.mean_length += double(r.lengths[k]) / n;
  }
  for (double x : r.returns) r.std_return += (x - r.mean_return) * (x - r.mean_return) / n;
  r.std_return = std::sqrt(r.std_return);
  return r;
}

}  // namespace kiln::rl
