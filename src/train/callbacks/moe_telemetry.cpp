// MoETelemetry: copies the MoE layers' stats into the trainer's logs, moves
// the balancing biases, warns about starved experts.
#include "kiln/train/callbacks/moe_telemetry.h"

#include <fmt/format.h>

#include <algorithm>
#include <ostream>

#include "kiln/core/error.h"
#include "kiln/train/trainer.h"

namespace kiln::train {

MoETelemetry::MoETelemetry(std::vector<nn::MoE*> layers, MoETelemetryOptions options)
    : layers_(std::move(layers)), options_(options) {
  for (const nn::MoE* m : layers_) KILN_CHECK(m != nullptr, "MoETelemetry", "a layer pointer is null");
  KILN_CHECK(options_.starved_steps > 0, "MoETelemetry", "starved_steps must be positive, got {}",
             options_.starved_steps);
}

std::vector<std::string> MoETelemetry::columns() const {
  std::vector<std::string> keys = {"moe/max_violation", "moe/running_max_violation", "moe/entropy", "moe/z_loss",
                                   "moe/aux_loss"};
  for (size_t i = 0; i < layers_.size(); ++i) {
    const int64_t E = layers_[i]->options.num_experts;
    for (const char* what : {"tokens", "f", "P"})
      for (int64_t e = 0; e < E; ++e) keys.push_back(fmt::format("moe/l{}/{}{}", i, what, e));
  }
  return keys;
}

void MoETelemetry::on_step_end(Trainer& trainer, const StepResult& /*step*/) {
  if (layers_.empty()) return;
  auto& logs = trainer.logs();
  double viol = 0, running = 0, entropy = 0, z = 0, aux = 0;
  for (size_t i = 0; i < layers_.size(); ++i) {
    nn::MoE& m = *layers_[i];
    const nn::MoEStats& s = m.stats();
    viol = std::max(viol, s.max_violation);
    running = std::max(running, s.running_max_violation);
    entropy += s.router_entropy;
    z += s.z_loss;
    aux += s.aux_loss;
    for (size_t e = 0; e < s.tokens_per_expert.size(); ++e) {
      logs[fmt::format("moe/l{}/tokens{}", i, e)] = double(s.tokens_per_expert[e]);
      logs[fmt::format("moe/l{}/f{}", i, e)] = s.load[e];
      logs[fmt::format("moe/l{}/P{}", i, e)] = s.mean_prob[e];
      if (s.starved_steps[e] == options_.starved_steps) {
        last_warning_ = fmt::format(
            "warning: [MoE] layer {} expert {} received under 1% of the tokens for {} consecutive steps (router "
            "collapse?); step {}",
            i, e, options_.starved_steps, trainer.progress().global_step);
        trainer.out() << last_warning_ << '\n';
        ++warnings_;
      }
    }
    if (options_.update_bias && m.options.balance == nn::MoEBalance::bias && s.forwards > 0) m.update_bias();
  }
  const double L = double(layers_.size());
  logs["moe/max_violation"] = viol;
  logs["moe/running_max_violation"] = running;
  logs["moe/entropy"] = entropy / L;
  logs["moe/z_loss"] = z / L;
  logs["moe/aux_loss"] = aux;
}

}  // namespace kiln::train
