#include "kiln/train/metrics.h"

#include <fmt/format.h>

#include <cmath>
#include <limits>

#include "kiln/core/error.h"

namespace kiln::train {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Row-wise argmax of a contiguous [B, C] block compared with targets [B].
template <class T>
int64_t count_rows(const T* logits, const int64_t* targets, int64_t rows, int64_t classes) {
  int64_t correct = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const T* row = logits + r * classes;
    int64_t best = 0;
    for (int64_t c = 1; c < classes; ++c)
      if (row[c] > row[best]) best = c;  // first maximum, as torch.argmax
    correct += best == targets[r];
  }
  return correct;
}

}  // namespace

void Mean::update(double value, double weight) {
  KILN_CHECK(weight >= 0, "Mean.update", "weight must be non-negative, got {}", weight);
  total_ += value * weight;
  weight_ += weight;
}

void Mean::reset() { total_ = weight_ = 0; }

double Mean::result() const { return weight_ > 0 ? total_ / weight_ : kNaN; }

io::State Mean::state() const { return {{"total", fmt::format("{}", total_)}, {"weight", fmt::format("{}", weight_)}}; }

void Mean::load_state(const io::State& state) {
  double total = io::state_f64(state, "total", "Mean.load_state");
  double weight = io::state_f64(state, "weight", "Mean.load_state");
  KILN_CHECK(weight >= 0, "Mean.load_state", "weight must be non-negative, got {}", weight);
  total_ = total;
  weight_ = weight;
}

void Accuracy::update(const Tensor& logits, const Tensor& targets) { update(count_correct(logits, targets), targets.numel()); }

void Accuracy::update(int64_t correct, int64_t count) {
  KILN_CHECK(count >= 0 && correct >= 0 && correct <= count, "Accuracy.update",
             "need 0 <= correct <= count, got correct {} of count {}", correct, count);
  correct_ += correct;
  count_ += count;
}

void Accuracy::reset() { correct_ = count_ = 0; }

double Accuracy::result() const { return count_ > 0 ? double(correct_) / double(count_) : kNaN; }

io::State Accuracy::state() const { return {{"correct", std::to_string(correct_)}, {"count", std::to_string(count_)}}; }

void Accuracy::load_state(const io::State& state) {
  int64_t correct = io::state_i64(state, "correct", "Accuracy.load_state");
  int64_t count = io::state_i64(state, "count", "Accuracy.load_state");
  KILN_CHECK(count >= 0 && correct >= 0 && correct <= count, "Accuracy.load_state",
             "need 0 <= correct <= count, got correct {} of count {}", correct, count);
  correct_ = correct;
  count_ = count;
}

int64_t count_correct(const Tensor& logits, const Tensor& targets) {
  KILN_CHECK(logits.dim() == 2 && targets.dim() == 1 && targets.size(0) == logits.size(0), "count_correct",
             "need logits [B, C] and targets [B], got logits {} and targets {}", to_string(logits.shape()), to_string(targets.shape()));
  KILN_CHECK(targets.dtype() == kI64, "count_correct", "targets must be int64 class indices, got {}",
             name(targets.dtype()));
  KILN_CHECK(logits.dtype() == kF32 || logits.dtype() == kF64, "count_correct", "logits must be f32 or f64, got {}",
             name(logits.dtype()));
  Tensor l = logits.contiguous(), t = targets.contiguous();
  if (l.dtype() == kF32) return count_rows(l.data<float>(), t.data<int64_t>(), l.size(0), l.size(1));
  return count_rows(l.data<double>(), t.data<int64_t>(), l.size(0), l.size(1));
}

}  // namespace kiln::train
