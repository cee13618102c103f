#include <gtest/gtest.h>

#include <cmath>

#include "kiln/ops/creation.h"
#include "kiln/train/metrics.h"
#include "tests/support/train_testing.h"

namespace kiln::train {
namespace {

TEST(Metrics, MeanIsWeighted) {
  Mean m;
  EXPECT_TRUE(std::isnan(m.result()));
  m.update(2.0, 3);
  m.update(4.0, 1);
  EXPECT_DOUBLE_EQ(m.result(), 2.5);
  m.reset();
  EXPECT_TRUE(std::isnan(m.result()));
  m.update(1.5);
  EXPECT_DOUBLE_EQ(m.result(), 1.5);
  EXPECT_KILN_ERROR(m.update(1.0, -1), "[Mean.update] weight must be non-negative, got -1");
}

TEST(Metrics, AccuracyFromLogits) {
  // Row 2 ties between classes 0 and 2: argmax takes the first, as torch does.
  Tensor logits = tensor({0.1f, 0.9f, 0.0f, 0.7f, 0.2f, 0.1f, 0.5f, 0.1f, 0.5f}, {3, 3});
  Tensor targets = tensor(std::vector<int64_t>{1, 1, 0});
  EXPECT_EQ(count_correct(logits, targets), 2);
  Accuracy acc;
  acc.update(logits, targets);
  acc.update(1, 1);
  EXPECT_DOUBLE_EQ(acc.result(), 0.75);
  EXPECT_EQ(acc.correct(), 3);
  EXPECT_EQ(acc.count(), 4);
  EXPECT_EQ(count_correct(logits.to(kF64), targets), 2);
  EXPECT_EQ(count_correct(logits.t().contiguous().t(), targets), 2);  // non-contiguous logits
}

TEST(Metrics, AccuracyErrors) {
  Accuracy acc;
  EXPECT_KILN_ERROR(acc.update(3, 2), "[Accuracy.update] need 0 <= correct <= count, got correct 3 of count 2");
  Tensor logits = zeros({4, 3});
  EXPECT_KILN_ERROR(count_correct(logits, zeros({3}, {.dtype = kI64})),
                    "[count_correct] need logits [B, C] and targets [B], got logits [4, 3] and targets [3]");
  EXPECT_KILN_ERROR(count_correct(logits, zeros({4})), "targets must be int64 class indices, got f32");
  EXPECT_KILN_ERROR(count_correct(zeros({4, 3}, {.dtype = kI64}), zeros({4}, {.dtype = kI64})),
                    "logits must be f32 or f64, got i64");
}

TEST(Metrics, StateRoundTrips) {
  Mean m;
  m.update(0.1, 3);
  m.update(1.0 / 3.0, 7);
  Mean m2;
  m2.load_state(m.state());
  EXPECT_EQ(m2.result(), m.result());  // exact: shortest round-trip text
  Accuracy a;
  a.update(5, 9);
  Accuracy a2;
  a2.load_state(a.state());
  EXPECT_EQ(a2.correct(), 5);
  EXPECT_EQ(a2.count(), 9);
  EXPECT_KILN_ERROR(a2.load_state({{"correct", "9"}, {"count", "5"}}), "need 0 <= correct <= count");
  EXPECT_EQ(a2.count(), 9);  // unchanged by the refused state
  EXPECT_KILN_ERROR(m2.load_state({{"total", "1"}}), "weight");
}

}  // namespace
}  // namespace kiln::train
