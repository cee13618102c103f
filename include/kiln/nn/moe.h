// Mixture of experts (SPECS G4, docs/moe.md): a drop-in replacement for a
// Transformer MLP, x [..., D] -> [..., D]. A router Linear(D, E) scores each
// token; softmax gives p [N, E]; each token goes to its top-k experts (k
// weights p picked there, optionally renormalised to sum to 1); every expert is
// an MLP (GELU: w2 gelu(w1 x); SwiGLU: w2 (silu(gate x) * up x)); the output is
// the k experts' outputs weighted and summed. Execution is dropless: the N k
// (token, slot) assignments are sorted by expert and each expert runs one
// product over its contiguous run (grouped_linear), with no capacity limit.
// Letters: N tokens (all leading dims), D model width, E experts, F expert
// width, k top-k.
//
//   Rngs rngs(0);
//   nn::MoE moe(128, {.num_experts = 4, .top_k = 2, .expert_hidden = 256}, rngs);
//   Tensor y = moe.forward(x);                  // x [B, T, 128] -> [B, T, 128]
//   Tensor loss = task_loss + moe.aux_loss();   // balancing losses (on the tape; 0 when off)
//   const nn::MoEStats& s = moe.stats();        // routing telemetry of that forward
//   moe.update_bias();                          // aux-loss-free balancing, after the step
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kiln/nn/init.h"
#include "kiln/nn/linear.h"
#include "kiln/nn/module.h"

namespace kiln::nn {

/// The experts' MLP: GELU (exact, erf) or SwiGLU (LLaMA's).
enum class ExpertActivation { gelu, swiglu };

/// How the load is balanced.
///   none: nothing (z-loss may still be on).
///   aux:  Switch Transformer's loss aux_loss_coef * E * sum_e f_e P_e, added to aux_loss().
///   bias: DeepSeek-V3's auxiliary-loss-free balancing: expert_bias is added to p
///         for the top-k selection only (never to the combine weights) and moved
///         by update_bias() outside the tape.
enum class MoEBalance { none, aux, bias };

struct MoEOptions {
  int64_t num_experts = 8;    // E
  int64_t top_k = 2;          // k, 1 <= k <= E
  int64_t expert_hidden = 0;  // F; 0: 4 D (GELU) or 2/3 * 4 D rounded up to 64 (SwiGLU)
  ExpertActivation activation = ExpertActivation::gelu;
  /// Divide the k picked probabilities by their sum (Mixtral); false keeps them
  /// as softmax gave them (Switch, GShard's k = 1).
  bool renormalize = true;
  MoEBalance balance = MoEBalance::none;
  double aux_loss_coef = 0.01;      // alpha, used with balance = aux
  double z_loss_coef = 0.0;         // beta of the router z-loss beta * mean(logsumexp(logits)^2); 0 = off
  double bias_update_rate = 1e-3;   // gamma of update_bias()
};

/// Routing telemetry of the latest forward (stats()). Loads count assignments:
/// f_e = tokens_per_expert[e] / (N k), so f sums to 1.
struct MoEStats {
  int64_t tokens = 0;                      // N of the latest forward
  std::vector<int64_t> tokens_per_expert;  // [E] assignments routed to each expert
  std::vector<double> load;                // [E] f_e
  std::vector<double> mean_prob;           // [E] P_e = mean over tokens of p[:, e]
  double max_violation = 0;                // (max_e count - mean) / mean of this batch
  double running_max_violation = 0;        // its moving average over training forwards (decay 0.9)
  double router_entropy = 0;               // mean over tokens of -sum_e p log p (nats)
  double z_loss = 0;                       // mean(logsumexp(logits)^2), whatever z_loss_coef
  double aux_loss = 0;                     // value of aux_loss() (0 when off)
  /// [E] consecutive training forwards in which each expert got < 1% of the
  /// assignments (the starvation warning fires at 100; callbacks/moe_telemetry.h).
  std::vector<int64_t> starved_steps;
  int64_t forwards = 0;           // forwards seen (training or not)
  int64_t training_forwards = 0;  // of them in training mode (the running values and starvation count only these)
};

class MoE : public Module {
 public:
  /// D = dim. Router weight from init.weight (fan_in D), expert weights from
  /// init.weight with fan_in D (w1) and F (w2). Throws kiln::Error ([MoE] ...)
  /// on bad options (k > E, k <= 0, E <= 0, ...).
  MoE(int64_t dim, const MoEOptions& options, const Init& init);

  /// x [..., D] -> [..., D]. Updates stats() and aux_loss(). NaN or infinite
  /// router scores are a kiln::Error (nothing updated).
  Tensor forward(const Tensor& x) const;

  /// The balancing losses of the latest forward, a scalar on the tape:
  /// aux (balance = aux) + z-loss (z_loss_coef > 0); an untracked 0 when both
  /// are off, so that adding it changes no gradient bit.
  Tensor aux_loss() const;
  const MoEStats& stats() const { return stats_; }
  /// b_e += gamma * sign(mean_load - load_e) from the latest forward's loads
  /// (gamma = options.bias_update_rate unless given). Outside the tape. Any
  /// balance mode may call it; only balance = bias uses the bias.
  void update_bias(double gamma = -1);
  /// Clears the telemetry's running values (running violation, starvation counts).
  void reset_stats();
  /// Restores the telemetry's running values from a saved stats():
  /// running_max_violation, starved_steps ([E]), forwards and
  /// training_forwards (the rest is the latest forward's and is left as it
  /// is). train::MoETelemetry's checkpoint state uses it, so that a resumed
  /// run logs the uninterrupted run's values. Throws ([MoE]) on a wrong
  /// starved_steps size or negative counts; nothing changes then.
  void restore_running_stats(const MoEStats& saved);

  std::string extra_repr() const override;

  int64_t dim;
  int64_t hidden;  // F as built
  MoEOptions options;
  Shared<Linear> router;  // "router": weight [E, D], no bias
  Parameter w1;           // [E, F, D]; SwiGLU: [E, 2F, D], gate rows then up rows
  Parameter w2;           // [E, D, F]
  Tensor expert_bias;     // [E] buffer "expert_bias" (selection only; zeros unless balance = bias moved it)

 private:
  mutable MoEStats stats_;
  mutable Tensor aux_;
};

}  // namespace kiln::nn
