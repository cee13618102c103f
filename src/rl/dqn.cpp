// DQN (kiln/rl/dqn.h): CleanRL's dqn.py loop on kiln's ReplayBuffer.
#include "kiln/rl/dqn.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <tuple>

#include "kiln/core/error.h"
#include "kiln/core/grad_mode.h"
#include "kiln/nn/activation.h"
#include "kiln/nn/linear.h"
#include "kiln/ops/binary.h"
#include "kiln/ops/index.h"
#include "kiln/ops/loss.h"
#include "kiln/ops/random.h"
#include "kiln/ops/reduce.h"
#include "kiln/ops/shape.h"
#include "kiln/optim/clip.h"
#include "kiln/train/compiled_step.h"
#include "src/rl/offpolicy_util.h"

namespace kiln::rl {

namespace {

constexpr const char* kOp = "DQN";

}  // namespace

QNetwork::QNetwork(const EnvSpec& spec, const nn::Init& init, const std::vector<int64_t>& hidden) {
  KILN_CHECK(spec.observation.kind == SpaceKind::Box && spec.observation.shape.size() == 1, "QNetwork",
             "{}: observations must be Box([O]), got {}", spec.name, spec.observation.to_string());
  KILN_CHECK(spec.action.kind == SpaceKind::Discrete, "QNetwork", "{}: actions must be Discrete(n), got {}",
             spec.name, spec.action.to_string());
  for (int64_t h : hidden) KILN_CHECK(h > 0, "QNetwork", "hidden sizes must be positive, got {}", h);
  obs_dim_ = spec.observation.shape[0];
  num_actions_ = spec.action.n;
  nn::Sequential seq;
  int64_t in = obs_dim_;
  for (int64_t h : hidden) {
    seq.push_back(nn::Linear(in, h, init));
    seq.push_back(nn::ReLU());
    in = h;
  }
  seq.push_back(nn::Linear(in, num_actions_, init));
  network_ = register_module("network", std::move(seq));
}

Tensor QNetwork::forward(const Tensor& obs) const {
  KILN_CHECK(obs.defined() && obs.dim() == 2 && obs.size(1) == obs_dim_, "QNetwork",
             "observations must be [B, {}], got {}", obs_dim_, describe(obs));
  return network_(obs);
}

void DQNOptions::validate() const {
  KILN_CHECK(total_timesteps > 0 && buffer_size > 0 && batch_size > 0 && train_frequency > 0 &&
                 target_network_frequency > 0,
             kOp,
             "total_timesteps {}, buffer_size {}, batch_size {}, train_frequency {} and target_network_frequency {} "
             "must be positive",
             total_timesteps, buffer_size, batch_size, train_frequency, target_network_frequency);
  KILN_CHECK(learning_rate > 0 && adam_eps > 0, kOp, "learning_rate {} and adam_eps {} must be positive",
             learning_rate, adam_eps);
  KILN_CHECK(gamma >= 0 && gamma <= 1 && tau > 0 && tau <= 1, kOp, "needs gamma in [0, 1] and tau in (0, 1]; got {}, {}",
             gamma, tau);
  KILN_CHECK(start_e >= 0 && start_e <= 1 && end_e >= 0 && end_e <= 1 && exploration_fraction >= 0, kOp,
             "needs start_e and end_e in [0, 1] and exploration_fraction >= 0; got {}, {}, {}", start_e, end_e,
             exploration_fraction);
  KILN_CHECK(learning_starts >= 0 && max_grad_norm >= 0, kOp, "learning_starts {} and max_grad_norm {} must be >= 0",
             learning_starts, max_grad_norm);
}

double linear_schedule(double start, double end, double duration, double t) {
  if (duration <= 0) return end;
  const double v = start + (end - start) / duration * t;  // CleanRL: slope * t + start, clipped at end
  return start >= end ? std::max(v, end) : std::min(v, end);
}

std::pair<Tensor, Tensor> dqn_loss(const Tensor& q, const Tensor& next_q, const Tensor& next_online_q,
                                   const ReplayBatch& b, const DQNOptions& o) {
  const int64_t B = b.reward.size(0);
  KILN_CHECK(q.dim() == 2 && q.size(0) == B && next_q.sizes() == q.sizes() &&
                 (!o.double_q || (next_online_q.defined() && next_online_q.sizes() == q.sizes())),
             "dqn_loss", "q {}, next_q {} and (double_q) next_online_q {} must be [B = {}, n] alike", describe(q),
             describe(next_q), describe(next_online_q), B);
  Tensor target;
  {
    NoGradGuard no_grad;
    Tensor next_value = o.double_q ? gather(next_q, 1, argmax(next_online_q, 1, true)).squeeze(1)
                                   : std::get<0>(max(next_q, 1));
    Tensor not_done = 1.0 - b.terminated.to(next_value.dtype());
    target = b.reward.to(next_value.dtype()) + o.gamma * next_value * not_done;
  }
  Tensor q_taken = gather(q, 1, b.action.to(kI64).unsqueeze(1)).squeeze(1);
  Tensor loss = o.huber ? smooth_l1_loss(q_taken, target) : mse_loss(q_taken, target);
  return {loss, q_taken};
}

DQN::DQN(VectorEnv& env, const DQNOptions& options)
    : env_(env), options_(options), buffer_((options.validate(), options.buffer_size), env.spec()) {
  const EnvSpec& spec = env.spec();
  KILN_CHECK(spec.action.kind == SpaceKind::Discrete, kOp, "{}: DQN needs Discrete(n) actions, got {}", spec.name,
             spec.action.to_string());
  Rngs rngs{{"params", options.seed}};
  own_q_ = std::make_unique<QNetwork>(spec, nn::Init(rngs), options.hidden);
  own_target_ = std::make_unique<QNetwork>(spec, nn::Init(rngs), options.hidden);
  setup(*own_q_, *own_target_);
}

DQN::DQN(VectorEnv& env, QNetwork& q_network, QNetwork& target_network, const DQNOptions& options)
    : env_(env), options_(options), buffer_((options.validate(), options.buffer_size), env.spec()) {
  const EnvSpec& spec = env.spec();
  KILN_CHECK(spec.action.kind == SpaceKind::Discrete, kOp, "{}: DQN needs Discrete(n) actions, got {}", spec.name,
             spec.action.to_string());
  KILN_CHECK(&q_network != &target_network, kOp, "q_network and target_network must be two networks, got one twice");
  KILN_CHECK(q_network.num_actions() == spec.action.n, kOp, "q_network has {} actions, {} has {}",
             q_network.num_actions(), spec.name, spec.action.n);
  setup(q_network, target_network);
}

void DQN::setup(QNetwork& q, QNetwork& target) {
  num_steps_ = options_.total_timesteps / env_.num_envs();
  KILN_CHECK(num_steps_ > 0, kOp, "total_timesteps {} is less than one step of {} environments",
             options_.total_timesteps, env_.num_envs());
  q_ = &q;
  target_ = &target;
  target_->load_state_dict(q_->state_dict());
  optimizer_ = std::make_unique<optim::Adam>(q_->parameters(),
                                             optim::AdamOptions{.lr = options_.learning_rate, .eps = options_.adam_eps});
  // Exploration and replay sampling: a stream of their own, the same whoever built the networks.
  Rngs rngs{{"dqn", options_.seed}};
  explore_gen_ = rngs.next("dqn");
  sample_gen_ = rngs.next("dqn");
  reset_env(offpolicy::env_seed(options_.seed, 0));
}

DQN::~DQN() = default;

void DQN::reset_env(uint64_t seed) {
  obs_ = env_.reset(seed);
  episode_return_.assign(size_t(env_.num_envs()), 0.0);
  episode_length_.assign(size_t(env_.num_envs()), 0);
}

double DQN::epsilon(int64_t global_step) const {
  const DQNOptions& o = options_;
  return linear_schedule(o.start_e, o.end_e, o.exploration_fraction * double(o.total_timesteps), double(global_step));
}

Tensor DQN::act(const Tensor& obs) {
  NoGradGuard no_grad;
  return argmax(q_->forward(obs), 1);
}

Policy DQN::greedy_policy() {
  return [this](const Tensor& obs) { return act(obs); };
}

void DQN::restart_episodes() { reset_env(offpolicy::env_seed(options_.seed, step_)); }

void DQN::step() {
  KILN_CHECK(!done(), kOp, "all {} steps of total_timesteps {} are done", num_steps_, options_.total_timesteps);
  const int64_t E = env_.num_envs();
  const DQNOptions& o = options_;
  Tensor action;
  {
    // Per environment: a uniform coin against epsilon, a uniform random action
    // (both drawn every step, so the stream's use does not depend on the coins).
    NoGradGuard no_grad;
    Tensor coin = rand({E}, explore_gen_, {.dtype = kF64});
    Tensor random = randint(0, env_.spec().action.n, {E}, explore_gen_);
    action = where(lt(coin, epsilon(global_step())), random, act(obs_));
  }
  Transition t = env_.step(action);
  buffer_.add(obs_, action, t);
  offpolicy::track_episodes(t, episode_return_, episode_length_, return_sum_, length_sum_, window_episodes_);
  obs_ = t.obs;
  ++step_;

  if (global_step() > o.learning_starts) {
    if (step_ % o.train_frequency == 0) {
      DQNUpdate u = update(buffer_.sample(o.batch_size, sample_gen_));
      loss_sum_ += u.td_loss;
      q_sum_ += u.q_value;
      ++window_updates_;
    }
    if (step_ % o.target_network_frequency == 0) update_target();
  }
}

std::pair<Tensor, Tensor> DQN::gradient_step(const ReplayBatch& batch) {
  Tensor next_q, next_online_q;
  {
    NoGradGuard no_grad;
    next_q = target_->forward(batch.next_obs);
    if (options_.double_q) next_online_q = q_->forward(batch.next_obs);
  }
  auto [loss, q_taken] = dqn_loss(q_->forward(batch.obs), next_q, next_online_q, batch, options_);
  optimizer_->zero_grad();
  loss.backward();
  if (options_.max_grad_norm > 0) optim::clip_grad_norm_(optimizer_->params(), options_.max_grad_norm);
  optimizer_->step();
  NoGradGuard no_grad;
  return {loss, mean(q_taken)};
}

DQNUpdate DQN::update(const ReplayBatch& batch) {
  Tensor loss, q_value;
  if (options_.compile) {
    // The gradient step recorded once and replayed (docs/compile.md): the
    // target network's parameters are read live (update_target writes them
    // in place), Adam's lr and step count too; the figures are read after
    // the replay. A new batch shape records again.
    if (!compiled_)
      compiled_ = std::make_unique<train::CompiledStep>(
          [this](const std::vector<Tensor>& in) {
            auto [l, q] = gradient_step({.obs = in[0], .action = in[1], .reward = in[2], .next_obs = in[3],
                                         .terminated = in[4]});
            return std::vector<Tensor>{l, q};
          },
          train::CompileOptions{.modules = {q_, target_}});
    std::vector<Tensor> r = (*compiled_)({batch.obs, batch.action, batch.reward, batch.next_obs, batch.terminated});
    loss = r[0];
    q_value = r[1];
  } else {
    std::tie(loss, q_value) = gradient_step(batch);
  }
  ++updates_;
  return {loss.item<double>(), q_value.item<double>()};
}

void DQN::update_target() { offpolicy::soft_update(*target_, *q_, options_.tau); }

DQNStats DQN::take_window() {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  DQNStats s;
  s.step = step_;
  s.global_step = global_step();
  s.epsilon = epsilon(std::max<int64_t>(step_ - 1, 0) * env_.num_envs());  // what the last step used
  s.updates = updates_;
  s.td_loss = window_updates_ ? loss_sum_ / double(window_updates_) : nan;
  s.q_value = window_updates_ ? q_sum_ / double(window_updates_) : nan;
  s.episodes = window_episodes_;
  s.mean_return = window_episodes_ ? return_sum_ / double(window_episodes_) : nan;
  s.mean_length = window_episodes_ ? length_sum_ / double(window_episodes_) : nan;
  loss_sum_ = q_sum_ = return_sum_ = length_sum_ = 0;
  window_updates_ = window_episodes_ = 0;
  return s;
}

void DQN::learn(const std::function<bool(const DQNStats&)>& on_stats, int64_t stats_every) {
  offpolicy::learn_windows(
      kOp, stats_every, [this] { take_window(); }, [this] { return done(); }, [this] { step(); return step_; },
      [&](double seconds) {
        DQNStats s = take_window();
        s.seconds = seconds;
        return !on_stats || on_stats(s);
      });
}

// ---- checkpoint state ----

void DQN::checkpoint(io::Checkpoint& ckpt, const std::string& name) {
  ckpt.model(*q_, name + ".q").model(*target_, name + ".target").optimizer(*optimizer_, name + ".optim");
  buffer_.checkpoint(ckpt, name + ".replay");
  ckpt.state(name, *this);
}

io::State DQN::state() const {
  return offpolicy::run_state(step_, updates_, env_.num_envs(),
                              {{"explore_gen", &explore_gen_}, {"sample_gen", &sample_gen_}});
}

void DQN::load_state(const io::State& s) {
  const offpolicy::RunCounters c = offpolicy::load_run_state(
      s, kOp, "DQN", env_.num_envs(), num_steps_, {{"explore_gen", &explore_gen_}, {"sample_gen", &sample_gen_}});
  step_ = c.step;
  updates_ = c.updates;
  take_window();
  reset_env(offpolicy::env_seed(options_.seed, step_));
}

}  // namespace kiln::rl
