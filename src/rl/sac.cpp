// SAC (kiln/rl/sac.h): CleanRL's sac_continuous_action.py loop, fixed alpha.
#include "kiln/rl/sac.h"

#include <cmath>
#include <limits>

#include "kiln/core/error.h"
#include "kiln/core/grad_mode.h"
#include "kiln/ops/binary.h"
#include "kiln/ops/index.h"
#include "kiln/ops/loss.h"
#include "kiln/ops/random.h"
#include "kiln/ops/reduce.h"
#include "kiln/ops/shape.h"
#include "kiln/ops/unary.h"
#include "kiln/train/compiled_step.h"
#include "src/rl/offpolicy_util.h"

namespace kiln::rl {

namespace {

constexpr const char* kOp = "SAC";

void check_spec(const EnvSpec& spec, const char* op) {
  KILN_CHECK(spec.observation.kind == SpaceKind::Box && spec.observation.shape.size() == 1, op,
             "{}: observations must be Box([O]), got {}", spec.name, spec.observation.to_string());
  KILN_CHECK(spec.action.kind == SpaceKind::Box && spec.action.shape.size() == 1, op,
             "{}: actions must be Box([A]), got {}", spec.name, spec.action.to_string());
  for (size_t i = 0; i < spec.action.low.size(); ++i)
    KILN_CHECK(std::isfinite(spec.action.low[i]) && std::isfinite(spec.action.high[i]), op,
               "{}: action bounds must be finite, got [{}, {}] in dim {}", spec.name, spec.action.low[i],
               spec.action.high[i], i);
}

}  // namespace

SACActor::SACActor(const EnvSpec& spec, const nn::Init& init, int64_t hidden, double log_std_min, double log_std_max)
    : box_(spec.action), log_std_min_(log_std_min), log_std_max_(log_std_max) {
  check_spec(spec, "SACActor");
  KILN_CHECK(hidden > 0 && log_std_min < log_std_max, "SACActor",
             "needs hidden > 0 and log_std_min < log_std_max; got {}, {}, {}", hidden, log_std_min, log_std_max);
  obs_dim_ = spec.observation.shape[0];
  action_dim_ = spec.action.shape[0];
  fc1_ = register_module("fc1", nn::Linear(obs_dim_, hidden, init));
  fc2_ = register_module("fc2", nn::Linear(hidden, hidden, init));
  fc_mean_ = register_module("fc_mean", nn::Linear(hidden, action_dim_, init));
  fc_logstd_ = register_module("fc_logstd", nn::Linear(hidden, action_dim_, init));
}

Tensor SACActor::forward(const Tensor& obs) const {
  KILN_CHECK(obs.defined() && obs.dim() == 2 && obs.size(1) == obs_dim_, "SACActor",
             "observations must be [B, {}], got {}", obs_dim_, describe(obs));
  Tensor h = relu(fc2_(relu(fc1_(obs))));
  // CleanRL: squash into (min, max) smoothly instead of clamping.
  Tensor log_std = log_std_min_ + 0.5 * (log_std_max_ - log_std_min_) * (tanh(fc_logstd_(h)) + 1.0);
  return cat({fc_mean_(h), log_std}, 1);
}

TanhGaussian SACActor::distribution(const Tensor& obs) const {
  Tensor out = forward(obs);
  return TanhGaussian(out.narrow(1, 0, action_dim_), out.narrow(1, action_dim_, action_dim_), box_);
}

SoftQNetwork::SoftQNetwork(const EnvSpec& spec, const nn::Init& init, int64_t hidden) {
  check_spec(spec, "SoftQNetwork");
  KILN_CHECK(hidden > 0, "SoftQNetwork", "hidden must be positive, got {}", hidden);
  obs_dim_ = spec.observation.shape[0];
  action_dim_ = spec.action.shape[0];
  fc1_ = register_module("fc1", nn::Linear(obs_dim_ + action_dim_, hidden, init));
  fc2_ = register_module("fc2", nn::Linear(hidden, hidden, init));
  fc3_ = register_module("fc3", nn::Linear(hidden, 1, init));
}

Tensor SoftQNetwork::forward(const Tensor& obs, const Tensor& action) const {
  KILN_CHECK(obs.defined() && action.defined() && obs.dim() == 2 && action.dim() == 2 &&
                 obs.size(0) == action.size(0) && obs.size(1) == obs_dim_ && action.size(1) == action_dim_,
             "SoftQNetwork", "needs obs [B, {}] and action [B, {}], got {} and {}", obs_dim_, action_dim_,
             describe(obs), describe(action));
  Tensor x = cat({obs, action}, 1);  // [B, O + A]
  return fc3_(relu(fc2_(relu(fc1_(x))))).squeeze(1);
}

TwinQ::TwinQ(const EnvSpec& spec, const nn::Init& init, int64_t hidden)
    : qf1(register_module("qf1", SoftQNetwork(spec, init, hidden))),
      qf2(register_module("qf2", SoftQNetwork(spec, init, hidden))) {}

void SACOptions::validate() const {
  KILN_CHECK(total_timesteps > 0 && buffer_size > 0 && batch_size > 0 && policy_frequency > 0 &&
                 target_network_frequency > 0 && hidden > 0,
             kOp,
             "total_timesteps {}, buffer_size {}, batch_size {}, policy_frequency {}, target_network_frequency {} "
             "and hidden {} must be positive",
             total_timesteps, buffer_size, batch_size, policy_frequency, target_network_frequency, hidden);
  KILN_CHECK(policy_lr > 0 && q_lr > 0, kOp, "policy_lr {} and q_lr {} must be positive", policy_lr, q_lr);
  KILN_CHECK(gamma >= 0 && gamma <= 1 && tau > 0 && tau <= 1 && alpha >= 0 && learning_starts >= 0, kOp,
             "needs gamma in [0, 1], tau in (0, 1], alpha >= 0, learning_starts >= 0; got {}, {}, {}, {}", gamma, tau,
             alpha, learning_starts);
}

SAC::SAC(VectorEnv& env, const SACOptions& options)
    : env_(env), options_(options), buffer_((options.validate(), options.buffer_size), env.spec()) {
  const EnvSpec& spec = env.spec();
  check_spec(spec, kOp);
  Rngs rngs{{"params", options.seed}};
  nn::Init init(rngs);
  own_actor_ = std::make_unique<SACActor>(spec, init, options.hidden);
  own_critics_ = std::make_unique<TwinQ>(spec, init, options.hidden);
  own_targets_ = std::make_unique<TwinQ>(spec, init, options.hidden);
  setup(*own_actor_, *own_critics_, *own_targets_);
}

SAC::SAC(VectorEnv& env, SACActor& actor, TwinQ& critics, TwinQ& target_critics, const SACOptions& options)
    : env_(env), options_(options), buffer_((options.validate(), options.buffer_size), env.spec()) {
  const EnvSpec& spec = env.spec();
  check_spec(spec, kOp);
  KILN_CHECK(&critics != &target_critics, kOp, "critics and target_critics must be two modules, got one twice");
  KILN_CHECK(actor.action_dim() == spec.action.shape[0], kOp, "the actor has {} action dimensions, {} has {}",
             actor.action_dim(), spec.name, spec.action.shape[0]);
  setup(actor, critics, target_critics);
}

void SAC::setup(SACActor& actor, TwinQ& critics, TwinQ& targets) {
  num_steps_ = options_.total_timesteps / env_.num_envs();
  KILN_CHECK(num_steps_ > 0, kOp, "total_timesteps {} is less than one step of {} environments",
             options_.total_timesteps, env_.num_envs());
  actor_ = &actor;
  critics_ = &critics;
  targets_ = &targets;
  targets_->load_state_dict(critics_->state_dict());
  actor_opt_ = std::make_unique<optim::Adam>(actor_->parameters(), optim::AdamOptions{.lr = options_.policy_lr});
  q_opt_ = std::make_unique<optim::Adam>(critics_->parameters(), optim::AdamOptions{.lr = options_.q_lr});
  // Actions, replay sampling and noise: a stream of their own, the same whoever built the networks.
  Rngs rngs{{"sac", options_.seed}};
  action_gen_ = rngs.next("sac");
  sample_gen_ = rngs.next("sac");
  noise_gen_ = rngs.next("sac");
  reset_env(offpolicy::env_seed(options_.seed, 0));
}

void SAC::restart_episodes() { reset_env(offpolicy::env_seed(options_.seed, step_)); }

SAC::~SAC() = default;

void SAC::reset_env(uint64_t seed) {
  obs_ = env_.reset(seed);
  episode_return_.assign(size_t(env_.num_envs()), 0.0);
  episode_length_.assign(size_t(env_.num_envs()), 0);
}

Tensor SAC::act(const Tensor& obs) {
  NoGradGuard no_grad;
  return actor_->distribution(obs).mode();
}

Policy SAC::deterministic_policy() {
  return [this](const Tensor& obs) { return act(obs); };
}

std::pair<Tensor, Tensor> SAC::sample_action(const Tensor& obs, const Tensor& noise, const char* what) {
  TanhGaussian pi = actor_->distribution(obs);
  Tensor eps = noise.defined() ? noise : randn(pi.mean().shape(), noise_gen_, {.dtype = pi.mean().dtype()});
  KILN_CHECK(eps.sizes() == pi.mean().sizes(), kOp, "{} noise must be [B, A] = {}, got {}", what,
             describe(pi.mean()), describe(eps));
  Tensor raw = pi.mean() + exp(pi.log_std()) * eps.to(pi.mean().dtype());
  return {pi.squash(raw), pi.log_prob(raw)};
}

std::vector<Tensor> SAC::critic_step(const ReplayBatch& b, const Tensor& next_noise) {
  const SACOptions& o = options_;
  Tensor y;
  {
    NoGradGuard no_grad;
    auto [next_action, next_log_pi] = sample_action(b.next_obs, next_noise, "next-action");
    Tensor min_q = minimum(targets_->qf1(b.next_obs, next_action), targets_->qf2(b.next_obs, next_action)) -
                   o.alpha * next_log_pi;
    Tensor not_done = 1.0 - b.terminated.to(min_q.dtype());
    y = b.reward.to(min_q.dtype()) + not_done * o.gamma * min_q;
  }
  Tensor q1 = critics_->qf1(b.obs, b.action), q2 = critics_->qf2(b.obs, b.action);
  Tensor l1 = mse_loss(q1, y), l2 = mse_loss(q2, y);
  q_opt_->zero_grad();
  (l1 + l2).backward();
  q_opt_->step();
  NoGradGuard no_grad;
  return {l1, l2, mean(q1), mean(q2)};
}

std::vector<Tensor> SAC::actor_step(const ReplayBatch& b, const Tensor& noise) {
  auto [action, log_pi] = sample_action(b.obs, noise, "actor");
  Tensor min_q = minimum(critics_->qf1(b.obs, action), critics_->qf2(b.obs, action));
  Tensor loss = mean(options_.alpha * log_pi - min_q);
  actor_opt_->zero_grad();
  loss.backward();  // also reaches the critics' gradients; update_critics zeroes them before its own
  actor_opt_->step();
  NoGradGuard no_grad;
  return {loss, mean(log_pi)};
}

std::vector<Tensor> SAC::run_step(std::unique_ptr<train::CompiledStep>& compiled,
                                  std::vector<Tensor> (SAC::*step)(const ReplayBatch&, const Tensor&),
                                  const ReplayBatch& batch, const Tensor& noise) {
  if (!options_.compile) return (this->*step)(batch, noise);
  // Recorded once and replayed (docs/compile.md): the noise is drawn from
  // noise_gen_ at replay when not given (then an input); the target critics'
  // parameters (update_targets writes them in place), the learning rates and
  // Adam's step counts are read live; the figures are read after the replay.
  // A new batch shape, or the other parameters' gradients held or not (the
  // first actor step), records again.
  if (!compiled)
    compiled = std::make_unique<train::CompiledStep>(
        [this, step](const std::vector<Tensor>& in) {
          return (this->*step)({.obs = in[0], .action = in[1], .reward = in[2], .next_obs = in[3], .terminated = in[4]},
                               in.size() > 5 ? in[5] : Tensor());
        },
        train::CompileOptions{.modules = {actor_, critics_, targets_}, .generators = {&noise_gen_}});
  std::vector<Tensor> in{batch.obs, batch.action, batch.reward, batch.next_obs, batch.terminated};
  if (noise.defined()) in.push_back(noise);
  return (*compiled)(in);
}

SACCriticUpdate SAC::update_critics(const ReplayBatch& b, const Tensor& next_noise) {
  std::vector<Tensor> r = run_step(compiled_critics_, &SAC::critic_step, b, next_noise);
  ++updates_;
  return {r[0].item<double>(), r[1].item<double>(), r[2].item<double>(), r[3].item<double>()};
}

SACActorUpdate SAC::update_actor(const ReplayBatch& b, const Tensor& noise) {
  std::vector<Tensor> r = run_step(compiled_actor_, &SAC::actor_step, b, noise);
  return {r[0].item<double>(), r[1].item<double>()};
}

void SAC::update_targets() { offpolicy::soft_update(*targets_, *critics_, options_.tau); }

void SAC::step() {
  KILN_CHECK(!done(), kOp, "all {} steps of total_timesteps {} are done", num_steps_, options_.total_timesteps);
  const SACOptions& o = options_;
  const Space& box = env_.spec().action;
  const int64_t E = env_.num_envs(), A = box.shape[0];
  Tensor action;
  {
    NoGradGuard no_grad;
    if (global_step() < o.learning_starts) {
      // Uniform in the box, as CleanRL's envs.action_space.sample().
      Tensor low = tensor<double>(box.low, {A}), high = tensor<double>(box.high, {A});
      action = (low + (high - low) * rand({E, A}, action_gen_, {.dtype = kF64})).to(kF32);
    } else {
      TanhGaussian pi = actor_->distribution(obs_);
      action = pi.sample(action_gen_).action;
    }
    // f32 rounding of the squash can land an ulp outside the box.
    action = minimum(maximum(action, tensor<double>(box.low, {A}).to(kF32)), tensor<double>(box.high, {A}).to(kF32));
  }
  Transition t = env_.step(action);
  buffer_.add(obs_, action, t);
  offpolicy::track_episodes(t, episode_return_, episode_length_, return_sum_, length_sum_, window_episodes_);
  obs_ = t.obs;
  ++step_;

  if (global_step() > o.learning_starts) {
    ReplayBatch b = buffer_.sample(o.batch_size, sample_gen_);
    SACCriticUpdate c = update_critics(b);
    qf_sum_ += c.qf1_loss + c.qf2_loss;
    q1_sum_ += c.qf1_value;
    ++window_critic_;
    if (step_ % o.policy_frequency == 0) {
      // TD3's delayed update, compensated: policy_frequency actor steps at once.
      for (int64_t k = 0; k < o.policy_frequency; ++k) {
        SACActorUpdate a = update_actor(b);
        actor_sum_ += a.actor_loss;
        logpi_sum_ += a.log_pi;
        ++window_actor_;
      }
    }
    if (step_ % o.target_network_frequency == 0) update_targets();
  }
}

SACStats SAC::take_window() {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  SACStats s;
  s.step = step_;
  s.global_step = global_step();
  s.updates = updates_;
  s.qf_loss = window_critic_ ? qf_sum_ / double(window_critic_) : nan;
  s.qf1_value = window_critic_ ? q1_sum_ / double(window_critic_) : nan;
  s.actor_loss = window_actor_ ? actor_sum_ / double(window_actor_) : nan;
  s.entropy = window_actor_ ? -logpi_sum_ / double(window_actor_) : nan;
  s.episodes = window_episodes_;
  s.mean_return = window_episodes_ ? return_sum_ / double(window_episodes_) : nan;
  s.mean_length = window_episodes_ ? length_sum_ / double(window_episodes_) : nan;
  qf_sum_ = q1_sum_ = actor_sum_ = logpi_sum_ = return_sum_ = length_sum_ = 0;
  window_critic_ = window_actor_ = window_episodes_ = 0;
  return s;
}

void SAC::learn(const std::function<bool(const SACStats&)>& on_stats, int64_t stats_every) {
  offpolicy::learn_windows(
      kOp, stats_every, [this] { take_window(); }, [this] { return done(); }, [this] { step(); return step_; },
      [&](double seconds) {
        SACStats s = take_window();
        s.seconds = seconds;
        return !on_stats || on_stats(s);
      });
}

// ---- checkpoint state ----

void SAC::checkpoint(io::Checkpoint& ckpt, const std::string& name) {
  ckpt.model(*actor_, name + ".actor").model(*critics_, name + ".critics").model(*targets_, name + ".targets");
  ckpt.optimizer(*actor_opt_, name + ".actor_optim").optimizer(*q_opt_, name + ".q_optim");
  buffer_.checkpoint(ckpt, name + ".replay");
  ckpt.state(name, *this);
}

io::State SAC::state() const {
  return offpolicy::run_state(step_, updates_, env_.num_envs(),
                              {{"action_gen", &action_gen_}, {"sample_gen", &sample_gen_}, {"noise_gen", &noise_gen_}});
}

void SAC::load_state(const io::State& s) {
  const offpolicy::RunCounters c =
      offpolicy::load_run_state(s, kOp, "SAC", env_.num_envs(), num_steps_,
                                {{"action_gen", &action_gen_}, {"sample_gen", &sample_gen_}, {"noise_gen", &noise_gen_}});
  step_ = c.step;
  updates_ = c.updates;
  take_window();
  reset_env(offpolicy::env_seed(options_.seed, step_));
}

}  // namespace kiln::rl
