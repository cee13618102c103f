// Learning-rate schedulers (SPECS §5 S1–S8): PyTorch goldens, properties of
// the pure schedules, state_dict round trips and every constructor check.
#include "kiln/optim/schedulers.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "kiln/optim/adam.h"
#include "kiln/optim/noop.h"
#include "kiln/optim/sgd.h"
#include "tests/support/optim_testing.h"

namespace kiln::optim {
namespace {
using namespace testing;
using nlohmann::json;

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// |a - b| <= 1e-12 |b| (PyTorch's recursive forms drift from the closed forms
// by a few ulps per step; 1e-300 absorbs an exact 0 against a denormal).
::testing::AssertionResult near_rel(double a, double b, double rtol = 1e-12) {
  if (std::abs(a - b) <= rtol * std::abs(b) + 1e-300) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << fmt::format("{:.17g} vs {:.17g} (rel {:.3g})", a, b,
                                                      std::abs(a - b) / std::abs(b));
}

// The kiln scheduler matching a golden case's torch arguments.
std::shared_ptr<LRScheduler> from_torch(const json& c) {
  const std::string kind = c["kind"];
  const json& a = c["args"];
  if (kind == "cosine")
    return std::make_shared<CosineScheduler>(
        CosineOptions{.max_lr = a["lr"], .min_lr = a["eta_min"], .total_steps = a["T_max"]});
  if (kind == "warm_restarts")
    return std::make_shared<CosineWarmRestartsScheduler>(CosineWarmRestartsOptions{
        .max_lr = a["lr"], .min_lr = a["eta_min"], .t0 = a["T_0"], .t_mult = a["T_mult"]});
  if (kind == "one_cycle")
    return std::make_shared<OneCycleScheduler>(OneCycleOptions{
        .max_lr = a["max_lr"],
        .total_steps = a["total_steps"],
        .pct_start = a.value("pct_start", 0.3),
        .div_factor = a.value("div_factor", 25.0),
        .final_div_factor = a.value("final_div_factor", 1e4),
        .anneal = a.value("anneal_strategy", std::string("cos")) == "cos" ? Anneal::Cos : Anneal::Linear,
        .three_phase = a.value("three_phase", false),
        .cycle_momentum = true,
        .base_momentum = a.value("base_momentum", 0.85),
        .max_momentum = a.value("max_momentum", 0.95)});
  if (kind == "cyclic") {
    const std::string mode = a["mode"];
    return std::make_shared<CyclicScheduler>(CyclicOptions{
        .base_lr = a["base_lr"],
        .max_lr = a["max_lr"],
        .step_size_up = a["step_size_up"],
        .step_size_down = a.value("step_size_down", int64_t(0)),
        .mode = mode == "triangular"    ? CyclicMode::Triangular
                : mode == "triangular2" ? CyclicMode::Triangular2
                                        : CyclicMode::ExpRange,
        .gamma = a.value("gamma", 1.0),
        .cycle_momentum = true});  // PyTorch's default; base/max momentum 0.8/0.9 are both defaults
  }
  const double lr = a["lr"];
  if (kind == "sequential") {
    auto linear = std::make_shared<LinearScheduler>(LinearOptions{
        .start_lr = lr * double(a["start_factor"]), .end_lr = lr * double(a["end_factor"]), .total_steps = a["total_iters"]});
    auto cosine = std::make_shared<CosineScheduler>(
        CosineOptions{.max_lr = lr, .min_lr = a["eta_min"], .total_steps = a["T_max"]});
    return std::make_shared<SequentialScheduler>(std::vector<std::shared_ptr<LRScheduler>>{linear, cosine},
                                                 std::vector<int64_t>{a["milestone"]});
  }
  if (kind == "step")
    return std::make_shared<StepScheduler>(StepOptions{.lr = lr, .step_size = a["step_size"], .gamma = a["gamma"]});
  if (kind == "multi_step")
    return std::make_shared<MultiStepScheduler>(
        MultiStepOptions{.lr = lr, .milestones = a["milestones"].get<std::vector<int64_t>>(), .gamma = a["gamma"]});
  if (kind == "exponential") return std::make_shared<ExponentialScheduler>(ExponentialOptions{.lr = lr, .gamma = a["gamma"]});
  if (kind == "linear")
    return std::make_shared<LinearScheduler>(LinearOptions{.start_lr = lr * double(a["start_factor"]),
                                                           .end_lr = lr * double(a["end_factor"]),
                                                           .total_steps = a["total_iters"]});
  if (kind == "plateau")
    return std::make_shared<ReduceOnPlateauScheduler>(ReduceOnPlateauOptions{
        .lr = lr,
        .mode = a["mode"] == "min" ? PlateauMode::Min : PlateauMode::Max,
        .factor = a["factor"],
        .patience = a["patience"],
        .threshold = a["threshold"],
        .threshold_mode = a["threshold_mode"] == "rel" ? ThresholdMode::Rel : ThresholdMode::Abs,
        .cooldown = a.value("cooldown", int64_t(0)),
        .min_lr = a.value("min_lr", 0.0),
        .eps = a.value("eps", 1e-8)});
  ADD_FAILURE() << "unknown golden kind " << kind;
  return nullptr;
}

const json& golden_case(const std::string& name) {
  for (const auto& c : golden("optim_schedulers")["cases"])
    if (c["name"] == name) return c;
  throw std::runtime_error("no golden case " + name);
}

// lr(k), and the values step() walks through, against PyTorch's sequence;
// the same for momentum where PyTorch cycles it.
void expect_matches_torch(const std::string& name) {
  SCOPED_TRACE(name);
  const json& c = golden_case(name);
  auto sched = from_torch(c);
  ASSERT_TRUE(sched);
  const auto lrs = c["lr"].get<std::vector<double>>();
  ASSERT_GE(lrs.size(), 25u);
  for (size_t k = 0; k < lrs.size(); ++k) {
    EXPECT_TRUE(near_rel(sched->lr(int64_t(k)), lrs[k])) << "lr(" << k << ")";
    if (k > 0) {
      EXPECT_TRUE(near_rel(sched->step(), lrs[k])) << "step " << k;
    }
    EXPECT_EQ(sched->last_step(), int64_t(k));
    EXPECT_EQ(sched->get_lr(), sched->lr(int64_t(k)));
  }
  if (c.contains("momentum")) {
    const auto moms = c["momentum"].get<std::vector<double>>();
    for (size_t k = 0; k < moms.size(); ++k) {
      auto m = sched->momentum(int64_t(k));
      ASSERT_TRUE(m.has_value());
      EXPECT_TRUE(near_rel(*m, moms[k])) << "momentum(" << k << ")";
    }
  } else {
    EXPECT_FALSE(sched->momentum(0).has_value());
  }
}

TEST(SchedulerGolden, Cosine) {
  expect_matches_torch("cosine");
  expect_matches_torch("cosine_eta0");
}
TEST(SchedulerGolden, CosineWarmRestarts) {
  expect_matches_torch("warm_restarts_mult1");
  expect_matches_torch("warm_restarts_mult2");
}
TEST(SchedulerGolden, OneCycle) {
  expect_matches_torch("one_cycle_cos");
  expect_matches_torch("one_cycle_linear");
  expect_matches_torch("one_cycle_cos_three_phase");
  expect_matches_torch("one_cycle_linear_three_phase");
}
TEST(SchedulerGolden, Cyclic) {
  expect_matches_torch("cyclic_triangular");
  expect_matches_torch("cyclic_triangular2");
  expect_matches_torch("cyclic_exp_range");
}
TEST(SchedulerGolden, SequentialLinearThenCosine) { expect_matches_torch("sequential_linear_cosine"); }
TEST(SchedulerGolden, StepMultiStepExponentialLinear) {
  expect_matches_torch("step");
  expect_matches_torch("multi_step");
  expect_matches_torch("exponential");
  expect_matches_torch("linear_up");
  expect_matches_torch("linear_down");
}

// ReduceLROnPlateau over a scripted metric curve: lr and counters after each
// metric (exact: the same comparisons and products as PyTorch).
void expect_plateau_matches_torch(const std::string& name) {
  SCOPED_TRACE(name);
  const json& c = golden_case(name);
  auto sched = std::dynamic_pointer_cast<ReduceOnPlateauScheduler>(from_torch(c));
  ASSERT_TRUE(sched);
  const auto metrics = c["metrics"].get<std::vector<double>>();
  const auto lrs = c["lr"].get<std::vector<double>>();
  const auto bad = c["num_bad_epochs"].get<std::vector<int64_t>>();
  const auto cool = c["cooldown_counter"].get<std::vector<int64_t>>();
  const auto best = c["best"].get<std::vector<double>>();
  EXPECT_EQ(sched->get_lr(), double(c["args"]["lr"]));
  int reductions = 0;
  for (size_t k = 0; k < metrics.size(); ++k) {
    const double before = sched->get_lr();
    EXPECT_EQ(sched->step(metrics[k]), lrs[k]) << "metric " << k;
    reductions += sched->get_lr() < before;
    EXPECT_EQ(sched->get_lr(), lrs[k]);
    EXPECT_EQ(sched->lr(0), lrs[k]);  // the current lr whatever the step
    EXPECT_EQ(sched->last_step(), int64_t(k + 1));
    EXPECT_EQ(sched->num_bad_epochs(), bad[k]) << "metric " << k;
    EXPECT_EQ(sched->cooldown_counter(), cool[k]) << "metric " << k;
    EXPECT_EQ(sched->best(), best[k]) << "metric " << k;
  }
  EXPECT_GE(reductions, 2);  // the script does exercise the reductions
}

TEST(SchedulerGolden, ReduceOnPlateau) {
  expect_plateau_matches_torch("plateau_min_rel");
  expect_plateau_matches_torch("plateau_min_abs_cooldown");
  expect_plateau_matches_torch("plateau_max_rel_cooldown");
  expect_plateau_matches_torch("plateau_max_abs");
}

// ---- properties of the pure schedules ----

TEST(SchedulerSchedule, CosineHoldsMinLrPastTotalSteps) {
  CosineScheduler s({.max_lr = 0.1, .min_lr = 0.01, .total_steps = 20});
  EXPECT_EQ(s.lr(0), 0.1);
  EXPECT_TRUE(near_rel(s.lr(10), 0.055));
  EXPECT_EQ(s.lr(20), 0.01);
  EXPECT_EQ(s.lr(21), 0.01);
  EXPECT_EQ(s.lr(1000000), 0.01);
  for (int64_t k = 1; k <= 20; ++k) EXPECT_LT(s.lr(k), s.lr(k - 1));
}

TEST(SchedulerSchedule, WarmRestartsRestartAtPeriodEnds) {
  CosineWarmRestartsScheduler s({.max_lr = 1.0, .min_lr = 0.0, .t0 = 3, .t_mult = 2});
  // periods 3, 6, 12: restarts at 3, 9, 21
  for (int64_t r : {0, 3, 9, 21}) EXPECT_EQ(s.lr(r), 1.0) << r;
  EXPECT_TRUE(near_rel(s.lr(9 + 6), 0.5, 1e-15));  // half way through the 12-step period
  EXPECT_LT(s.lr(20), s.lr(19));
  // A huge step stays finite (period growth saturates instead of overflowing).
  CosineWarmRestartsScheduler big({.max_lr = 1.0, .t0 = 1, .t_mult = 1000000});
  EXPECT_TRUE(std::isfinite(big.lr(std::numeric_limits<int64_t>::max())));
}

TEST(SchedulerSchedule, WarmupEndpointsThenAfter) {
  auto cosine = std::make_shared<CosineScheduler>(CosineOptions{.max_lr = 0.2, .min_lr = 0.0, .total_steps = 10});
  WarmupScheduler s({.target_lr = 0.2, .warmup_steps = 4, .start_lr = 0.04}, cosine);
  EXPECT_EQ(s.lr(0), 0.04);
  EXPECT_TRUE(near_rel(s.lr(2), 0.12));
  EXPECT_EQ(s.lr(4), 0.2);  // after->lr(0)
  for (int64_t k = 4; k < 30; ++k) EXPECT_EQ(s.lr(k), cosine->lr(k - 4));
  // Without a successor it holds target_lr; zero warmup steps is just `after`.
  WarmupScheduler hold({.target_lr = 0.3, .warmup_steps = 2}, nullptr);
  EXPECT_EQ(hold.lr(0), 0.0);
  EXPECT_EQ(hold.lr(1), 0.15);
  EXPECT_EQ(hold.lr(2), 0.3);
  EXPECT_EQ(hold.lr(50), 0.3);
  WarmupScheduler none({.target_lr = 0.2, .warmup_steps = 0}, cosine);
  EXPECT_EQ(none.lr(0), 0.2);
  EXPECT_EQ(none.lr(7), cosine->lr(7));
}

TEST(SchedulerSchedule, LinearWarmupCosineAtWarmupAndTotal) {
  LinearWarmupCosineScheduler s(
      {.target_lr = 1e-3, .min_lr = 1e-5, .warmup_steps = 10, .total_steps = 110, .start_lr = 1e-4});
  EXPECT_EQ(s.name(), "LinearWarmupCosineScheduler");
  EXPECT_EQ(s.lr(0), 1e-4);
  EXPECT_TRUE(near_rel(s.lr(5), 5.5e-4));
  EXPECT_EQ(s.lr(10), 1e-3);
  EXPECT_TRUE(near_rel(s.lr(60), (1e-3 + 1e-5) / 2));
  EXPECT_EQ(s.lr(110), 1e-5);
  EXPECT_EQ(s.lr(500), 1e-5);
  for (int64_t k = 1; k <= 10; ++k) EXPECT_GT(s.lr(k), s.lr(k - 1));
  for (int64_t k = 11; k <= 110; ++k) EXPECT_LT(s.lr(k), s.lr(k - 1));
  // The same as composing S6 and S1 by hand.
  WarmupScheduler composed({.target_lr = 1e-3, .warmup_steps = 10, .start_lr = 1e-4},
                           std::make_shared<CosineScheduler>(CosineOptions{.max_lr = 1e-3, .min_lr = 1e-5, .total_steps = 100}));
  for (int64_t k = 0; k < 130; ++k) EXPECT_EQ(s.lr(k), composed.lr(k));
}

TEST(SchedulerSchedule, OneCycleEndpointsAndHoldPastTheEnd) {
  OneCycleScheduler s({.max_lr = 0.5, .total_steps = 101, .pct_start = 0.2, .div_factor = 10, .final_div_factor = 50});
  EXPECT_DOUBLE_EQ(s.lr(0), 0.05);
  EXPECT_DOUBLE_EQ(*s.momentum(0), 0.95);
  // pct_start * total_steps - 1 = 19.2: the peak falls between steps 19 and 20.
  EXPECT_GT(s.lr(19), 0.499);
  EXPECT_GT(s.lr(20), 0.499);
  EXPECT_LT(s.lr(19), 0.5);
  EXPECT_DOUBLE_EQ(s.lr(100), 0.05 / 50);
  EXPECT_DOUBLE_EQ(*s.momentum(100), 0.95);
  EXPECT_EQ(s.lr(101), s.lr(100));
  EXPECT_EQ(s.lr(5000), s.lr(100));
  EXPECT_EQ(*s.momentum(5000), *s.momentum(100));
  OneCycleScheduler no_momentum({.max_lr = 0.5, .total_steps = 10, .cycle_momentum = false});
  EXPECT_FALSE(no_momentum.momentum(3).has_value());
  // pct_start = 1: all warmup, the second phase never reached (allowed, as in PyTorch).
  OneCycleScheduler all_up({.max_lr = 1.0, .total_steps = 11, .pct_start = 1.0, .anneal = Anneal::Linear});
  EXPECT_DOUBLE_EQ(all_up.lr(10), 1.0);
}

TEST(SchedulerSchedule, CyclicDownDefaultsToUpAndMomentumMirrorsLr) {
  CyclicScheduler a({.base_lr = 0.1, .max_lr = 1.0, .step_size_up = 4});
  CyclicScheduler b({.base_lr = 0.1, .max_lr = 1.0, .step_size_up = 4, .step_size_down = 4});
  for (int64_t k = 0; k < 40; ++k) EXPECT_EQ(a.lr(k), b.lr(k));
  EXPECT_EQ(a.lr(0), 0.1);
  EXPECT_EQ(a.lr(4), 1.0);
  EXPECT_EQ(a.lr(8), 0.1);
  EXPECT_FALSE(a.momentum(2).has_value());  // cycle_momentum is off by default (PyTorch: on)
  CyclicScheduler m({.base_lr = 0.1, .max_lr = 1.0, .step_size_up = 4, .cycle_momentum = true});
  EXPECT_DOUBLE_EQ(*m.momentum(0), 0.9);
  EXPECT_DOUBLE_EQ(*m.momentum(4), 0.8);
}

TEST(SchedulerSchedule, BasicsConstantLinearStepMultiStepExponentialLambda) {
  ConstantScheduler c({.lr = 0.3});
  EXPECT_EQ(c.lr(0), 0.3);
  EXPECT_EQ(c.lr(99), 0.3);
  LinearScheduler l({.start_lr = 0.0, .end_lr = 1.0, .total_steps = 4});
  EXPECT_EQ(l.lr(0), 0.0);  // start_lr 0 is fine here (PyTorch's start_factor 0 divides by zero)
  EXPECT_EQ(l.lr(1), 0.25);
  EXPECT_EQ(l.lr(4), 1.0);
  EXPECT_EQ(l.lr(9), 1.0);
  StepScheduler st({.lr = 1.0, .step_size = 3, .gamma = 0.5});
  EXPECT_EQ(st.lr(2), 1.0);
  EXPECT_EQ(st.lr(3), 0.5);
  EXPECT_EQ(st.lr(9), 0.125);
  MultiStepScheduler ms({.lr = 1.0, .milestones = {0, 2, 5}, .gamma = 0.5});
  EXPECT_EQ(ms.lr(0), 0.5);
  EXPECT_EQ(ms.lr(2), 0.25);
  EXPECT_EQ(ms.lr(4), 0.25);
  EXPECT_EQ(ms.lr(5), 0.125);
  ExponentialScheduler e({.lr = 2.0, .gamma = 0.5});
  EXPECT_EQ(e.lr(3), 0.25);
  LambdaScheduler f([](int64_t s) { return 1.0 / double(s + 1); });
  EXPECT_EQ(f.lr(3), 0.25);
  EXPECT_EQ(f.step(), 0.5);
  LambdaScheduler bad([](int64_t s) { return s < 2 ? 1.0 : -1.0; });
  EXPECT_EQ(bad.lr(1), 1.0);
  EXPECT_KILN_ERROR(bad.lr(2), "[LambdaScheduler] fn(2) returned -1");
  LambdaScheduler nan([](int64_t) { return kNaN; });
  EXPECT_KILN_ERROR(nan.lr(0), "must be finite");
}

TEST(SchedulerSchedule, SequentialChildrenSeeRelativeStepsAndFollow) {
  auto a = std::make_shared<ConstantScheduler>(ConstantOptions{.lr = 1.0});
  auto b = std::make_shared<LinearScheduler>(LinearOptions{.start_lr = 0.5, .end_lr = 0.0, .total_steps = 5});
  auto c = std::make_shared<ExponentialScheduler>(ExponentialOptions{.lr = 0.1, .gamma = 0.5});
  SequentialScheduler s({a, b, c}, {3, 8});
  EXPECT_EQ(s.lr(2), 1.0);
  EXPECT_EQ(s.lr(3), 0.5);  // b's step 0
  EXPECT_TRUE(near_rel(s.lr(7), 0.1));  // b's step 4
  EXPECT_EQ(s.lr(8), 0.1);  // c's step 0
  EXPECT_EQ(s.lr(10), 0.025);
  // Stepping moves the active child to the step it sees.
  for (int i = 0; i < 5; ++i) s.step();
  EXPECT_EQ(s.last_step(), 5);
  EXPECT_EQ(b->last_step(), 2);
  EXPECT_EQ(b->get_lr(), s.get_lr());
  for (int i = 0; i < 5; ++i) s.step();
  EXPECT_EQ(c->last_step(), 2);
  EXPECT_EQ(c->get_lr(), s.get_lr());
  // Momentum comes from the active child.
  auto cyc = std::make_shared<OneCycleScheduler>(OneCycleOptions{.max_lr = 1.0, .total_steps = 20});
  SequentialScheduler m({a, cyc}, {4});
  EXPECT_FALSE(m.momentum(3).has_value());
  EXPECT_EQ(m.momentum(9), cyc->momentum(5));
  WarmupScheduler w({.target_lr = 0.04, .warmup_steps = 3}, cyc);
  EXPECT_EQ(w.momentum(1), cyc->momentum(0));
  EXPECT_EQ(w.momentum(8), cyc->momentum(5));
}

TEST(SchedulerSchedule, StepAdvancesAndNegativeStepsAreErrors) {
  CosineScheduler s({.max_lr = 1.0, .min_lr = 0.0, .total_steps = 4});
  EXPECT_EQ(s.last_step(), 0);
  EXPECT_EQ(s.get_lr(), 1.0);
  EXPECT_EQ(s.step(), s.lr(1));
  EXPECT_EQ(s.last_step(), 1);
  EXPECT_KILN_ERROR(s.lr(-1), "[CosineScheduler] step must be >= 0, got -1");
  EXPECT_KILN_ERROR(s.momentum(-2), "[CosineScheduler] step must be >= 0");
  OneCycleScheduler o({.max_lr = 1.0, .total_steps = 10});
  EXPECT_KILN_ERROR(o.momentum(-1), "[OneCycleScheduler] step must be >= 0");
  // Steps live in doubles in state_dicts: 2^53 is the last exact one.
  s.load_state_dict({{"last_step", 9007199254740992.0}});
  EXPECT_EQ(s.last_step(), int64_t(1) << 53);
  EXPECT_EQ(s.get_lr(), 0.0);
  EXPECT_KILN_ERROR(s.step(), "[CosineScheduler] step(): last_step 9007199254740992 cannot advance further");
  ReduceOnPlateauScheduler p({.lr = 0.1});
  EXPECT_KILN_ERROR(p.step(), "[ReduceOnPlateauScheduler] step() needs the metric");
  EXPECT_EQ(p.last_step(), 0);
}

TEST(SchedulerSchedule, PlateauNaNMetricIsNotAnImprovement) {
  ReduceOnPlateauScheduler p({.lr = 1.0, .factor = 0.5, .patience = 1});
  p.step(1.0);
  p.step(kNaN);
  EXPECT_EQ(p.num_bad_epochs(), 1);
  EXPECT_EQ(p.step(kNaN), 0.5);
  EXPECT_EQ(p.best(), 1.0);
}

// ---- state_dict ----

std::vector<double> run(LRScheduler& s, int n) {
  std::vector<double> out;
  for (int i = 0; i < n; ++i) out.push_back(s.step());
  return out;
}

// A scheduler family built twice from the same options: one runs straight
// through, the other is restored from the first's state mid-way.
using Factory = std::function<std::shared_ptr<LRScheduler>()>;

void expect_resumes(const std::string& what, const Factory& make, int before, int after) {
  SCOPED_TRACE(what);
  auto a = make();
  run(*a, before);
  const SchedulerState saved = a->state_dict();
  EXPECT_EQ(saved.at("last_step"), double(before));
  auto b = make();
  b->load_state_dict(saved);
  EXPECT_EQ(b->last_step(), before);
  EXPECT_EQ(b->state_dict(), saved);
  EXPECT_EQ(b->get_lr(), a->get_lr());
  EXPECT_EQ(run(*b, after), run(*a, after));
  EXPECT_EQ(b->state_dict(), a->state_dict());
}

std::shared_ptr<LRScheduler> nested() {
  // Sequential[ Warmup(-> Sequential[Cosine, Step]), Linear ]
  auto inner = std::make_shared<SequentialScheduler>(
      std::vector<std::shared_ptr<LRScheduler>>{
          std::make_shared<CosineScheduler>(CosineOptions{.max_lr = 0.1, .min_lr = 0.01, .total_steps = 10}),
          std::make_shared<StepScheduler>(StepOptions{.lr = 0.01, .step_size = 3, .gamma = 0.5})},
      std::vector<int64_t>{10});
  auto warm = std::make_shared<WarmupScheduler>(WarmupOptions{.target_lr = 0.1, .warmup_steps = 5}, inner);
  auto tail = std::make_shared<LinearScheduler>(LinearOptions{.start_lr = 0.001, .end_lr = 0.0, .total_steps = 8});
  return std::make_shared<SequentialScheduler>(std::vector<std::shared_ptr<LRScheduler>>{warm, tail},
                                               std::vector<int64_t>{25});
}

TEST(SchedulerState, RoundTripContinuesIdentically) {
  expect_resumes("cosine", [] { return std::make_shared<CosineScheduler>(CosineOptions{.max_lr = 1, .total_steps = 30}); },
                 12, 30);
  expect_resumes("one_cycle",
                 [] { return std::make_shared<OneCycleScheduler>(OneCycleOptions{.max_lr = 1, .total_steps = 50}); }, 20,
                 40);
  expect_resumes("warm_restarts", [] {
    return std::make_shared<CosineWarmRestartsScheduler>(CosineWarmRestartsOptions{.max_lr = 1, .t0 = 4, .t_mult = 2});
  }, 7, 30);
  expect_resumes("linear_warmup_cosine", [] {
    return std::make_shared<LinearWarmupCosineScheduler>(
        LinearWarmupCosineOptions{.target_lr = 1, .warmup_steps = 5, .total_steps = 20});
  }, 3, 25);
  for (int before : {0, 4, 5, 17, 26, 40}) expect_resumes("nested before " + std::to_string(before), nested, before, 20);
}

TEST(SchedulerState, NestedKeysFollowTheChildren) {
  auto s = nested();
  run(*s, 17);  // step 17: warm (17) -> inner (12) -> its StepScheduler (2); its Cosine was left at 9
  const SchedulerState st = s->state_dict();
  const SchedulerState expect = {{"last_step", 17},
                                 {"schedulers.0.last_step", 17},
                                 {"schedulers.0.after.last_step", 12},
                                 {"schedulers.0.after.schedulers.0.last_step", 9},  // where it was left
                                 {"schedulers.0.after.schedulers.1.last_step", 2},
                                 {"schedulers.1.last_step", 0}};
  EXPECT_EQ(st, expect);
  // Children not yet reached stay at 0; those left behind keep their last step.
  run(*s, 20);
  EXPECT_EQ(s->state_dict().at("schedulers.1.last_step"), 12);
  EXPECT_EQ(s->state_dict().at("schedulers.0.last_step"), 24);
}

TEST(SchedulerState, PlateauResumesMidway) {
  const json& c = golden_case("plateau_min_abs_cooldown");
  const auto metrics = c["metrics"].get<std::vector<double>>();
  const auto lrs = c["lr"].get<std::vector<double>>();
  for (size_t cut : {size_t(3), size_t(11), size_t(20), size_t(33)}) {
    SCOPED_TRACE(cut);
    auto a = from_torch(c);
    auto& pa = dynamic_cast<ReduceOnPlateauScheduler&>(*a);
    for (size_t k = 0; k < cut; ++k) pa.step(metrics[k]);
    const SchedulerState saved = pa.state_dict();
    EXPECT_EQ(saved.size(), 5u);  // last_step, lr, best, num_bad_epochs, cooldown_counter
    auto b = from_torch(c);
    auto& pb = dynamic_cast<ReduceOnPlateauScheduler&>(*b);
    pb.load_state_dict(saved);
    EXPECT_EQ(pb.state_dict(), saved);
    for (size_t k = cut; k < metrics.size(); ++k) EXPECT_EQ(pb.step(metrics[k]), lrs[k]) << k;
  }
  // A fresh plateau's best is +inf, and that round-trips too.
  ReduceOnPlateauScheduler fresh({.lr = 0.1});
  EXPECT_EQ(fresh.state_dict().at("best"), kInf);
  ReduceOnPlateauScheduler other({.lr = 0.1});
  other.step(0.5);
  other.load_state_dict(fresh.state_dict());
  EXPECT_EQ(other.best(), kInf);
  EXPECT_EQ(other.last_step(), 0);
}

// load_state_dict(bad) throws naming the key and leaves `s` as it was.
void expect_load_rejected(LRScheduler& s, const SchedulerState& bad, const std::string& message) {
  const SchedulerState before = s.state_dict();
  const double lr = s.get_lr();
  EXPECT_KILN_ERROR(s.load_state_dict(bad), message);
  EXPECT_EQ(s.state_dict(), before);
  EXPECT_EQ(s.get_lr(), lr);
}

TEST(SchedulerState, LoadRejectsMissingUnknownAndBadValuesUnchanged) {
  CosineScheduler c({.max_lr = 1, .total_steps = 10});
  c.step();
  c.step();
  expect_load_rejected(c, {}, "[CosineScheduler] load_state_dict: missing key 'last_step'");
  expect_load_rejected(c, {{"last_step", 5}, {"lr", 0.1}}, "load_state_dict: unknown key 'lr'");
  expect_load_rejected(c, {{"last_step", -1}}, "'last_step' must be an integer in [0, ");
  expect_load_rejected(c, {{"last_step", 2.5}}, "'last_step' must be an integer");
  expect_load_rejected(c, {{"last_step", kNaN}}, "'last_step' must be an integer");
  expect_load_rejected(c, {{"last_step", 1e300}}, "'last_step' must be an integer");

  // Nested: the top-level key is fine, a child's is not -> nothing moves.
  auto s = nested();
  run(*s, 9);
  SchedulerState good = s->state_dict();
  SchedulerState bad = good;
  bad["last_step"] = 3;
  bad["schedulers.0.after.schedulers.1.last_step"] = -4;
  expect_load_rejected(*s, bad, "[SequentialScheduler] load_state_dict: 'schedulers.0.after.schedulers.1.last_step'");
  bad = good;
  bad["last_step"] = 3;
  bad.erase("schedulers.1.last_step");
  expect_load_rejected(*s, bad, "missing key 'schedulers.1.last_step'");
  bad = good;
  bad["last_step"] = 3;
  bad["schedulers.2.last_step"] = 0;
  expect_load_rejected(*s, bad, "unknown key 'schedulers.2.last_step'");

  ReduceOnPlateauScheduler p({.lr = 0.1, .patience = 3, .cooldown = 2});
  p.step(1.0);
  p.step(2.0);
  const SchedulerState pg = p.state_dict();
  auto with = [&](const std::string& key, double v) {
    SchedulerState st = pg;
    st["last_step"] = 7;  // a valid change that must not be applied either
    st[key] = v;
    return st;
  };
  auto without = [&](const std::string& key) {
    SchedulerState st = pg;
    st["last_step"] = 7;
    st.erase(key);
    return st;
  };
  expect_load_rejected(p, with("lr", -0.1), "[ReduceOnPlateauScheduler] load_state_dict: 'lr' must be finite and >= 0");
  expect_load_rejected(p, with("lr", kInf), "'lr' must be finite");
  expect_load_rejected(p, with("best", kNaN), "'best' is NaN");
  expect_load_rejected(p, with("num_bad_epochs", 4), "'num_bad_epochs' must be an integer in [0, 3]");
  expect_load_rejected(p, with("num_bad_epochs", 0.5), "'num_bad_epochs' must be an integer");
  expect_load_rejected(p, with("cooldown_counter", 3), "'cooldown_counter' must be an integer in [0, 2]");
  expect_load_rejected(p, without("best"), "missing key 'best'");
  expect_load_rejected(p, without("cooldown_counter"), "missing key 'cooldown_counter'");
  expect_load_rejected(p, with("momentum", 0.9), "unknown key 'momentum'");
}

// ---- constructor checks ----

TEST(SchedulerOptions, EveryConstructorCheck) {
  EXPECT_KILN_ERROR(ConstantScheduler({.lr = -1}), "[ConstantScheduler] lr must be finite and >= 0, got -1");
  EXPECT_KILN_ERROR(ConstantScheduler({.lr = kNaN}), "[ConstantScheduler] lr must be finite");

  EXPECT_KILN_ERROR(LinearScheduler({.start_lr = -1}), "[LinearScheduler] start_lr must be finite");
  EXPECT_KILN_ERROR(LinearScheduler({.end_lr = kInf}), "[LinearScheduler] end_lr must be finite");
  EXPECT_KILN_ERROR(LinearScheduler({.total_steps = 0}), "[LinearScheduler] total_steps must be >= 1, got 0");

  EXPECT_KILN_ERROR(StepScheduler({.lr = -1}), "[StepScheduler] lr must be finite");
  EXPECT_KILN_ERROR(StepScheduler({.step_size = 0}), "[StepScheduler] step_size must be >= 1, got 0");
  EXPECT_KILN_ERROR(StepScheduler({.gamma = 0}), "[StepScheduler] gamma must be finite and > 0, got 0");

  EXPECT_KILN_ERROR(MultiStepScheduler({.lr = -1}), "[MultiStepScheduler] lr must be finite");
  EXPECT_KILN_ERROR(MultiStepScheduler({.milestones = {2, -1}}), "[MultiStepScheduler] milestones[1] must be >= 0, got -1");
  EXPECT_KILN_ERROR(MultiStepScheduler({.milestones = {3, 3}}), "milestones must be strictly increasing, got 3 after 3");
  EXPECT_KILN_ERROR(MultiStepScheduler({.gamma = -0.5}), "[MultiStepScheduler] gamma must be finite and > 0");

  EXPECT_KILN_ERROR(ExponentialScheduler({.lr = -1}), "[ExponentialScheduler] lr must be finite");
  EXPECT_KILN_ERROR(ExponentialScheduler({.gamma = kNaN}), "[ExponentialScheduler] gamma must be finite and > 0");

  EXPECT_KILN_ERROR(LambdaScheduler(nullptr), "[LambdaScheduler] fn is empty");

  EXPECT_KILN_ERROR(CosineScheduler({.max_lr = -1}), "[CosineScheduler] max_lr must be finite");
  EXPECT_KILN_ERROR(CosineScheduler({.min_lr = -1}), "[CosineScheduler] min_lr must be finite");
  EXPECT_KILN_ERROR(CosineScheduler({.max_lr = 0.1, .min_lr = 0.2}), "[CosineScheduler] min_lr 0.2 must be <= max_lr 0.1");
  EXPECT_KILN_ERROR(CosineScheduler({.total_steps = 0}), "[CosineScheduler] total_steps must be >= 1, got 0");

  EXPECT_KILN_ERROR(CosineWarmRestartsScheduler({.max_lr = kInf}), "[CosineWarmRestartsScheduler] max_lr must be finite");
  EXPECT_KILN_ERROR(CosineWarmRestartsScheduler({.min_lr = -1}), "[CosineWarmRestartsScheduler] min_lr must be finite");
  EXPECT_KILN_ERROR(CosineWarmRestartsScheduler({.max_lr = 0.1, .min_lr = 0.2}), "min_lr 0.2 must be <= max_lr 0.1");
  EXPECT_KILN_ERROR(CosineWarmRestartsScheduler({.t0 = 0}), "[CosineWarmRestartsScheduler] t0 must be >= 1, got 0");
  EXPECT_KILN_ERROR(CosineWarmRestartsScheduler({.t_mult = 0}), "[CosineWarmRestartsScheduler] t_mult must be >= 1, got 0");

  auto cosine = std::make_shared<CosineScheduler>(CosineOptions{});
  EXPECT_KILN_ERROR(WarmupScheduler({.target_lr = -1}, cosine), "[WarmupScheduler] target_lr must be finite");
  EXPECT_KILN_ERROR(WarmupScheduler({.start_lr = -1}, cosine), "[WarmupScheduler] start_lr must be finite");
  EXPECT_KILN_ERROR(WarmupScheduler({.warmup_steps = -1}, cosine), "[WarmupScheduler] warmup_steps must be >= 0, got -1");
  auto plateau = std::make_shared<ReduceOnPlateauScheduler>(ReduceOnPlateauOptions{});
  EXPECT_KILN_ERROR(WarmupScheduler({}, plateau), "[WarmupScheduler] after is a ReduceOnPlateauScheduler");

  EXPECT_KILN_ERROR(LinearWarmupCosineScheduler({.target_lr = -1}), "[LinearWarmupCosineScheduler] target_lr must be finite");
  EXPECT_KILN_ERROR(LinearWarmupCosineScheduler({.min_lr = -1}), "[LinearWarmupCosineScheduler] min_lr must be finite");
  EXPECT_KILN_ERROR(LinearWarmupCosineScheduler({.start_lr = kNaN}), "[LinearWarmupCosineScheduler] start_lr must be finite");
  EXPECT_KILN_ERROR(LinearWarmupCosineScheduler({.target_lr = 0.1, .min_lr = 0.2}),
                    "[LinearWarmupCosineScheduler] min_lr 0.2 must be <= target_lr 0.1");
  EXPECT_KILN_ERROR(LinearWarmupCosineScheduler({.warmup_steps = -2}),
                    "[LinearWarmupCosineScheduler] warmup_steps must be >= 0, got -2");
  EXPECT_KILN_ERROR(LinearWarmupCosineScheduler({.warmup_steps = 10, .total_steps = 10}),
                    "[LinearWarmupCosineScheduler] total_steps 10 must be > warmup_steps 10");

  EXPECT_KILN_ERROR(OneCycleScheduler({.max_lr = 0}), "[OneCycleScheduler] max_lr must be finite and > 0, got 0");
  EXPECT_KILN_ERROR(OneCycleScheduler({.total_steps = 0}), "[OneCycleScheduler] total_steps must be >= 1, got 0");
  EXPECT_KILN_ERROR(OneCycleScheduler({.pct_start = 1.5}), "[OneCycleScheduler] pct_start must be in [0, 1], got 1.5");
  EXPECT_KILN_ERROR(OneCycleScheduler({.pct_start = -0.1}), "[OneCycleScheduler] pct_start must be in [0, 1]");
  EXPECT_KILN_ERROR(OneCycleScheduler({.div_factor = 0}), "[OneCycleScheduler] div_factor must be finite and > 0");
  EXPECT_KILN_ERROR(OneCycleScheduler({.final_div_factor = -1}), "[OneCycleScheduler] final_div_factor must be finite");
  EXPECT_KILN_ERROR(OneCycleScheduler({.base_momentum = -0.1}), "[OneCycleScheduler] base_momentum must be finite");
  EXPECT_KILN_ERROR(OneCycleScheduler({.max_momentum = kNaN}), "[OneCycleScheduler] max_momentum must be finite");
  OneCycleScheduler ok({.cycle_momentum = false, .base_momentum = -1});  // momentum unused: not checked
  // 10 steps * 0.1 = 1: the warmup phase would have no length (PyTorch: ZeroDivisionError at step 0).
  EXPECT_KILN_ERROR(OneCycleScheduler({.total_steps = 10, .pct_start = 0.1}),
                    "[OneCycleScheduler] pct_start 0.1 with total_steps 10 leaves phase 1 of the schedule empty");
  EXPECT_KILN_ERROR(OneCycleScheduler({.total_steps = 20, .pct_start = 0.05, .three_phase = true}),
                    "leaves phase 1 of the schedule empty");
  // pct_start 0: the warmup phase is never reached, PyTorch computes the rest.
  OneCycleScheduler no_warmup({.total_steps = 10, .pct_start = 0.0, .three_phase = true});

  EXPECT_KILN_ERROR(CyclicScheduler({.base_lr = -1}), "[CyclicScheduler] base_lr must be finite");
  EXPECT_KILN_ERROR(CyclicScheduler({.max_lr = kInf}), "[CyclicScheduler] max_lr must be finite");
  EXPECT_KILN_ERROR(CyclicScheduler({.step_size_up = 0}), "[CyclicScheduler] step_size_up must be >= 1, got 0");
  EXPECT_KILN_ERROR(CyclicScheduler({.step_size_down = -1}), "[CyclicScheduler] step_size_down must be >= 0, got -1");
  EXPECT_KILN_ERROR(CyclicScheduler({.mode = CyclicMode::ExpRange, .gamma = 0}),
                    "[CyclicScheduler] gamma must be in (0, 1] for mode ExpRange, got 0");
  EXPECT_KILN_ERROR(CyclicScheduler({.mode = CyclicMode::ExpRange, .gamma = 1.01}), "gamma must be in (0, 1]");
  EXPECT_KILN_ERROR(CyclicScheduler({.mode = CyclicMode::ExpRange, .gamma = kNaN}), "gamma must be in (0, 1]");
  CyclicScheduler triangular_ignores_gamma({.gamma = 0});
  EXPECT_KILN_ERROR(CyclicScheduler({.cycle_momentum = true, .base_momentum = -1}), "[CyclicScheduler] base_momentum must be finite");
  EXPECT_KILN_ERROR(CyclicScheduler({.cycle_momentum = true, .max_momentum = kInf}), "[CyclicScheduler] max_momentum must be finite");

  auto lin = std::make_shared<LinearScheduler>(LinearOptions{});
  using Children = std::vector<std::shared_ptr<LRScheduler>>;
  EXPECT_KILN_ERROR(SequentialScheduler({}, {}), "[SequentialScheduler] schedulers is empty");
  EXPECT_KILN_ERROR(SequentialScheduler(Children{lin, nullptr}, {3}), "[SequentialScheduler] schedulers[1] is null");
  EXPECT_KILN_ERROR(SequentialScheduler(Children{plateau}, {}), "[SequentialScheduler] schedulers[0] is a ReduceOnPlateauScheduler");
  EXPECT_KILN_ERROR(SequentialScheduler(Children{lin, cosine}, {}),
                    "[SequentialScheduler] needs one milestone fewer than schedulers: got 2 schedulers and 0 milestones");
  EXPECT_KILN_ERROR(SequentialScheduler(Children{lin, cosine}, {0}), "[SequentialScheduler] milestones[0] must be > 0, got 0");
  EXPECT_KILN_ERROR(SequentialScheduler(Children{lin, cosine, lin}, {5, 5}),
                    "[SequentialScheduler] milestones must be strictly increasing, got 5 after 5");

  EXPECT_KILN_ERROR(ReduceOnPlateauScheduler({.lr = -1}), "[ReduceOnPlateauScheduler] lr must be finite");
  EXPECT_KILN_ERROR(ReduceOnPlateauScheduler({.factor = 1.0}), "[ReduceOnPlateauScheduler] factor must be in [0, 1), got 1");
  EXPECT_KILN_ERROR(ReduceOnPlateauScheduler({.factor = -0.5}), "[ReduceOnPlateauScheduler] factor must be in [0, 1)");
  EXPECT_KILN_ERROR(ReduceOnPlateauScheduler({.patience = -1}), "[ReduceOnPlateauScheduler] patience must be >= 0, got -1");
  EXPECT_KILN_ERROR(ReduceOnPlateauScheduler({.threshold = -1e-4}), "[ReduceOnPlateauScheduler] threshold must be finite and >= 0");
  EXPECT_KILN_ERROR(ReduceOnPlateauScheduler({.cooldown = -1}), "[ReduceOnPlateauScheduler] cooldown must be >= 0, got -1");
  EXPECT_KILN_ERROR(ReduceOnPlateauScheduler({.min_lr = -1}), "[ReduceOnPlateauScheduler] min_lr must be finite");
  EXPECT_KILN_ERROR(ReduceOnPlateauScheduler({.eps = kNaN}), "[ReduceOnPlateauScheduler] eps must be finite and >= 0");
}

// ---- apply(Optimizer&) and step(Optimizer&) against the real optimizers ----

// Two groups, the second at half the lr (lr_scale), all f64 parameters.
std::vector<ParamGroup> two_groups() {
  nn::Parameter a(tensor<double>({1.0, -2.0}));
  nn::Parameter b(tensor<double>({0.5, 3.0, -1.0}));
  return {{nn::ParameterList({a})}, {nn::ParameterList({b}), {{"lr_scale", 0.5}}}};
}

TEST(SchedulerApply, LrGoesToEveryGroupTimesItsLrScale) {
  SGD opt(two_groups(), {.lr = 1.0, .momentum = 0.9});
  CosineScheduler sched({.max_lr = 0.2, .min_lr = 0.02, .total_steps = 8});
  sched.apply(opt);
  EXPECT_EQ(opt.lr(0), 0.2);
  EXPECT_EQ(opt.lr(1), 0.1);
  for (int64_t k = 1; k <= 10; ++k) {
    EXPECT_EQ(sched.step(opt), sched.lr(k));
    EXPECT_EQ(opt.lr(0), sched.lr(k));
    EXPECT_EQ(opt.lr(1), sched.lr(k) * 0.5);
    EXPECT_EQ(opt.get("momentum", 0), 0.9);  // not cycled: untouched
    EXPECT_EQ(opt.get("momentum", 1), 0.9);
  }
}

// The whole chain against PyTorch: a torch SGD driven by OneCycleLR/CyclicLR
// has these param_groups[0] lr and momentum at each step.
void expect_optimizer_follows_torch(const std::string& name, Optimizer& opt, const char* momentum_option) {
  SCOPED_TRACE(name);
  const json& c = golden_case(name);
  auto sched = from_torch(c);
  const auto lrs = c["lr"].get<std::vector<double>>();
  const auto moms = c["momentum"].get<std::vector<double>>();
  sched->apply(opt);
  for (size_t k = 0; k < lrs.size(); ++k) {
    if (k > 0) sched->step(opt);
    EXPECT_TRUE(near_rel(opt.lr(0), lrs[k])) << k;
    EXPECT_TRUE(near_rel(opt.lr(1), lrs[k] * 0.5)) << k;
    EXPECT_TRUE(near_rel(opt.get(momentum_option, 0), moms[k])) << k;
    EXPECT_TRUE(near_rel(opt.get(momentum_option, 1), moms[k])) << k;
  }
}

TEST(SchedulerApply, CycledMomentumGoesToSgdMomentum) {
  SGD sgd(two_groups(), {.lr = 1.0, .momentum = 0.5});
  expect_optimizer_follows_torch("one_cycle_cos", sgd, "momentum");
  SGD sgd2(two_groups(), {.lr = 1.0});
  expect_optimizer_follows_torch("cyclic_triangular2", sgd2, "momentum");
}

TEST(SchedulerApply, CycledMomentumGoesToAdamBeta1) {
  Adam adam(two_groups(), {.lr = 1.0, .beta2 = 0.99});
  expect_optimizer_follows_torch("one_cycle_linear_three_phase", adam, "beta1");
  EXPECT_EQ(adam.get("beta2"), 0.99);
  AdamW adamw(two_groups(), {.lr = 1.0});
  expect_optimizer_follows_torch("cyclic_exp_range", adamw, "beta1");
}

TEST(SchedulerApply, TheScheduledLrIsTheOneTheUpdateUses) {
  // SGD without momentum on loss = sum(p^2): p <- p - lr * 2p with lr from the schedule.
  nn::Parameter p(tensor<double>({1.0, -2.0}));
  SGD opt(std::vector<ParamGroup>{{nn::ParameterList({p})}}, {.lr = 123.0});
  StepScheduler sched({.lr = 0.1, .step_size = 2, .gamma = 0.5});
  sched.apply(opt);
  std::vector<double> expect = {1.0, -2.0};
  for (int k = 0; k < 5; ++k) {
    sum(mul(p.value(), p.value())).backward();
    opt.step();
    opt.zero_grad();
    for (double& v : expect) v -= sched.get_lr() * 2 * v;
    const auto got = p.value().to_vector<double>();  // the fused kernel may round a*b+c once
    for (size_t i = 0; i < expect.size(); ++i) EXPECT_TRUE(near_rel(got[i], expect[i], 1e-15)) << k;
    sched.step(opt);
  }
}

TEST(SchedulerApply, ErrorsLeaveTheOptimizerUnchanged) {
  // Cycled momentum into an optimizer without momentum or beta1.
  NoOp noop(nn::ParameterList({nn::Parameter(tensor<double>({1.0}))}));
  OneCycleScheduler one({.max_lr = 1.0, .total_steps = 10});
  EXPECT_KILN_ERROR(one.apply(noop), "[OneCycleScheduler] apply: this schedule cycles momentum but NoOp has neither");
  // A momentum the optimizer rejects (Adam's beta1 must be < 1): neither changes.
  Adam adam(two_groups(), {.lr = 0.01, .beta1 = 0.9});
  OneCycleScheduler bad({.max_lr = 1.0, .total_steps = 10, .max_momentum = 1.0});
  EXPECT_KILN_ERROR(bad.apply(adam), "beta1");
  EXPECT_EQ(adam.lr(0), 0.01);
  EXPECT_EQ(adam.get("beta1"), 0.9);
  // Plateau moves only with a metric.
  SGD sgd(two_groups(), {.lr = 0.5});
  ReduceOnPlateauScheduler plateau({.lr = 0.1, .factor = 0.5, .patience = 0});
  EXPECT_KILN_ERROR(plateau.step(sgd), "[ReduceOnPlateauScheduler] step() needs the metric");
  EXPECT_EQ(sgd.lr(0), 0.5);
  EXPECT_EQ(plateau.step(1.0, sgd), 0.1);
  EXPECT_EQ(sgd.lr(1), 0.05);
  EXPECT_EQ(plateau.step(2.0, sgd), 0.05);
  EXPECT_EQ(sgd.lr(0), 0.05);
  EXPECT_EQ(sgd.lr(1), 0.025);
}

}  // namespace
}  // namespace kiln::optim
