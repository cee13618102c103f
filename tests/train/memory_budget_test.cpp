// fit_to_memory (SPECS X5): the batch chosen for a budget measures between
// 0.6x and 1.0x of it, and the prediction is within 10% of the measurement,
// from at most seven probes; the task is left as it was.
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

// Parameter-heavy: four 512 x 512 linears (4 MiB of weights, 8 MiB of Adam
// moments that the first probe creates) and only 6 KiB of activations per
// item, where probe 1's rise misleads the slope the most.
struct Deep : nn::Module {
  explicit Deep(int64_t features, Rngs& rngs) {
    for (int i = 0; i < 4; ++i)
      layers.push_back(register_module("l" + std::to_string(i), nn::Linear(features, features, nn::Init(rngs))));
    head = register_module("head", nn::Linear(features, 3, nn::Init(rngs)));
  }
  Tensor forward(const Tensor& x) const {
    Tensor h = x;
    for (const auto& l : layers) h = relu(l(h));
    return head(h);
  }
  std::vector<nn::Shared<nn::Linear>> layers;
  nn::Shared<nn::Linear> head;
};

template <class Model, int64_t kFeatures>
struct RigOf {
  RigOf()
      : rngs{{"params", 0}},
        model(nn::make<Model>(kFeatures, rngs)),
        opt(model->parameters(), {.lr = 1e-3}),
        task(model, opt, &rngs) {
    Generator g(1);
    data = std::make_shared<data::TensorDataset>(randn({64, kFeatures}, g), randint(0, 3, {64}, g));
  }
  Rngs rngs;
  nn::Shared<Model> model;
  optim::AdamW opt;
  train::Task task;
  std::shared_ptr<data::TensorDataset> data;
};

using Rig = RigOf<Wide, 16384>;  // 64 KiB per activation per item

// The checks every choice passes: within the budget, at least 0.6x of it, the
// prediction within 10% of the measurement, and the task left as it was.
template <class R>
train::MemoryFit check_fit(R& s, int64_t budget, const Tensor& w_before, const Tensor& w_after_probes) {
  train::MemoryFit fit = train::fit_to_memory(s.task, *s.data, budget);
  std::string probes;
  for (const auto& p : fit.probes)
    probes += " (b " + std::to_string(p.batch) + ": " + std::to_string(p.peak_bytes) + ", predicted " +
              std::to_string(p.predicted_bytes) + ")";
  SCOPED_TRACE("budget " + std::to_string(budget) + " probes" + probes + " persistent " +
               std::to_string(fit.persistent_bytes) + " fixed " + std::to_string(fit.fixed_bytes) + " per item " +
               std::to_string(fit.bytes_per_item));
  EXPECT_GE(fit.probes.size(), 4u);
  EXPECT_LE(fit.probes.size(), 7u);
  EXPECT_EQ(fit.probes.back().batch, fit.batch);
  EXPECT_GT(fit.measured_peak_bytes, 0);
  EXPECT_LE(fit.measured_peak_bytes, budget);
  EXPECT_GE(double(fit.measured_peak_bytes), 0.6 * double(budget));
  EXPECT_NEAR(double(fit.predicted_peak_bytes), double(fit.measured_peak_bytes), 0.1 * double(fit.measured_peak_bytes));
  EXPECT_EQ(std::memcmp(w_before.data_ptr(), w_after_probes.data_ptr(), size_t(w_before.nbytes())), 0);
  EXPECT_EQ(s.opt.step_count(), 0);
  return fit;
}

TEST(FitToMemory, ParameterHeavyModelPredictionHolds) {
  for (int64_t budget : {int64_t(256) << 20, int64_t(1) << 30}) {
    RigOf<Deep, 512> s;
    const Tensor w_before = s.model->layers[0]->weight.value().clone();
    check_fit(s, budget, w_before, s.model->layers[0]->weight.value());
  }
}

TEST(FitToMemory, ChoiceFitsTheBudgetAndThePredictionHolds) {
  for (int64_t budget : {int64_t(256) << 20, int64_t(1) << 30}) {
    Rig s;
    const Tensor w_before = s.model->w1.value().clone();
    train::MemoryFit fit = check_fit(s, budget, w_before, s.model->w1.value());
    EXPECT_GT(fit.batch, 16);
    EXPECT_GT(fit.bytes_per_item, 3 * 65536.0);  // several activations of F floats per item
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
