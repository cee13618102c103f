// MoETelemetry: copies the MoE layers' stats into the trainer's logs, moves
// the balancing biases, warns about starved experts.
#include "kiln/train/callbacks/moe_telemetry.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <ostream>

#include "kiln/core/error.h"
#include "kiln/io/checkpoint.h"
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

void MoETelemetry::checkpoint_objects(io::Checkpoint& ckpt) {
  // Nothing without layers: a dense model's checkpoints stay as they were.
  if (!layers_.empty()) ckpt.state("moe_telemetry", *this);
}

State MoETelemetry::state() const {
  State st{{"layers", std::to_string(layers_.size())}, {"warnings", std::to_string(warnings_)}};
  for (size_t i = 0; i < layers_.size(); ++i) {
    const nn::MoEStats& s = layers_[i]->stats();
    std::string starved;
    for (size_t e = 0; e < s.starved_steps.size(); ++e) starved += (e ? "," : "") + std::to_string(s.starved_steps[e]);
    st[fmt::format("l{}/running_max_violation", i)] = fmt::format("{}", s.running_max_violation);  // shortest exact
    st[fmt::format("l{}/forwards", i)] = std::to_string(s.forwards);
    st[fmt::format("l{}/training_forwards", i)] = std::to_string(s.training_forwards);
    st[fmt::format("l{}/starved_steps", i)] = starved;
  }
  return st;
}

void MoETelemetry::load_state(const State& st) {
  const char* op = "MoETelemetry.load_state";
  const int64_t n = state_i64(st, "layers", op);
  KILN_CHECK(n == int64_t(layers_.size()), op, "the state is of {} MoE layers, the model has {}", n, layers_.size());
  const int64_t warnings = state_i64(st, "warnings", op);
  KILN_CHECK(warnings >= 0, op, "warnings is {}", warnings);
  std::vector<nn::MoEStats> saved(layers_.size());
  for (size_t i = 0; i < layers_.size(); ++i) {
    nn::MoEStats& s = saved[i];
    s.running_max_violation = state_f64(st, fmt::format("l{}/running_max_violation", i), op);
    s.forwards = state_i64(st, fmt::format("l{}/forwards", i), op);
    s.training_forwards = state_i64(st, fmt::format("l{}/training_forwards", i), op);
    const std::string key = fmt::format("l{}/starved_steps", i);
    auto it = st.find(key);
    KILN_CHECK(it != st.end(), op, "state has no '{}'", key);
    const std::string& text = it->second;
    for (size_t p = 0; p <= text.size() && !text.empty();) {
      size_t q = text.find(',', p);
      if (q == std::string::npos) q = text.size();
      int64_t v = -1;
      auto [end, ec] = std::from_chars(text.data() + p, text.data() + q, v);
      KILN_CHECK(ec == std::errc() && end == text.data() + q, op, "state '{}' is '{}', not comma-separated integers",
                 key, text);
      s.starved_steps.push_back(v);
      p = q + 1;
    }
    const int64_t E = layers_[i]->options.num_experts;
    KILN_CHECK(int64_t(s.starved_steps.size()) == E, op, "state '{}' has {} entries; layer {} has {} experts", key,
               s.starved_steps.size(), i, E);
  }
  // The layers check their values themselves; if one refuses, the layers
  // already restored get their previous values back (nothing changes).
  std::vector<nn::MoEStats> before;
  for (const nn::MoE* m : layers_) before.push_back(m->stats());
  for (size_t i = 0; i < layers_.size(); ++i) {
    try {
      layers_[i]->restore_running_stats(saved[i]);
    } catch (const Error& e) {
      for (size_t j = 0; j < i; ++j) layers_[j]->restore_running_stats(before[j]);
      KILN_FAIL(op, "layer {}: {}", i, e.what());
    }
  }
  warnings_ = warnings;
}

}  // namespace kiln::train
