// MoETelemetry: the routing telemetry of mixture-of-experts layers (nn::MoE,
// docs/moe.md) in Trainer::logs() after every step, the auxiliary-loss-free
// bias update, and a warning in the training log when an expert starves.
//
//   auto moe = std::make_shared<train::MoETelemetry>(gpt.moe_layers());
//   // Register it before the CsvLogger (and before any Validation, whose eval
//   // forwards replace the layers' stats) and give the logger its columns:
//   train::CsvLoggerOptions{.log_keys = moe->columns()}
//
// Keys (the CSV column set): moe/max_violation (the largest over the layers
// of (max count - mean) / mean in this step's batch), moe/running_max_violation
// (likewise of the layers' running values), moe/entropy (router entropy in
// nats, mean over the layers), moe/z_loss (mean of the layers'
// mean(logsumexp^2)), moe/aux_loss (sum of the layers' balancing losses), and
// per layer i and expert e: moe/l<i>/tokens<e> (assignments), moe/l<i>/f<e>
// (load fraction), moe/l<i>/P<e> (mean router probability).
//
// Checkpoints (state "moe_telemetry"): the layers' running values (running
// violation, starvation counts, forward counts) and the warnings printed, so
// that a resumed run logs and warns exactly as the uninterrupted one (none
// when there are no layers: a dense model's checkpoints are unchanged).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kiln/core/stateful.h"
#include "kiln/nn/moe.h"
#include "kiln/train/callback.h"

namespace kiln::train {

struct MoETelemetryOptions {
  /// After each step, update_bias() on the layers whose balance is bias
  /// (their own bias_update_rate).
  bool update_bias = true;
  /// Warn when an expert got under 1% of a layer's assignments for this many
  /// consecutive training steps (once per streak).
  int64_t starved_steps = 100;
};

class MoETelemetry : public Callback, public Stateful {
 public:
  /// layers: not owned; they must outlive the training run.
  explicit MoETelemetry(std::vector<nn::MoE*> layers, MoETelemetryOptions options = {});

  void on_step_end(Trainer& trainer, const StepResult& step) override;
  void checkpoint_objects(io::Checkpoint& ckpt) override;

  /// Keys "layers", "warnings", and per layer i "l<i>/running_max_violation",
  /// "l<i>/forwards", "l<i>/training_forwards", "l<i>/starved_steps" (E
  /// comma-separated counts). load_state checks every layer first (count,
  /// E, values), then restores them all.
  State state() const override;
  void load_state(const State& state) override;

  /// The keys written into Trainer::logs(), in a fixed order (CsvLoggerOptions::log_keys).
  std::vector<std::string> columns() const;
  /// Starvation warnings printed so far.
  int64_t warnings() const { return warnings_; }
  /// What was printed last ("" if nothing), for tests.
  const std::string& last_warning() const { return last_warning_; }

 private:
  std::vector<nn::MoE*> layers_;
  MoETelemetryOptions options_;
  int64_t warnings_ = 0;
  std::string last_warning_;
};

}  // namespace kiln::train
