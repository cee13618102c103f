// Metrics (F5): running values with update / reset / result, Keras-style.
//
//   train::Mean loss;  train::Accuracy acc;
//   loss.update(step.loss, step.count);     // sample-weighted mean
//   acc.update(logits, targets);            // logits [B, C], targets [B] class indices
//   loss.result(); acc.result(); loss.reset();
//
// result() of an empty metric is NaN. Both are io::Stateful, so a metric a
// callback keeps across epochs resumes with it.
#pragma once

#include <cstdint>
#include <string>

#include "kiln/core/tensor.h"
#include "kiln/io/checkpoint.h"

namespace kiln::train {

class Metric : public io::Stateful {
 public:
  virtual void reset() = 0;
  virtual double result() const = 0;
};

// Weighted mean of the values given to update(): sum(value * weight) / sum(weight).
class Mean : public Metric {
 public:
  void update(double value, double weight = 1.0);
  void reset() override;
  double result() const override;
  double total() const { return total_; }
  double weight() const { return weight_; }
  io::State state() const override;
  void load_state(const io::State& state) override;

 private:
  double total_ = 0;
  double weight_ = 0;
};

// Fraction of predictions equal to the targets.
class Accuracy : public Metric {
 public:
  /// logits [B, C] (argmax over the last dimension), targets [B] integer class indices.
  void update(const Tensor& logits, const Tensor& targets);
  void update(int64_t correct, int64_t count);
  void reset() override;
  double result() const override;
  int64_t correct() const { return correct_; }
  int64_t count() const { return count_; }
  io::State state() const override;
  void load_state(const io::State& state) override;

 private:
  int64_t correct_ = 0;
  int64_t count_ = 0;
};

/// How many rows of logits [B, C] have their argmax equal to targets [B]
/// (what classification steps report as StepResult::correct).
int64_t count_correct(const Tensor& logits, const Tensor& targets);

}  // namespace kiln::train
