// PPO (kiln/rl/ppo.h): CleanRL's ppo.py loop on kiln's RolloutStorage.
#include "kiln/rl/ppo.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>

#include "kiln/core/error.h"
#include "kiln/core/grad_mode.h"
#include "kiln/ops/binary.h"
#include "kiln/ops/random.h"
#include "kiln/ops/reduce.h"
#include "kiln/ops/shape.h"
#include "kiln/ops/unary.h"
#include "kiln/optim/clip.h"
#include "kiln/train/compiled_step.h"
#include "kiln/rl/distributions.h"

namespace kiln::rl {

namespace {

constexpr const char* kOp = "PPO";
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// The reset seed of a run resumed at `iteration` (0: the run's own seed).
uint64_t env_seed(uint64_t seed, int64_t iteration) {
  if (iteration == 0) return seed;
  auto b = Generator(seed).block(uint64_t(iteration));
  return uint64_t(b[0]) | (uint64_t(b[1]) << 32);
}

// A contiguous f32/bool view's values, without a copy in the usual case.
template <class T>
const T* host(const Tensor& x, Tensor& keep) {
  keep = x.is_contiguous() && x.dtype() == dtype_v<T> ? x : x.to(dtype_v<T>).contiguous();
  return keep.data<T>();
}

}  // namespace

void PPOOptions::validate() const {
  KILN_CHECK(total_timesteps > 0 && num_steps > 0 && num_minibatches > 0 && update_epochs > 0, kOp,
             "total_timesteps {}, num_steps {}, num_minibatches {} and update_epochs {} must be positive",
             total_timesteps, num_steps, num_minibatches, update_epochs);
  KILN_CHECK(learning_rate > 0 && adam_eps > 0, kOp, "learning_rate {} and adam_eps {} must be positive",
             learning_rate, adam_eps);
  KILN_CHECK(gamma >= 0 && gamma <= 1 && gae_lambda >= 0 && gae_lambda <= 1, kOp,
             "gamma {} and gae_lambda {} must lie in [0, 1]", gamma, gae_lambda);
  KILN_CHECK(clip_coef > 0 && ent_coef >= 0 && vf_coef >= 0 && max_grad_norm > 0 && target_kl >= 0, kOp,
             "needs clip_coef > 0, ent_coef >= 0, vf_coef >= 0, max_grad_norm > 0, target_kl >= 0; got {}, {}, {}, "
             "{}, {}",
             clip_coef, ent_coef, vf_coef, max_grad_norm, target_kl);
}

namespace {

// ppo_loss with approx_kl and clipfrac left as 0-dim tensors (kl, clipfrac):
// a compiled minibatch update reads them after its replay, not inside it.
PPOLoss ppo_loss_tensors(const ActionDistribution& pi, const Tensor& values, const RolloutBatch& b,
                         const PPOOptions& o, Tensor& kl, Tensor& clipfrac) {
  PPOLoss l;
  Tensor logratio = pi.log_prob(b.carriers()) - b.log_probs;
  Tensor ratio = exp(logratio);
  {
    NoGradGuard no_grad;
    kl = mean((ratio - 1.0) - logratio);
    clipfrac = mean(gt(abs(ratio - 1.0), o.clip_coef).to(ratio.dtype()));
  }
  Tensor adv = b.advantages;
  if (o.norm_adv) adv = (adv - mean(adv)) / (kiln::std(adv) + 1e-8);
  l.policy_loss = mean(maximum(neg(adv) * ratio, neg(adv) * clamp(ratio, 1.0 - o.clip_coef, 1.0 + o.clip_coef)));
  if (o.clip_vloss) {
    Tensor unclipped = square(values - b.returns);
    Tensor v_clipped = b.values + clamp(values - b.values, -o.clip_coef, o.clip_coef);
    l.value_loss = 0.5 * mean(maximum(unclipped, square(v_clipped - b.returns)));
  } else {
    l.value_loss = 0.5 * mean(square(values - b.returns));
  }
  l.loss = l.policy_loss + o.vf_coef * l.value_loss;
  if (o.ent_coef > 0) {
    l.entropy = mean(pi.entropy());
    l.loss = l.loss - o.ent_coef * l.entropy;
  }
  return l;
}

}  // namespace

PPOLoss ppo_loss(const ActionDistribution& pi, const Tensor& values, const RolloutBatch& b, const PPOOptions& o) {
  Tensor kl, clipfrac;
  PPOLoss l = ppo_loss_tensors(pi, values, b, o, kl, clipfrac);
  l.approx_kl = kl.item<double>();
  l.clipfrac = clipfrac.item<double>();
  return l;
}

PPO::PPO(VectorEnv& env, ActorCritic& agent, const PPOOptions& options)
    : env_(env),
      agent_(agent),
      options_(options),
      rollout_((options.validate(), options.num_steps), env.num_envs(), env.spec().observation, env.spec().action) {
  const int64_t E = env.num_envs();
  const int64_t batch = options.num_steps * E;
  KILN_CHECK(batch % options.num_minibatches == 0, kOp,
             "num_minibatches {} must divide the rollout's num_steps * num_envs = {} * {} = {}",
             options.num_minibatches, options.num_steps, E, batch);
  num_iterations_ = options.total_timesteps / batch;
  KILN_CHECK(num_iterations_ > 0, kOp, "total_timesteps {} is less than one rollout of {} steps",
             options.total_timesteps, batch);
  optimizer_ = std::make_unique<optim::Adam>(agent.parameters(),
                                             optim::AdamOptions{.lr = options.learning_rate, .eps = options.adam_eps});
  Rngs rngs{{"ppo", options.seed}};
  action_gen_ = rngs.next("ppo");
  minibatch_gen_ = rngs.next("ppo");
  if (options.norm_reward) reward_scaler_ = std::make_unique<RewardScaler>(E, options.gamma);
  reset_env(env_seed(options.seed, 0));
}

PPO::~PPO() = default;

void PPO::reset_env(uint64_t seed) {
  next_obs_ = env_.reset(seed);
  episode_return_.assign(size_t(env_.num_envs()), 0.0);
  episode_length_.assign(size_t(env_.num_envs()), 0);
  if (reward_scaler_) reward_scaler_->reset_returns();
  NoGradGuard no_grad;
  agent_.observe(next_obs_);
}

double PPO::learning_rate_for(int64_t iteration) const {
  if (!options_.anneal_lr) return options_.learning_rate;
  return (1.0 - double(iteration) / double(num_iterations_)) * options_.learning_rate;
}

void PPO::collect() {
  const auto t0 = Clock::now();
  NoGradGuard no_grad;
  const Space& action_space = env_.spec().action;
  const bool box = action_space.kind == SpaceKind::Box;
  const int64_t E = env_.num_envs();
  double return_sum = 0, length_sum = 0;
  int64_t episodes = 0;
  Tensor keep_r, keep_d, keep_t;
  for (int64_t t = 0; t < options_.num_steps; ++t) {
    PolicyOutput out = agent_.evaluate(next_obs_);
    ActionDistribution pi(action_space, out.params, out.log_std);
    ActionDistribution::Sample s = pi.sample(action_gen_);
    rollout_.insert(t, {.obs = next_obs_,
                        .actions = s.action,
                        .raw_actions = box ? s.carrier : Tensor(),
                        .log_probs = pi.log_prob(s.carrier),
                        .values = out.value});
    Transition tr = env_.step(s.action);
    Tensor done = tr.done();
    rollout_.insert_outcome(t, reward_scaler_ ? (*reward_scaler_)(tr.reward, done) : tr.reward, tr.terminated,
                            tr.truncated);
    const float* r = host<float>(tr.reward, keep_r);
    const bool* d = host<bool>(done, keep_d);
    const bool* trunc = host<bool>(tr.truncated, keep_t);
    if (std::any_of(trunc, trunc + E, [](bool b) { return b; }))
      rollout_.insert_final_values(t, agent_.value(tr.final_obs));
    for (int64_t e = 0; e < E; ++e) {
      episode_return_[e] += double(r[e]);
      episode_length_[e] += 1;
      if (!d[e]) continue;
      return_sum += episode_return_[e];
      length_sum += double(episode_length_[e]);
      ++episodes;
      episode_return_[e] = 0;
      episode_length_[e] = 0;
    }
    global_step_ += E;
    next_obs_ = tr.obs;
    agent_.observe(next_obs_);
  }
  rollout_.compute_gae(agent_.value(next_obs_), options_.gamma, options_.gae_lambda);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  pending_.episodes = episodes;
  pending_.mean_return = episodes ? return_sum / double(episodes) : nan;
  pending_.mean_length = episodes ? length_sum / double(episodes) : nan;
  pending_.collect_seconds = seconds_since(t0);
}

PPOStats PPO::update() {
  const auto t0 = Clock::now();
  const PPOOptions& o = options_;
  const Space& action_space = env_.spec().action;
  const int64_t n = rollout_.size(), mb_size = n / o.num_minibatches;
  const nn::ParameterList& params = optimizer_->params();
  double pg_sum = 0, v_sum = 0, ent_sum = 0, kl_sum = 0, clip_sum = 0;
  int64_t updates = 0;
  agent_.train();
  for (int64_t epoch = 0; epoch < o.update_epochs; ++epoch) {
    Tensor order = randperm(n, minibatch_gen_);
    double epoch_kl = 0;
    for (int64_t start = 0; start < n; start += mb_size) {
      RolloutBatch b = rollout_.gather(order.narrow(0, start, mb_size));
      PPOLoss l;
      if (o.compile) {
        // The minibatch update recorded once and replayed (docs/compile.md):
        // the same arithmetic; the diagnostics are read after the replay.
        if (!compiled_)
          compiled_ = std::make_unique<train::CompiledStep>(
              [this, &action_space, &params](const std::vector<Tensor>& in) {
                const PPOOptions& o = options_;
                RolloutBatch mb{.obs = in[0], .actions = in[1], .raw_actions = {}, .log_probs = in[2],
                                .values = in[3], .advantages = in[4], .returns = in[5]};
                PolicyOutput out = agent_.evaluate(mb.obs);
                ActionDistribution pi(action_space, out.params, out.log_std);
                Tensor kl, clipfrac;
                PPOLoss l = ppo_loss_tensors(pi, out.value, mb, o, kl, clipfrac);
                l.loss.backward();
                optim::clip_grad_norm_(params, o.max_grad_norm);
                optimizer_->step();
                optimizer_->zero_grad();
                return std::vector<Tensor>{l.policy_loss, l.value_loss, l.entropy, kl, clipfrac};
              },
              train::CompileOptions{.modules = {&agent_}});
        std::vector<Tensor> r =
            (*compiled_)({b.obs, b.carriers(), b.log_probs, b.values, b.advantages, b.returns});
        l.policy_loss = r[0];
        l.value_loss = r[1];
        l.entropy = r[2];
        l.approx_kl = r[3].item<double>();
        l.clipfrac = r[4].item<double>();
      } else {
        PolicyOutput out = agent_.evaluate(b.obs);
        ActionDistribution pi(action_space, out.params, out.log_std);
        l = ppo_loss(pi, out.value, b, o);
        l.loss.backward();
        optim::clip_grad_norm_(params, o.max_grad_norm);
        optimizer_->step();
        optimizer_->zero_grad();
      }
      pg_sum += l.policy_loss.item<double>();
      v_sum += l.value_loss.item<double>();
      if (l.entropy.defined()) ent_sum += l.entropy.item<double>();
      kl_sum += l.approx_kl;
      clip_sum += l.clipfrac;
      epoch_kl = l.approx_kl;
      ++updates;
    }
    if (o.target_kl > 0 && epoch_kl > o.target_kl) break;
  }

  PPOStats s = pending_;
  s.iteration = iteration_;  // iterate() counts this one
  s.global_step = global_step_;
  s.learning_rate = optimizer_->lr();
  const double u = double(updates);
  s.policy_loss = pg_sum / u;
  s.value_loss = v_sum / u;
  s.entropy = ent_sum / u;
  if (o.ent_coef == 0) {
    NoGradGuard no_grad;  // not in the loss: measured once on the rollout instead
    RolloutBatch all = rollout_.flat();
    PolicyOutput out = agent_.evaluate(all.obs);
    s.entropy = mean(ActionDistribution(action_space, out.params, out.log_std).entropy()).item<double>();
  }
  s.approx_kl = kl_sum / u;
  s.clipfrac = clip_sum / u;
  {
    NoGradGuard no_grad;
    RolloutBatch all = rollout_.flat();
    const double var_y = var(all.returns, /*unbiased=*/false).item<double>();
    const double var_res = var(all.returns - all.values, /*unbiased=*/false).item<double>();
    s.explained_variance = var_y == 0 ? std::numeric_limits<double>::quiet_NaN() : 1.0 - var_res / var_y;
  }
  s.update_seconds = seconds_since(t0);
  return s;
}

PPOStats PPO::iterate() {
  KILN_CHECK(!done(), kOp, "all {} iterations of total_timesteps {} are done", num_iterations_,
             options_.total_timesteps);
  optimizer_->set("lr", learning_rate_for(iteration_));
  collect();
  PPOStats s = update();
  s.iteration = ++iteration_;
  return s;
}

void PPO::learn(const std::function<bool(const PPOStats&)>& on_iteration) {
  while (!done()) {
    PPOStats s = iterate();
    if (on_iteration && !on_iteration(s)) break;
  }
}

// ---- checkpoint state ----

io::State PPO::state() const {
  io::State s{{"iteration", std::to_string(iteration_)},
              {"global_step", std::to_string(global_step_)},
              {"num_envs", std::to_string(env_.num_envs())},
              {"num_steps", std::to_string(options_.num_steps)},
              {"action_gen.seed", std::to_string(action_gen_.seed())},
              {"action_gen.offset", std::to_string(action_gen_.offset())},
              {"minibatch_gen.seed", std::to_string(minibatch_gen_.seed())},
              {"minibatch_gen.offset", std::to_string(minibatch_gen_.offset())}};
  if (reward_scaler_)
    for (const auto& [k, v] : reward_scaler_->state()) s["reward_scaler." + k] = v;
  return s;
}

void PPO::load_state(const io::State& s) {
  const int64_t iteration = io::state_i64(s, "iteration", kOp);
  const int64_t global_step = io::state_i64(s, "global_step", kOp);
  const int64_t envs = io::state_i64(s, "num_envs", kOp), steps = io::state_i64(s, "num_steps", kOp);
  KILN_CHECK(envs == env_.num_envs() && steps == options_.num_steps, kOp,
             "the state is of {} environments x {} steps, this PPO runs {} x {}", envs, steps, env_.num_envs(),
             options_.num_steps);
  KILN_CHECK(iteration >= 0 && iteration <= num_iterations_, kOp,
             "the state is at iteration {}, beyond this run's {} iterations", iteration, num_iterations_);
  const GeneratorState action{io::state_u64(s, "action_gen.seed", kOp), io::state_u64(s, "action_gen.offset", kOp)};
  const GeneratorState minibatch{io::state_u64(s, "minibatch_gen.seed", kOp),
                                 io::state_u64(s, "minibatch_gen.offset", kOp)};
  io::State scaler;
  for (const auto& [k, v] : s)
    if (k.starts_with("reward_scaler.")) scaler[k.substr(14)] = v;
  KILN_CHECK(scaler.empty() != bool(reward_scaler_), kOp, "the state {} reward scaler, this PPO {}",
             scaler.empty() ? "has no" : "has a", reward_scaler_ ? "normalises rewards" : "does not");
  if (reward_scaler_) {
    RewardScaler check = *reward_scaler_;  // validate before changing anything
    check.load_state(scaler);
    *reward_scaler_ = check;
  }
  iteration_ = iteration;
  global_step_ = global_step;
  action_gen_.set_state(action);
  minibatch_gen_.set_state(minibatch);
  restart_episodes();
}

void PPO::restart_episodes() { reset_env(env_seed(options_.seed, iteration_)); }

}  // namespace kiln::rl
