// fit_to_memory (SPECS X5): the batch chosen for a budget measures between
// 0.6x and 1.0x of it, and the prediction is within 10% of the measurement,
// from at most three probes; the task is left as it was.
#include <gtest/gtest.h>

#include <cstring>

#include "tests/support/train_testing.h"

namespace kiln {
namespace {

// Memory-heavy and compute-light: x [B, F] through elementwise layers whose
// activations (F floats per item each) dominate the peak, then a linear head.
struct Wide : nn::Module {
  explicit Wide(int64_t features, Rngs& rngs) {
    Generator g = rngs.next("params");
    w1 = register_parameter("w1", add(mul(randn({features}, g), 0.1), 1.0));
    w2 = register_parameter("w2", add(mul(randn({features}, g), 0.1), 1.0));
    head = register_module("head", nn::Linear(features, 3, nn::Init(rngs)));
  }
  Tensor forward(const Tensor& x) const {
    Tensor h = tanh(mul(x, w1.value()));
    h = sigmoid(mul(h, w2.value()));
    return head(h);
  }
  nn::Parameter w1, w2;
  nn::Shared<nn::Linear> head;
};

struct Rig {
  Rig()
      : rngs{{"params", 0}},
        model(nn::make<Wide>(kFeatures, rngs)),
        opt(model->parameters(), {.lr = 1e-3}),
        task(model, opt, &rngs) {
    Generator g(1);
    data = std::make_shared<data::TensorDataset>(randn({64, kFeatures}, g), randint(0, 3, {64}, g));
  }
  static constexpr int64_t kFeatures = 16384;  // 64 KiB per activation per item
  Rngs rngs;
  nn::Shared<Wide> model;
  optim::AdamW opt;
  train::Task task;
  std::shared_ptr<data::TensorDataset> data;
};

TEST(FitToMemory, ChoiceFitsTheBudgetAndThePredictionHolds) {
  for (int64_t budget : {int64_t(256) << 20, int64_t(1) << 30}) {
    Rig s;
    const Tensor w_before = s.model->w1.value().clone();
    train::MemoryFit fit = train::fit_to_memory(s.task, *s.data, budget);
    std::string probes;
    for (const auto& p : fit.probes)
      probes += " (b " + std::to_string(p.batch) + ": " + std::to_string(p.peak_bytes) + ", predicted " +
                std::to_string(p.predicted_bytes) + ")";
    SCOPED_TRACE("probes" + probes + " persistent " + std::to_string(fit.persistent_bytes) + " fixed " +
                 std::to_string(fit.fixed_bytes) + " per item " + std::to_string(fit.bytes_per_item));
    ASSERT_EQ(fit.probes.size(), 3u);
    EXPECT_GT(fit.batch, 16);
    EXPECT_GT(fit.bytes_per_item, 3 * 65536.0);  // several activations of F floats per item
    EXPECT_GT(fit.measured_peak_bytes, 0);
    EXPECT_LE(fit.measured_peak_bytes, budget);
    EXPECT_GE(double(fit.measured_peak_bytes), 0.6 * double(budget));
    EXPECT_NEAR(double(fit.predicted_peak_bytes), double(fit.measured_peak_bytes), 0.1 * double(fit.measured_peak_bytes))
        << "batch " << fit.batch << " budget " << budget;
    // The probes left no trace: the weights and the optimizer are as they were.
    EXPECT_EQ(std::memcmp(w_before.data_ptr(), s.model->w1.value().data_ptr(), size_t(w_before.nbytes())), 0);
    EXPECT_EQ(s.opt.step_count(), 0);
  }
}

TEST(FitToMemory, FunctionProbeAndErrors) {
  // A synthetic peak: 1 MiB per item above 4 MiB.
  auto probe = [](int64_t b) {
    Tensor fixed = Tensor::empty({1 << 20});   // 4 MiB
    Tensor t = Tensor::empty({b, 1 << 18});    // 1 MiB per item
  };
  train::MemoryFit fit = train::fit_to_memory(probe, int64_t(64) << 20, {.multiple = 4});
  EXPECT_EQ(fit.batch % 4, 0);
  EXPECT_NEAR(fit.bytes_per_item, 1 << 20, 1024);
  EXPECT_NEAR(double(fit.fixed_bytes), 4 << 20, 1024);
  EXPECT_LE(fit.measured_peak_bytes, int64_t(64) << 20);
  EXPECT_GE(fit.batch, 52);
  EXPECT_THROW(train::fit_to_memory(probe, int64_t(2) << 20), Error);  // not even batch 1
  EXPECT_THROW(train::fit_to_memory(probe, -1), Error);
  EXPECT_THROW(train::fit_to_memory(probe, int64_t(64) << 20, {.min_batch = 3, .max_batch = 2}), Error);
  EXPECT_GT(train::system_memory_budget(), 0);
}

}  // namespace
}  // namespace kiln
