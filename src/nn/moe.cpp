// nn::MoE: routing, dropless grouped execution, balancing losses, the
// auxiliary-loss-free bias and the routing telemetry (docs/moe.md).
#include "kiln/nn/moe.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "kiln/core/error.h"
#include "kiln/core/grad_mode.h"
#include "kiln/ops/binary.h"
#include "kiln/ops/creation.h"
#include "kiln/ops/index.h"
#include "kiln/ops/moe.h"
#include "kiln/ops/moe_combine.h"
#include "kiln/ops/reduce.h"
#include "kiln/ops/shape.h"
#include "kiln/ops/unary.h"

namespace kiln::nn {

namespace {

constexpr const char* kMoE = "MoE";

int64_t default_hidden(int64_t D, ExpertActivation a) {
  if (a == ExpertActivation::swiglu) return (8 * D / 3 + 63) / 64 * 64;  // LLaMA: 2/3 * 4 D, multiple of 64
  return 4 * D;
}

const char* activation_name(ExpertActivation a) { return a == ExpertActivation::swiglu ? "swiglu" : "gelu"; }
const char* balance_name(MoEBalance b) {
  return b == MoEBalance::aux ? "aux" : b == MoEBalance::bias ? "bias" : "none";
}

}  // namespace

MoE::MoE(int64_t D, const MoEOptions& o, const Init& init)
    : dim(D), hidden(o.expert_hidden > 0 ? o.expert_hidden : default_hidden(D, o.activation)), options(o) {
  const int64_t E = o.num_experts;
  KILN_CHECK(D > 0, kMoE, "dim must be positive, got {}", D);
  KILN_CHECK(E > 0, kMoE, "num_experts must be positive, got {}", E);
  KILN_CHECK(o.top_k > 0 && o.top_k <= E, kMoE, "top_k {} must be in [1, num_experts = {}]", o.top_k, E);
  KILN_CHECK(o.expert_hidden >= 0, kMoE, "expert_hidden must be positive (or 0 for the default), got {}",
             o.expert_hidden);
  KILN_CHECK(o.aux_loss_coef >= 0 && std::isfinite(o.aux_loss_coef), kMoE,
             "aux_loss_coef must be finite and >= 0, got {}", o.aux_loss_coef);
  KILN_CHECK(o.z_loss_coef >= 0 && std::isfinite(o.z_loss_coef), kMoE, "z_loss_coef must be finite and >= 0, got {}",
             o.z_loss_coef);
  KILN_CHECK(o.bias_update_rate >= 0 && std::isfinite(o.bias_update_rate), kMoE,
             "bias_update_rate must be finite and >= 0, got {}", o.bias_update_rate);
  router = register_module("router", Linear(D, E, init, /*bias=*/false));
  const int64_t up = o.activation == ExpertActivation::swiglu ? 2 * hidden : hidden;
  w1 = register_parameter("w1", init.make_weight({E, up, D}, Fan{D, up}));
  w2 = register_parameter("w2", init.make_weight({E, D, hidden}, Fan{hidden, D}));
  expert_bias = register_buffer("expert_bias", zeros({E}, {.dtype = init.dtype, .device = init.device}));
  reset_stats();
}

void MoE::reset_stats() {
  const auto E = size_t(options.num_experts);
  stats_ = MoEStats{};
  stats_.tokens_per_expert.assign(E, 0);
  stats_.load.assign(E, 0.0);
  stats_.mean_prob.assign(E, 0.0);
  stats_.starved_steps.assign(E, 0);
}

void MoE::restore_running_stats(const MoEStats& saved) {
  const int64_t E = options.num_experts;
  KILN_CHECK(int64_t(saved.starved_steps.size()) == E, kMoE, "restore_running_stats: starved_steps has {} entries, not E = {}",
             saved.starved_steps.size(), E);
  KILN_CHECK(saved.forwards >= 0 && saved.training_forwards >= 0 && saved.training_forwards <= saved.forwards, kMoE,
             "restore_running_stats: inconsistent counts (forwards {}, training_forwards {})", saved.forwards,
             saved.training_forwards);
  for (int64_t c : saved.starved_steps)
    KILN_CHECK(c >= 0 && c <= saved.training_forwards, kMoE,
               "restore_running_stats: a starvation count {} outside [0, training_forwards = {}]", c,
               saved.training_forwards);
  KILN_CHECK(std::isfinite(saved.running_max_violation) && saved.running_max_violation >= 0, kMoE,
             "restore_running_stats: running_max_violation must be finite and >= 0, got {}",
             saved.running_max_violation);
  stats_.running_max_violation = saved.running_max_violation;
  stats_.starved_steps = saved.starved_steps;
  stats_.forwards = saved.forwards;
  stats_.training_forwards = saved.training_forwards;
}

Tensor MoE::forward(const Tensor& x_in) const {
  KILN_CHECK(x_in.defined() && x_in.dim() >= 1 && x_in.size(-1) == dim, kMoE, "x {} must be [..., D = {}]",
             x_in.defined() ? to_string(x_in.shape()) : "undefined", dim);
  const Tensor x = to_compute(x_in);
  const Tensor W1 = to_compute(w1), W2 = to_compute(w2);
  KILN_CHECK(x.dtype() == W1.dtype(), kMoE, "x {} is {}; the layer computes in {}", to_string(x.shape()),
             name(x.dtype()), name(W1.dtype()));
  const int64_t E = options.num_experts, k = options.top_k, N = x.numel() / dim, M = N * k, F = hidden;
  KILN_CHECK(N > 0, kMoE, "x {} has no tokens", to_string(x.shape()));

  const Tensor x2 = reshape(x, {N, dim});
  const Tensor logits = router->forward(x2);  // [N, E]
  const std::vector<double> lv = logits.detach().to_vector<double>();
  for (int64_t i = 0; i < N * E; ++i) {
    KILN_CHECK(std::isfinite(lv[size_t(i)]), kMoE,
               "router score (logit) of token {} for expert {} is {}: the input or the router weights hold NaN or "
               "inf; nothing was updated",
               i / E, i % E, lv[size_t(i)]);
  }
  const Tensor probs = softmax(logits, -1);  // p [N, E]

  // Selection: top-k of p (+ the balancing bias, which never reaches the weights).
  Tensor idx;  // [N, k] i64
  {
    NoGradGuard no_grad;
    Tensor sel = probs.detach();
    if (options.balance == MoEBalance::bias) sel = add(sel, expert_bias);
    idx = topk(sel, k, -1).second;
  }
  Tensor w = gather(probs, 1, idx);  // [N, k] combine weights, on the tape
  if (options.renormalize) w = div(w, sum(w, {-1}, /*keepdim=*/true));

  // Dropless grouping: assignment a = n k + j goes to expert idx[n, j]; sorted
  // by expert, run e is contiguous and every assignment is kept.
  // The gather of each assignment's token and the scatter back to (token,
  // slot) order are fused into the grouped products: no permuted copies.
  const MoEGroups groups = moe_group(reshape(idx, {M}), E);
  Tensor token = Tensor::empty({M}, kI64);  // token of the assignment at each sorted position
  {
    const int64_t* ord = groups.order.data<int64_t>();
    int64_t* tok = token.data<int64_t>();
    for (int64_t p = 0; p < M; ++p) tok[p] = ord[p] / k;
  }
  Tensor h;  // [M, F] sorted by expert: the experts' hidden activations
  if (options.activation == ExpertActivation::swiglu) {
    std::vector<Tensor> gu = split(grouped_linear(x2, W1, groups.counts, token, Tensor()), F, -1);  // [M, 2F]
    h = mul(silu(gu[0]), gu[1]);
  } else {
    h = grouped_linear_gelu(x2, W1, groups.counts, token, Tensor());  // the GELU in the product's epilogue
  }
  const Tensor y = grouped_linear(h, W2, groups.counts, Tensor(), groups.order);  // [M, D] in (token, slot) order
  Tensor out = moe_combine(y, w);  // [N, D]: sum_j w_nj y[n k + j]

  // Balancing losses (on the tape) and the z-loss value (telemetry).
  const Tensor lse2 = square(logsumexp(logits, {-1}));  // [N]
  Tensor aux;
  if (options.balance == MoEBalance::aux && options.aux_loss_coef > 0) {
    // alpha E sum_e f_e P_e with f_e = count_e / (N k): f is a constant, P = mean p.
    std::vector<double> c(groups.counts.begin(), groups.counts.end());
    const Tensor counts = tensor<double>(c).to(probs.dtype());
    aux = mul(sum(mul(mean(probs, {0}), counts)), options.aux_loss_coef * double(E) / double(M));
  }
  if (options.z_loss_coef > 0) {
    const Tensor z = mul(mean(lse2), options.z_loss_coef);
    aux = aux.defined() ? add(aux, z) : z;
  }

  // Telemetry (after everything that can throw: a failed forward updates nothing).
  {
    NoGradGuard no_grad;
    MoEStats& s = stats_;
    const std::vector<double> pv = probs.detach().to_vector<double>();
    s.tokens = N;
    s.tokens_per_expert = groups.counts;
    s.mean_prob.assign(size_t(E), 0.0);
    double ent = 0;
    for (int64_t n = 0; n < N; ++n) {
      for (int64_t e = 0; e < E; ++e) {
        const double p = pv[size_t(n * E + e)];
        s.mean_prob[size_t(e)] += p;
        if (p > 0) ent -= p * std::log(p);
      }
    }
    for (double& p : s.mean_prob) p /= double(N);
    s.router_entropy = ent / double(N);
    const double mean_count = double(M) / double(E);
    int64_t max_count = 0;
    s.load.assign(size_t(E), 0.0);
    for (int64_t e = 0; e < E; ++e) {
      s.load[size_t(e)] = double(groups.counts[size_t(e)]) / double(M);
      max_count = std::max(max_count, groups.counts[size_t(e)]);
    }
    s.max_violation = (double(max_count) - mean_count) / mean_count;
    s.z_loss = mean(lse2.detach()).item<double>();
    s.aux_loss = aux.defined() ? aux.detach().item<double>() : 0.0;
    if (s.starved_steps.size() != size_t(E)) s.starved_steps.assign(size_t(E), 0);
    if (is_training()) {
      s.running_max_violation = s.training_forwards == 0 ? s.max_violation
                                                         : 0.9 * s.running_max_violation + 0.1 * s.max_violation;
      ++s.training_forwards;
      for (int64_t e = 0; e < E; ++e) {
        auto& st = s.starved_steps[size_t(e)];
        st = s.load[size_t(e)] < 0.01 ? st + 1 : 0;
      }
    }
    ++s.forwards;
  }
  aux_ = aux;
  return reshape(out, x.shape());
}

Tensor MoE::aux_loss() const {
  if (aux_.defined()) return aux_;
  return zeros({}, {.dtype = w1.dtype(), .device = w1.value().device()});
}

void MoE::update_bias(double gamma) {
  if (gamma < 0) gamma = options.bias_update_rate;
  KILN_CHECK(std::isfinite(gamma), kMoE, "update_bias: gamma must be finite, got {}", gamma);
  KILN_CHECK(stats_.forwards > 0, kMoE, "update_bias needs the loads of a forward; none ran yet");
  const int64_t E = options.num_experts;
  double total = 0;
  for (int64_t c : stats_.tokens_per_expert) total += double(c);
  const double mean_load = total / double(E);
  std::vector<double> delta(static_cast<size_t>(E));
  for (int64_t e = 0; e < E; ++e) {
    const double d = mean_load - double(stats_.tokens_per_expert[size_t(e)]);
    delta[size_t(e)] = d > 0 ? gamma : d < 0 ? -gamma : 0.0;
  }
  NoGradGuard no_grad;
  add_(expert_bias, tensor<double>(delta).to(expert_bias.dtype()));
}

std::string MoE::extra_repr() const {
  std::string s = fmt::format("dim={}, num_experts={}, top_k={}, expert_hidden={}, activation={}, renormalize={}",
                              dim, options.num_experts, options.top_k, hidden, activation_name(options.activation),
                              options.renormalize);
  if (options.balance != MoEBalance::none) s += fmt::format(", balance={}", balance_name(options.balance));
  if (options.balance == MoEBalance::aux) s += fmt::format(", aux_loss_coef={}", options.aux_loss_coef);
  if (options.z_loss_coef > 0) s += fmt::format(", z_loss_coef={}", options.z_loss_coef);
  return s;
}

}  // namespace kiln::nn
