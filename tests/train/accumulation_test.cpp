// Gradient accumulation (SPECS X6, issue 30): one optimizer step over several
// micro-batches equals one step over their combined batch, also when the
// micro-batches are uneven and the loss is masked, since each micro-batch's
// summed loss is divided by the valid count of the whole step.
#include <gtest/gtest.h>

#include <sstream>

#include "tests/support/train_testing.h"
#include "tests/train/tiny_run.h"

namespace kiln {
namespace {

// Rows [begin, end) of a batch.
data::Batch rows(const data::Batch& b, int64_t begin, int64_t end) {
  return {narrow(b.input, 0, begin, end - begin).contiguous(), narrow(b.target, 0, begin, end - begin).contiguous()};
}

// Classification over [N, T] positions with targets -100 (ignored) at masked ones:
// the loss is the mean over valid positions, a language model's shape.
struct MaskedTask : train::Task {
  using Task::Task;
  int64_t valid_count(const data::Batch& b) override {
    return sum(ne(b.target, int64_t(-100))).item<int64_t>();
  }
  train::LossSum loss_sum(const data::Batch& b) override {
    Tensor logits = forward()(b.input);  // [N, T, C]
    return {cross_entropy(logits, b.target, {.reduction = Reduction::Sum}), -1};
  }
  // One process, one batch: the ordinary mean over valid positions.
  train::StepResult training_step(const data::Batch& b) override {
    Tensor loss = cross_entropy(forward()(b.input), b.target);
    return {loss.item<double>(), b.size(), -1, train::update(loss, optimizer())};
  }
};

struct Rig {
  explicit Rig(bool masked = false)
      : rngs{{"params", 3}},
        model(nn::make<nn::Linear>(4, 3, nn::Init(rngs))),
        opt(model->parameters(), {.lr = 0.1}),
        task(masked ? std::unique_ptr<train::Task>(std::make_unique<MaskedTask>(model, opt, &rngs))
                    : std::make_unique<train::Task>(model, opt, &rngs)) {}
  std::vector<Tensor> weights() const {
    std::vector<Tensor> out;
    for (const auto& p : model->parameters()) out.push_back(p.value().clone());
    return out;
  }
  Rngs rngs;
  nn::Shared<nn::Linear> model;
  optim::AdamW opt;
  std::unique_ptr<train::Task> task;
};

void expect_close(const std::vector<Tensor>& a, const std::vector<Tensor>& b, double tol) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_LE(max(abs(sub(a[i], b[i]))).item<double>(), tol) << "parameter " << i;
}

TEST(Accumulation, UnevenMicroBatchesEqualTheCombinedBatch) {
  auto set = testing::tiny_dataset(11, 5);
  data::Batch all{set->inputs(), set->targets()};
  Rig one, acc;
  train::StepResult r1{}, r2{};
  for (int step = 0; step < 20; ++step) {
    r1 = one.task->training_step(all);  // mean cross entropy over 11 rows
    // 11 rows as 5 + 2 + 4.
    std::vector<data::Batch> micro = {rows(all, 0, 5), rows(all, 5, 7), rows(all, 7, 11)};
    r2 = acc.task->accumulation_step(micro, nullptr);
  }
  EXPECT_EQ(r2.count, 11);
  EXPECT_TRUE(r2.applied);
  EXPECT_NEAR(r1.loss, r2.loss, 1e-6);
  EXPECT_EQ(r1.correct, r2.correct);
  expect_close(one.weights(), acc.weights(), 1e-6);
}

TEST(Accumulation, MaskedLossDividesByTheGlobalValidCount) {
  Generator g(4);
  Tensor x = randn({6, 5, 4}, g);  // [N, T, features]
  std::vector<int64_t> t(30);
  for (int i = 0; i < 30; ++i) t[i] = (i * 7 % 11 < 4) ? -100 : i % 3;  // uneven valid counts per row
  data::Batch all{x, tensor(t, {6, 5})};
  Rig one(true), acc(true), split_even(true);
  for (int step = 0; step < 10; ++step) {
    one.task->training_step(all);
    std::vector<data::Batch> micro = {rows(all, 0, 1), rows(all, 1, 6)};
    acc.task->accumulation_step(micro, nullptr);
  }
  expect_close(one.weights(), acc.weights(), 1e-6);
  // Dividing each micro-batch by its own count (the common mistake) differs.
  std::vector<data::Batch> micro = {rows(all, 0, 1), rows(all, 1, 6)};
  auto* masked = static_cast<MaskedTask*>(split_even.task.get());
  for (const auto& b : micro) {
    Tensor l = masked->loss_sum(b).sum;
    div(l, double(masked->valid_count(b))).backward();
  }
  split_even.opt.step();
  Rig fresh(true);
  fresh.task->training_step(all);
  EXPECT_GT(max(abs(sub(split_even.weights()[0], fresh.weights()[0]))).item<double>(), 1e-4);
}

TEST(Accumulation, AllMaskedStepHasZeroGradientAndCountZero) {
  Tensor x = ones({2, 3, 4});
  data::Batch b{x, full({2, 3}, -100, {.dtype = kI64})};
  Rig s(true);
  auto before = s.weights();
  std::vector<data::Batch> micro = {b};
  train::StepResult r = s.task->accumulation_step(micro, nullptr);
  EXPECT_EQ(r.count, 0);
  EXPECT_EQ(r.loss, 0.0);
  EXPECT_TRUE(r.applied);
}

TEST(Accumulation, TrainerAccumulateTwoEqualsBatchTwiceAsLarge) {
  auto set = testing::tiny_dataset(14, 6);
  std::ostringstream out1, out2;
  Rig a, b;
  data::DataLoader big(set, {.batch_size = 4, .shuffle = true, .seed = 1, .prefetch = 0});
  data::DataLoader small(set, {.batch_size = 2, .shuffle = true, .seed = 1, .prefetch = 0});
  train::Trainer t1(2, {}, {.out = &out1});
  train::Trainer t2(2, {}, {.out = &out2, .accumulate = 2});
  train::History h1 = t1.fit(*a.task, big);
  train::History h2 = t2.fit(*b.task, small);
  EXPECT_EQ(t1.progress().global_step, 8);  // 4 steps an epoch (4 + 4 + 4 + 2)
  EXPECT_EQ(t2.progress().global_step, 8);
  expect_close(a.weights(), b.weights(), 1e-6);
  ASSERT_EQ(h1.epochs.size(), 2u);
  EXPECT_NEAR(h1.epochs[1].at("loss"), h2.epochs[1].at("loss"), 1e-6);
  EXPECT_NEAR(h1.epochs[1].at("accuracy"), h2.epochs[1].at("accuracy"), 1e-12);
}

TEST(Accumulation, BadArgumentsAreErrors) {
  Rig s;
  std::vector<data::Batch> none;
  EXPECT_THROW(s.task->accumulation_step(none, nullptr), Error);
  EXPECT_THROW(train::Trainer(1, {}, {.accumulate = 0}), Error);
}

}  // namespace
}  // namespace kiln
