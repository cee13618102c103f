// MlpActorCritic (kiln/rl/actor_critic.h): CleanRL's classic-control Agent.
#include "kiln/rl/actor_critic.h"

#include <cmath>

#include "kiln/core/error.h"
#include "kiln/ops/creation.h"
#include "kiln/ops/shape.h"

namespace kiln::rl {

namespace {

constexpr const char* kOp = "MlpActorCritic";

// CleanRL's layer_init(layer, std): orthogonal weights of gain `std`, zero bias.
nn::Init layer_init(const nn::Init& base, bool orthogonal, double gain) {
  nn::Init init = base;
  if (orthogonal) {
    init.weight = nn::init::orthogonal(gain);
    init.bias = nn::init::zeros();
  }
  return init;
}

// Linear-Tanh pairs through `hidden`, then (when out > 0) a Linear head whose
// weights have gain head_gain. Returns the width of the last hidden layer.
int64_t append_mlp(nn::Sequential& seq, int64_t in, const std::vector<int64_t>& hidden, int64_t out,
                   double head_gain, const nn::Init& init, bool orthogonal) {
  for (int64_t h : hidden) {
    seq.push_back(nn::Linear(in, h, layer_init(init, orthogonal, std::sqrt(2.0))));
    seq.push_back(nn::Tanh());
    in = h;
  }
  if (out > 0) seq.push_back(nn::Linear(in, out, layer_init(init, orthogonal, head_gain)));
  return in;
}

}  // namespace

MlpActorCritic::MlpActorCritic(const EnvSpec& spec, const nn::Init& init, const MlpActorCriticOptions& options)
    : options_(options) {
  const Space& obs = spec.observation;
  const Space& act = spec.action;
  KILN_CHECK(obs.kind == SpaceKind::Box && obs.shape.size() == 1, kOp,
             "{}: observations must be Box([O]), got {}", spec.name, obs.to_string());
  KILN_CHECK(act.kind == SpaceKind::Discrete || (act.kind == SpaceKind::Box && act.shape.size() == 1), kOp,
             "{}: actions must be Discrete(n) or Box([A]), got {}", spec.name, act.to_string());
  for (int64_t h : options.hidden) KILN_CHECK(h > 0, kOp, "hidden sizes must be positive, got {}", h);
  const bool discrete = act.kind == SpaceKind::Discrete;
  const int64_t in = obs.shape[0];
  const int64_t out = discrete ? act.n : act.shape[0];
  const bool ortho = options.orthogonal_init;
  const char* actor_name = discrete ? "actor" : "actor_mean";

  if (options.normalize_obs) obs_norm_ = register_module("obs_norm", RunningMeanStd(obs.shape));
  if (options.shared_trunk) {
    nn::Sequential trunk;
    const int64_t width = append_mlp(trunk, in, options.hidden, 0, 0, init, ortho);
    trunk_ = register_module("trunk", std::move(trunk));
    nn::Sequential actor, critic;
    append_mlp(actor, width, {}, out, 0.01, init, ortho);
    actor_ = register_module(actor_name, std::move(actor));
    append_mlp(critic, width, {}, 1, 1.0, init, ortho);
    critic_ = register_module("critic", std::move(critic));
  } else {
    // CleanRL registers the critic first; the draw order follows it.
    nn::Sequential critic, actor;
    append_mlp(critic, in, options.hidden, 1, 1.0, init, ortho);
    append_mlp(actor, in, options.hidden, out, 0.01, init, ortho);
    critic_ = register_module("critic", std::move(critic));
    actor_ = register_module(actor_name, std::move(actor));
  }
  if (!discrete)
    log_std_ = register_parameter("actor_logstd", full({out}, options.init_log_std, {.dtype = init.dtype}),
                                  /*decay=*/false);
}

Tensor MlpActorCritic::features(const Tensor& obs) const {
  KILN_CHECK(obs.defined() && obs.dim() == 2, kOp, "observations must be [B, O], got {}", describe(obs));
  return obs_norm_ ? obs_norm_(obs) : obs;
}

PolicyOutput MlpActorCritic::evaluate(const Tensor& obs) const {
  Tensor x = features(obs);
  if (trunk_) x = trunk_(x);
  return {actor_(x), log_std_.value(), squeeze(critic_(x), -1)};
}

Tensor MlpActorCritic::value(const Tensor& obs) const {
  Tensor x = features(obs);
  if (trunk_) x = trunk_(x);
  return squeeze(critic_(x), -1);
}

void MlpActorCritic::observe(const Tensor& obs) {
  if (obs_norm_) obs_norm_->update(obs);
}

}  // namespace kiln::rl
