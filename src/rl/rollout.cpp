// RolloutStorage and GAE (kiln/rl/rollout.h).
#include "kiln/rl/rollout.h"

#include <cstring>
#include <vector>

#include "kiln/core/error.h"
#include "kiln/core/grad_mode.h"
#include "kiln/ops/creation.h"
#include "kiln/ops/index.h"
#include "kiln/ops/shape.h"

namespace kiln::rl {

namespace {

// [lead..., *shape]
Shape with_lead(std::initializer_list<int64_t> lead, const Shape& shape) {
  Shape out(lead);
  for (int64_t d : shape) out.push_back(d);
  return out;
}

// Copies src into row t of dst [T, ...] after checking that src is exactly
// dst[t]'s shape (no broadcasting) of a compatible dtype: a plain memcpy
// when the dtypes match and src is contiguous (the usual case), else copy_.
void write_row(const char* op, const char* what, const Tensor& dst, int64_t t, const Tensor& src) {
  Tensor row = dst.select(0, t);
  const bool dtype_ok = src.defined() && (src.dtype() == dst.dtype() || (is_floating(src.dtype()) && is_floating(dst.dtype())));
  KILN_CHECK(dtype_ok && src.shape() == row.shape(), op, "{} must be {} {}, got {}", what, to_string(row.shape()),
             name(dst.dtype()), describe(src));
  if (src.dtype() == dst.dtype() && src.is_contiguous()) {
    std::memcpy(row.data_ptr(), src.data_ptr(), size_t(src.nbytes()));
    dst.storage()->bump_version();
    return;
  }
  NoGradGuard no_grad;
  copy_(row, src.detach());
}

// [T, E, *rest] -> [T*E, *rest] (a view: the storage is contiguous).
Tensor flat_rows(const Tensor& x) {
  if (!x.defined()) return {};
  Shape out{x.size(0) * x.size(1)};
  for (int64_t i = 2; i < x.dim(); ++i) out.push_back(x.size(i));
  return x.view(out);
}

}  // namespace

RolloutStorage::RolloutStorage(int64_t num_steps, int64_t num_envs, const Space& observation, const Space& action)
    : steps_(num_steps), envs_(num_envs), observation_(observation), action_(action) {
  KILN_CHECK(num_steps > 0 && num_envs > 0, "RolloutStorage", "num_steps {} and num_envs {} must be positive",
             num_steps, num_envs);
  KILN_CHECK(observation.dtype == kF32, "RolloutStorage", "observations must be f32, got {}",
             observation.to_string());
  KILN_CHECK(action.kind == SpaceKind::Discrete || action.kind == SpaceKind::Box, "RolloutStorage",
             "actions must be Discrete or Box, got {}", action.to_string());
  const int64_t T = num_steps, E = num_envs;
  obs_ = zeros(with_lead({T, E}, observation.shape));
  if (action.kind == SpaceKind::Discrete) {
    actions_ = zeros({T, E}, {.dtype = kI64});
  } else {
    actions_ = zeros(with_lead({T, E}, action.shape));
    raw_actions_ = zeros(with_lead({T, E}, action.shape));
  }
  log_probs_ = zeros({T, E});
  values_ = zeros({T, E});
  rewards_ = zeros({T, E});
  terminated_ = zeros({T, E}, {.dtype = kBool});
  truncated_ = zeros({T, E}, {.dtype = kBool});
  final_values_ = zeros({T, E});
  advantages_ = zeros({T, E});
  returns_ = zeros({T, E});
}

void RolloutStorage::check_row(const char* op, int64_t t) const {
  KILN_CHECK(t >= 0 && t < steps_, op, "step {} is outside [0, {})", t, steps_);
}

void RolloutStorage::insert(int64_t t, const StepRecord& s) {
  constexpr const char* op = "RolloutStorage.insert";
  check_row(op, t);
  KILN_CHECK(raw_actions_.defined() == s.raw_actions.defined(), op, "raw_actions are {} for {} actions",
             raw_actions_.defined() ? "required" : "not taken", action_.to_string());
  // Check every argument before writing any, so a bad call changes nothing.
  auto check = [&](const char* what, const Tensor& dst, const Tensor& src) {
    Tensor row = dst.select(0, t);
    KILN_CHECK(src.defined() && src.shape() == row.shape(), op, "{} must be {}, got {}", what,
               to_string(row.shape()), describe(src));
  };
  check("obs", obs_, s.obs);
  check("actions", actions_, s.actions);
  if (s.raw_actions.defined()) check("raw_actions", raw_actions_, s.raw_actions);
  check("log_probs", log_probs_, s.log_probs);
  check("values", values_, s.values);
  write_row(op, "obs", obs_, t, s.obs);
  write_row(op, "actions", actions_, t, s.actions);
  if (s.raw_actions.defined()) write_row(op, "raw_actions", raw_actions_, t, s.raw_actions);
  write_row(op, "log_probs", log_probs_, t, s.log_probs);
  write_row(op, "values", values_, t, s.values);
}

void RolloutStorage::insert_outcome(int64_t t, const Tensor& rewards, const Tensor& terminated,
                                    const Tensor& truncated) {
  constexpr const char* op = "RolloutStorage.insert_outcome";
  check_row(op, t);
  KILN_CHECK(terminated.defined() && terminated.dtype() == kBool && truncated.defined() &&
                 truncated.dtype() == kBool,
             op, "terminated and truncated must be [{}] bool, got {} and {}", envs_, describe(terminated),
             describe(truncated));
  write_row(op, "rewards", rewards_, t, rewards);
  write_row(op, "terminated", terminated_, t, terminated);
  write_row(op, "truncated", truncated_, t, truncated);
}

void RolloutStorage::insert_final_values(int64_t t, const Tensor& values) {
  constexpr const char* op = "RolloutStorage.insert_final_values";
  check_row(op, t);
  write_row(op, "values", final_values_, t, values);
}

void RolloutStorage::compute_gae(const Tensor& last_values, double gamma, double lambda) {
  constexpr const char* op = "RolloutStorage.compute_gae";
  KILN_CHECK(last_values.defined() && last_values.shape() == Shape{envs_} && is_floating(last_values.dtype()), op,
             "last_values must be [{}] floating, got {}", envs_, describe(last_values));
  KILN_CHECK(gamma >= 0 && gamma <= 1 && lambda >= 0 && lambda <= 1, op,
             "gamma {} and lambda {} must lie in [0, 1]", gamma, lambda);
  const std::vector<double> last = last_values.to_vector<double>();
  const int64_t E = envs_;
  const float* r = rewards_.data<float>();
  const float* v = values_.data<float>();
  const float* fv = final_values_.data<float>();
  const bool* term = terminated_.data<bool>();
  const bool* trunc = truncated_.data<bool>();
  float* adv = advantages_.data<float>();
  float* ret = returns_.data<float>();
  // Backwards over t, all E at once; the running adv_{t+1} is kept in f64.
  std::vector<double> next_adv(size_t(E), 0.0);
  for (int64_t t = steps_ - 1; t >= 0; --t) {
    for (int64_t e = 0; e < E; ++e) {
      const int64_t i = t * E + e;
      const bool done = term[i] || trunc[i];
      const double next_value = term[i] ? 0.0 : trunc[i] ? double(fv[i]) : t == steps_ - 1 ? last[e] : double(v[i + E]);
      const double delta = double(r[i]) + gamma * next_value - double(v[i]);
      const double a = delta + (done ? 0.0 : gamma * lambda * next_adv[e]);
      next_adv[e] = a;
      adv[i] = float(a);
      ret[i] = float(a + double(v[i]));
    }
  }
  for (const Tensor* x : {&advantages_, &returns_}) x->storage()->bump_version();
}

RolloutBatch RolloutStorage::flat() const {
  return {flat_rows(obs_),       flat_rows(actions_), flat_rows(raw_actions_), flat_rows(log_probs_),
          flat_rows(values_),    flat_rows(advantages_), flat_rows(returns_)};
}

RolloutBatch RolloutStorage::gather(const Tensor& indices) const {
  KILN_CHECK(indices.defined() && indices.dim() == 1 && indices.dtype() == kI64, "RolloutStorage.gather",
             "indices must be [M] i64, got {}", describe(indices));
  RolloutBatch all = flat();
  auto pick = [&](const Tensor& x) { return x.defined() ? index_select(x, 0, indices) : Tensor(); };
  return {pick(all.obs),    pick(all.actions),    pick(all.raw_actions), pick(all.log_probs),
          pick(all.values), pick(all.advantages), pick(all.returns)};
}

}  // namespace kiln::rl
