// Optimizers against PyTorch 1.13 (O1-O5): 50-step parameter trajectories
// replayed from PyTorch's own gradients (tools/goldens/optim.py), then state,
// groups, freezing, decay flags, the no-op optimizer and every error path.
#include <gtest/gtest.h>

#include <memory>

#include "kiln/optim/adam.h"
#include "kiln/optim/muon.h"
#include "kiln/optim/noop.h"
#include "kiln/optim/sgd.h"
#include "tests/support/optim_testing.h"

namespace kiln::optim {
namespace {
using namespace testing;

// The golden model's parameters: w1 [3, 2], b1 [3] (decay off), w2 [2, 3].
struct Tiny : nn::Module {
  nn::Parameter w1, b1, w2;
  Tiny(const Tensor& a, const Tensor& b, const Tensor& c)
      : w1(register_parameter("w1", a)), b1(register_parameter("b1", b, /*decay=*/false)),
        w2(register_parameter("w2", c)) {}
  explicit Tiny(DType dtype = kF32, uint64_t seed = 0) : Tiny(Tiny::draw(dtype, seed)) {}
  Tiny(Tiny&&) = default;
  static Tiny draw(DType dtype, uint64_t seed) {
    Generator gen(seed);
    Tensor a = randn({3, 2}, gen).to(dtype), b = randn({3}, gen).to(dtype), c = randn({2, 3}, gen).to(dtype);
    return Tiny(a, b, c);
  }
  Tensor flat() const { return cat({w1.value().reshape({-1}), b1.value(), w2.value().reshape({-1})}, 0); }
};

std::unique_ptr<Optimizer> make(const std::string& kind, std::vector<ParamGroup> groups) {
  if (kind == "SGD") return std::make_unique<SGD>(std::move(groups));
  if (kind == "Adam") return std::make_unique<Adam>(std::move(groups));
  if (kind == "AdamW") return std::make_unique<AdamW>(std::move(groups));
  if (kind == "Muon") return std::make_unique<Muon>(std::move(groups));
  throw std::runtime_error("unknown optimizer " + kind);
}

// Gradients for (w1, b1, w2) from one row of a flattened [15] golden row.
nn::Gradients split_row(const Tiny& m, const Tensor& row) {
  return nn::Gradients(m.parameters(), {contiguous(row.slice(0, 0, 6).reshape({3, 2})), contiguous(row.slice(0, 6, 9)),
                                        contiguous(row.slice(0, 9, 15).reshape({2, 3}))});
}

struct Replay {
  Tiny model;
  std::unique_ptr<Optimizer> opt;
};

Replay start(const nlohmann::json& c) {
  Replay r{Tiny(golden_tensor(c["init"][0]), golden_tensor(c["init"][1]), golden_tensor(c["init"][2])), nullptr};
  std::map<std::string, double> all = c["options"], bias = all;
  for (auto& [k, v] : c["bias_options"].items()) bias[k] = v;
  // Two groups as on the PyTorch side; the bias's decay comes from its flag.
  nn::ParameterList params = r.model.parameters();
  auto is_bias = [](const std::string& n, const nn::Parameter&) { return n == "b1"; };
  auto not_bias = [](const std::string& n, const nn::Parameter&) { return n != "b1"; };
  r.opt = make(c["optimizer"], {{params.filter(not_bias), all}, {params.filter(is_bias), bias}});
  return r;
}

class Trajectory : public ::testing::TestWithParam<std::string> {};

TEST_P(Trajectory, MatchesPyTorchOver50Steps) {
  for_each_kernel_isa([&](KernelIsa) {
    const nlohmann::json& c = golden("optim_trajectories")[GetParam()];
    Replay r = start(c);
    Tensor grads = golden_tensor(c["grads"]), params = golden_tensor(c["params"]);
    std::vector<int> checkpoints = c["checkpoints"];
    // Muon's Newton-Schulz matmuls round differently from PyTorch's.
    double rtol = c["optimizer"] == "Muon" ? 1e-5 : 1e-6;
    size_t next = 0;
    for (int step = 1; step <= int(grads.size(0)); ++step) {
      r.opt->step(split_row(r.model, grads.select(0, step - 1)));
      if (next < checkpoints.size() && checkpoints[next] == step) {
        EXPECT_TRUE(all_close(r.model.flat(), params.select(0, int64_t(next)), rtol, 1e-7)) << "after step " << step;
        ++next;
      }
    }
    EXPECT_EQ(next, checkpoints.size());
    EXPECT_EQ(r.opt->step_count(), 50);
  });
}

// End to end: kiln computes its own gradients on the same batch, so its
// autograd's rounding compounds over the 50 steps too.
TEST_P(Trajectory, MatchesPyTorchEndToEnd) {
  const nlohmann::json& c = golden("optim_trajectories")[GetParam()];
  Replay r = start(c);
  Tensor x = golden_tensor(c["x"]), y = golden_tensor(c["y"]), params = golden_tensor(c["params"]);
  for (int step = 0; step < 50; ++step) {
    auto [loss, grads] = kiln::value_and_grad(r.model, [&](Tiny& t) {
      Tensor h = tanh(add(matmul(x, t.w1.value().t()), t.b1.value()));
      return mean(pow(sub(matmul(h, t.w2.value().t()), y), 2));
    });
    r.opt->step(grads);
  }
  // Gradient ascent (maximize) amplifies the rounding differences it starts from.
  double rtol = c["options"].contains("maximize") ? 1e-3 : 1e-4;
  EXPECT_TRUE(all_close(r.model.flat(), params.select(0, params.size(0) - 1), rtol, 1e-5));
}

INSTANTIATE_TEST_SUITE_P(Optim, Trajectory,
                         ::testing::Values("sgd", "sgd_momentum", "sgd_nesterov_maximize", "adam", "adam_l2_amsgrad",
                                           "adam_groups", "adamw", "adamw_amsgrad_maximize", "muon", "muon_rms"));

// step() from live .grad() equals step(grads), bit for bit.
TEST(Optimizer, LiveGradsEqualGradients) {
  const nlohmann::json& c = golden("optim_trajectories")["adamw"];
  Replay a = start(c), b = start(c);
  Tensor grads = golden_tensor(c["grads"]);
  for (int64_t s = 0; s < 10; ++s) {
    nn::Gradients g = split_row(a.model, grads.select(0, s));
    a.opt->step(g);
    for (size_t i = 0; i < 3; ++i) b.model.parameters()[i].value().set_grad(clone(g[i]));
    b.opt->step();
    b.opt->zero_grad();
  }
  EXPECT_TRUE(equal(a.model.flat(), b.model.flat()));
}

TEST(Optimizer, StateIsAllocatedLazilyAndOnlyWhenNeeded) {
  Tiny m;
  auto grads = nn::Gradients(m.parameters(), {ones({3, 2}), ones({3}), ones({2, 3})});
  SGD plain(m.parameters(), {.lr = 0.1});
  plain.step(grads);
  for (const nn::Parameter& p : m.parameters()) EXPECT_TRUE(p.states().empty());  // plain SGD keeps nothing

  SGD momentum(m.parameters(), {.lr = 0.1, .momentum = 0.9});
  EXPECT_TRUE(m.w1.states().empty());
  momentum.step(grads);
  EXPECT_EQ(m.w1.states().size(), 1u);
  EXPECT_TRUE(m.w1.state("momentum_buffer").defined());

  AdamW adamw(m.parameters());  // a new optimizer starts fresh
  EXPECT_TRUE(m.w1.states().empty());
  adamw.step(grads);
  EXPECT_EQ(m.w1.state("step").item<int64_t>(), 1);
  EXPECT_TRUE(m.w1.state("exp_avg").defined());
  EXPECT_TRUE(m.w1.state("exp_avg_sq").defined());
  EXPECT_FALSE(m.w1.states().count("max_exp_avg_sq"));  // only with amsgrad
}

TEST(Optimizer, SkipsFrozenParametersAndMissingGrads) {
  Tiny m;
  m.w2.requires_grad_(false);
  Tensor w2 = clone(m.w2.value()), b1 = clone(m.b1.value());
  Adam opt(m.parameters(), {.lr = 0.1});
  m.w1.value().set_grad(ones({3, 2}));  // b1 has no grad; w2 is frozen
  opt.step();
  EXPECT_TRUE(equal(m.w2.value(), w2));
  EXPECT_TRUE(equal(m.b1.value(), b1));
  EXPECT_TRUE(m.w2.states().empty());
  EXPECT_TRUE(m.b1.states().empty());
  EXPECT_EQ(m.w1.state("step").item<int64_t>(), 1);
  // value_and_grad gives frozen parameters an undefined gradient: skipped too.
  auto [loss, grads] = kiln::value_and_grad(m, [](Tiny& t) { return sum(t.w1.value()) + sum(t.b1.value()); });
  opt.step(grads);
  EXPECT_TRUE(equal(m.w2.value(), w2));
  EXPECT_EQ(m.b1.state("step").item<int64_t>(), 1);
}

TEST(Optimizer, WeightDecaySkipsParametersWithDecayOff) {
  for (bool adamw : {false, true}) {
    Tiny m;
    m.w1.set_decay(false);
    Tensor w1 = clone(m.w1.value()), w2 = clone(m.w2.value());
    auto zero = nn::Gradients(m.parameters(), {zeros({3, 2}), zeros({3}), zeros({2, 3})});
    std::unique_ptr<Optimizer> opt;
    if (adamw) opt = std::make_unique<AdamW>(m.parameters(), AdamWOptions{.lr = 0.1, .weight_decay = 0.5});
    else opt = std::make_unique<SGD>(m.parameters(), SGDOptions{.lr = 0.1, .weight_decay = 0.5});
    opt->step(zero);
    EXPECT_TRUE(equal(m.w1.value(), w1)) << "decay off: a zero gradient leaves it";
    // decay on: p * (1 - lr * wd) for both (SGD: p - lr * wd * p).
    EXPECT_TRUE(all_close(m.w2.value(), w2 * 0.95, 1e-6, 0));
  }
}

TEST(Optimizer, StepCountAndZeroGrad) {
  Tiny m;
  SGD opt(m.parameters(), {.lr = 0.1});
  EXPECT_EQ(opt.step_count(), 0);
  m.w1.value().set_grad(ones({3, 2}));
  opt.step();
  opt.step();
  EXPECT_EQ(opt.step_count(), 2);
  opt.zero_grad(/*set_to_none=*/false);
  EXPECT_TRUE(equal(m.w1.grad(), zeros({3, 2})));
  opt.zero_grad();
  EXPECT_FALSE(m.w1.grad().defined());
}

TEST(Optimizer, OptionsByNameAndLrScale) {
  Tiny m;
  SGD opt({{nn::ParameterList({m.w1, m.w2})}, {nn::ParameterList({m.b1}), {{"lr", 0.5}, {"lr_scale", 0.1}}}},
          {.lr = 0.01, .momentum = 0.9});
  EXPECT_EQ(opt.num_groups(), 2u);
  EXPECT_DOUBLE_EQ(opt.lr(0), 0.01);
  EXPECT_DOUBLE_EQ(opt.lr(1), 0.5);
  EXPECT_DOUBLE_EQ(opt.get("momentum", 1), 0.9);
  EXPECT_DOUBLE_EQ(opt.options(1).momentum, 0.9);
  EXPECT_TRUE(opt.has_option("nesterov"));
  EXPECT_FALSE(opt.has_option("beta1"));
  opt.apply_lr(0.2);
  EXPECT_DOUBLE_EQ(opt.lr(0), 0.2);
  EXPECT_DOUBLE_EQ(opt.lr(1), 0.2 * 0.1);
  opt.set("nesterov", 1);
  EXPECT_TRUE(opt.options(0).nesterov && opt.options(1).nesterov);
  // A value one group rejects changes no group.
  opt.set(1, "momentum", 0.0 + 0.5);
  opt.set("nesterov", 0);
  opt.set(1, "dampening", 0.5);
  EXPECT_KILN_ERROR(opt.set("nesterov", 1), "Nesterov momentum needs");
  EXPECT_FALSE(opt.options(0).nesterov);
  EXPECT_FALSE(opt.options(1).nesterov);
}

TEST(Optimizer, RejectsBadOptions) {
  Tiny m;
  EXPECT_KILN_ERROR(SGD(m.parameters(), {.lr = -1}), "[SGD] lr must be finite and >= 0, got -1");
  EXPECT_KILN_ERROR(SGD(m.parameters(), {.nesterov = true}), "Nesterov momentum needs momentum > 0");
  EXPECT_KILN_ERROR(Adam(m.parameters(), {.beta1 = 1.0}), "[Adam] beta1 must be in [0, 1), got 1");
  EXPECT_KILN_ERROR(AdamW(m.parameters(), {.eps = -1e-8}), "[AdamW] eps must be finite and >= 0");
  EXPECT_KILN_ERROR(Muon(m.parameters(), {.ns_steps = 0}), "[Muon] ns_steps must be in [1, 100], got 0");
  EXPECT_KILN_ERROR(Adam({{m.parameters(), {{"betas", 0.9}}}}), "[Adam] param group 0: unknown option 'betas' "
                                                                   "(options: lr, beta1, beta2, eps, weight_decay");
  EXPECT_KILN_ERROR(Adam({{m.parameters(), {{"amsgrad", 0.5}}}}), "option 'amsgrad' is a flag (0 or 1), got 0.5");
  EXPECT_KILN_ERROR(Muon({{m.parameters(), {{"ns_steps", 2.5}}}}), "option 'ns_steps' is an integer, got 2.5");
  EXPECT_KILN_ERROR(SGD({{m.parameters(), {{"lr_scale", -1}}}}), "lr_scale must be finite and >= 0");
  EXPECT_KILN_ERROR(SGD(nn::ParameterList()), "[SGD] got no parameters to optimize");
  EXPECT_KILN_ERROR(SGD({{nn::ParameterList({m.w1})}, {nn::ParameterList({m.w1})}}),
                    "parameter '#0' appears twice");
  Adam opt(m.parameters());
  EXPECT_KILN_ERROR(opt.set("momentum", 0.9), "unknown option 'momentum'");
  EXPECT_KILN_ERROR(opt.set("beta2", 2.0), "beta2 must be in [0, 1), got 2");
  EXPECT_DOUBLE_EQ(opt.get("beta2"), 0.999);
  EXPECT_KILN_ERROR(opt.get("lr", 3), "param group 3 out of range (1 groups)");
  EXPECT_KILN_ERROR(opt.apply_lr(-0.1), "learning rate must be finite and >= 0");
  Tiny b(kBF16);
  EXPECT_KILN_ERROR(SGD(b.parameters()), "parameter 'w1' is bf16: optimizers update f32 and f64 parameters");
}

// A bad gradient anywhere leaves every parameter and state untouched.
TEST(Optimizer, BadGradientsChangeNothing) {
  Tiny m, other;
  Adam opt(m.parameters(), {.lr = 0.1});
  Tensor before = m.flat();
  m.w1.value().set_grad(ones({3, 2}));  // w1 has a live gradient; b1 and w2 get a bad one below
  EXPECT_KILN_ERROR(opt.step(nn::Gradients(m.parameters(), {ones({3, 2}), ones({3}), ones({3, 2})})),
                    "[Gradients] gradient [3, 2] for 'w2' does not match the parameter [2, 3]");
  EXPECT_KILN_ERROR(opt.step(nn::Gradients(m.parameters(), {ones({3, 2}), ones({3}, {.dtype = kF64}), ones({2, 3})})),
                    "gradient for parameter 'b1' is [3] f64");
  auto [loss, foreign] = kiln::value_and_grad(other, [](Tiny& t) { return sum(t.flat()); });
  EXPECT_KILN_ERROR(opt.step(foreign), "the gradients do not include parameter 'w1' [3, 2]");
  EXPECT_TRUE(equal(m.flat(), before));
  EXPECT_TRUE(m.w1.states().empty());
  EXPECT_EQ(opt.step_count(), 0);
}

// M9: the module was edited after the optimizer took its parameters.
TEST(Optimizer, RejectsAnEditedModule) {
  Tiny m;
  SGD opt(m.parameters());
  m.register_parameter("extra", zeros({2}));
  EXPECT_KILN_ERROR(opt.step(), "[SGD] module '<root>' was edited");
}

TEST(Optimizer, StateDictResumesExactly) {
  const nlohmann::json& c = golden("optim_trajectories")["adam_l2_amsgrad"];
  Tensor grads = golden_tensor(c["grads"]);
  Replay a = start(c);
  for (int64_t s = 0; s < 10; ++s) a.opt->step(split_row(a.model, grads.select(0, s)));
  nn::StateDict weights = a.model.state_dict(), state = a.opt->state_dict();
  EXPECT_EQ(state.at("step").item<int64_t>(), 10);
  EXPECT_DOUBLE_EQ(state.at("param_groups.1.lr").item<double>(), 0.01);
  EXPECT_TRUE(state.contains("w1.exp_avg") && state.contains("b1.max_exp_avg_sq") && state.contains("w2.step"));
  for (int64_t s = 10; s < 20; ++s) a.opt->step(split_row(a.model, grads.select(0, s)));

  // A fresh model and optimizer (same groups, other options) restored from the snapshot.
  Tiny m2;
  m2.load_state_dict(weights);
  nn::ParameterList all = m2.parameters();
  Adam opt2({{all.filter([](auto& n, auto&) { return n != "b1"; })}, {all.filter([](auto& n, auto&) { return n == "b1"; })}},
            {.lr = 0.5});
  opt2.load_state_dict(state);
  EXPECT_DOUBLE_EQ(opt2.lr(1), 0.01);
  EXPECT_TRUE(opt2.options(0).amsgrad);
  for (int64_t s = 10; s < 20; ++s) opt2.step(split_row(m2, grads.select(0, s)));
  EXPECT_TRUE(equal(m2.flat(), a.model.flat()));
  EXPECT_TRUE(equal(m2.w1.state("exp_avg_sq"), a.model.w1.state("exp_avg_sq")));
  EXPECT_EQ(opt2.step_count(), 20);
}

// A state that does not fit is rejected whole: options, moments and step count stay.
TEST(Optimizer, LoadStateDictValidatesFirst) {
  Tiny m;
  Adam opt(m.parameters(), {.lr = 0.1});
  opt.step(nn::Gradients(m.parameters(), {ones({3, 2}), ones({3}), ones({2, 3})}));
  nn::StateDict good = opt.state_dict();
  auto with = [&](const std::string& key, const Tensor& value) {
    nn::StateDict s = good;
    s.insert_or_assign(key, value);
    return s;
  };
  auto without = [&](const std::string& key) {
    nn::StateDict s = good;
    s.erase(key);
    return s;
  };
  Tensor moment = clone(m.w1.state("exp_avg"));
  EXPECT_KILN_ERROR(opt.load_state_dict(with("w1.exp_avg", zeros({2, 3}))),
                    "[Adam] load_state_dict: 'w1.exp_avg' is [2, 3] f32 but parameter 'w1' is [3, 2] f32");
  EXPECT_KILN_ERROR(opt.load_state_dict(with("w1.momentum_buffer", zeros({3, 2}))),
                    "unexpected key 'w1.momentum_buffer' (not a parameter state of this optimizer; states it keeps: "
                    "step, exp_avg, exp_avg_sq, max_exp_avg_sq)");
  EXPECT_KILN_ERROR(opt.load_state_dict(with("param_groups.1.lr", scalar_tensor(0.1, {.dtype = kF64}))),
                    "unexpected key 'param_groups.1.lr' (this optimizer has 1 param groups");
  EXPECT_KILN_ERROR(opt.load_state_dict(without("param_groups.0.eps")), "missing 'param_groups.0.eps'");
  EXPECT_KILN_ERROR(opt.load_state_dict(with("step", scalar_tensor(3.0, {.dtype = kF64}))),
                    "'step' must be a i64 scalar, got [] f64");
  EXPECT_KILN_ERROR(opt.load_state_dict(with("param_groups.0.lr", scalar_tensor(0.5, {.dtype = kF64}))
                                            .size() ? with("param_groups.0.beta1", scalar_tensor(1.5, {.dtype = kF64}))
                                                    : good),
                    "invalid option value: [Adam] beta1 must be in [0, 1), got 1.5");
  EXPECT_DOUBLE_EQ(opt.lr(), 0.1);
  EXPECT_DOUBLE_EQ(opt.get("beta1"), 0.9);
  EXPECT_TRUE(equal(m.w1.state("exp_avg"), moment));
  EXPECT_EQ(opt.step_count(), 1);
  // Loading copies: the optimizer never aliases the dict's tensors.
  opt.load_state_dict(good);
  opt.step(nn::Gradients(m.parameters(), {ones({3, 2}), ones({3}), ones({2, 3})}));
  EXPECT_TRUE(equal(good.at("w1.exp_avg"), moment));
}

// After the first step (which allocates the moments) a step of SGD or the
// Adams allocates no tensor at all.
TEST(Optimizer, SteadyStateStepsAllocateNothing) {
  Tiny m;
  nn::Gradients grads(m.parameters(), {ones({3, 2}), ones({3}), ones({2, 3})});
  SGD sgd(m.parameters(), {.lr = 0.1, .momentum = 0.9, .nesterov = true});
  sgd.step(grads);
  int64_t before = memory_stats().alloc_count;
  for (int i = 0; i < 5; ++i) sgd.step(grads);
  EXPECT_EQ(memory_stats().alloc_count, before);
  AdamW adamw(m.parameters(), {.amsgrad = true});
  adamw.step(grads);
  before = memory_stats().alloc_count;
  for (int i = 0; i < 5; ++i) adamw.step(grads);
  EXPECT_EQ(memory_stats().alloc_count, before);
}

// docs/optim.md's recipe: Muon on the hidden matrices, AdamW on the rest.
TEST(Optimizer, MuonAndAdamWOnDisjointSetsTrainAModel) {
  Rngs rngs(0);
  nn::Sequential model(nn::Linear(4, 32, rngs), nn::Tanh(), nn::Linear(32, 32, rngs), nn::Tanh(),
                       nn::Linear(32, 1, rngs));
  auto all = model.parameters();
  auto hidden = [](const std::string& n, const nn::Parameter& p) { return p.value().dim() == 2 && n != "4.weight"; };
  Muon muon(all.filter(hidden), {.lr = 0.02});
  AdamW adamw(all.filter([&](const std::string& n, const nn::Parameter& p) { return !hidden(n, p); }), {.lr = 1e-2});
  EXPECT_EQ(muon.params().size() + adamw.params().size(), all.size());
  EXPECT_EQ(muon.params().names(), (std::vector<std::string>{"0.weight", "2.weight"}));
  Generator gen(1);
  Tensor x = randn({64, 4}, gen), y = sum(x * x, {1}, true) * 0.25;
  double first = 0, last = 0;
  for (int step = 0; step < 200; ++step) {
    auto [loss, grads] = kiln::value_and_grad(model, [&](nn::Sequential& s) { return mse_loss(s.forward(x), y); });
    muon.step(grads);
    adamw.step(grads);
    (step == 0 ? first : last) = loss.item<float>();
  }
  EXPECT_LT(last, first * 0.05) << "first " << first << " last " << last;
}

TEST(Optimizer, NoOpOnlyCounts) {
  Tiny m;
  Tensor before = m.flat();
  NoOp opt(m.parameters(), {.lr = 0.1});
  m.w1.value().set_grad(ones({3, 2}));
  opt.step();
  EXPECT_EQ(opt.step_count(), 1);
  EXPECT_TRUE(equal(m.flat(), before));
  opt.apply_lr(0.3);
  EXPECT_DOUBLE_EQ(opt.lr(), 0.3);
  opt.zero_grad();
  EXPECT_FALSE(m.w1.grad().defined());
  NoOp empty;  // nothing to update at all: still a valid Optimizer&
  empty.step();
  EXPECT_EQ(empty.step_count(), 1);
}

// Muon's orthogonalised step does not depend on the gradient's scale; other
// ranks take the plain momentum step.
TEST(Optimizer, MuonNormalisesRank2Updates) {
  std::vector<Tensor> results;
  for (double gscale : {1.0, 1000.0}) {
    Tiny m(kF64, 7);
    Tensor b1 = clone(m.b1.value()), w1 = clone(m.w1.value());
    Muon opt(m.parameters(), {.lr = 0.1, .momentum = 0.5, .nesterov = false});
    Generator gen(3);
    Tensor g = randn({3, 2}, gen, {.dtype = kF64}) * gscale;
    opt.step(nn::Gradients(m.parameters(), {g, ones({3}, {.dtype = kF64}) * gscale, zeros({2, 3}, {.dtype = kF64})}));
    // momentum 0.5 from zeros: buf = 0.5 g. The bias takes the plain momentum step.
    EXPECT_TRUE(all_close(m.b1.value(), b1 - 0.1 * 0.5 * gscale, 1e-12, 1e-12));
    // w1 [3, 2] is tall: scale sqrt(3 / 2).
    Tensor expected = w1 - newton_schulz5(g * 0.5) * (0.1 * std::sqrt(1.5));
    EXPECT_TRUE(all_close(m.w1.value(), expected, 1e-12, 1e-12)) << "gradient scale " << gscale;
    results.push_back(m.w1.value());
  }
  // The direction does not depend on the gradient's scale (up to NS5's eps).
  EXPECT_TRUE(all_close(results[0], results[1], 1e-6, 1e-9));
}

// Largest eigenvalue of a symmetric positive semi-definite matrix, by power iteration.
double top_eigenvalue(const Tensor& a) {
  Tensor v = ones({a.size(0), 1}, {.dtype = a.dtype()});
  for (int i = 0; i < 500; ++i) v = matmul(a, v) / norm(matmul(a, v));
  return sum(v * matmul(a, v)).item<double>();
}

// NS5 maps a matrix to one with the same singular vectors and singular values
// near 1 (about [0.7, 1.2] for Jordan's coefficients).
TEST(Optimizer, NewtonSchulzOrthogonalises) {
  Generator gen(11);
  Tensor u = randn({16, 48}, gen, {.dtype = kF64});
  Tensor id = eye(16, -1, {.dtype = kF64});
  auto spectrum = [&](const Tensor& x) {  // extreme eigenvalues of x x^T: x's squared singular values
    Tensor gram = matmul(x, transpose(x, 0, 1));
    double hi = top_eigenvalue(gram);
    return std::pair{hi - top_eigenvalue(id * hi - gram), hi};
  };
  auto [lo0, hi0] = spectrum(u / norm(u));
  EXPECT_LT(lo0 / hi0, 0.2);  // ill-conditioned before
  auto [lo, hi] = spectrum(newton_schulz5(u));
  EXPECT_GT(lo, 0.4);
  EXPECT_LT(hi, 1.45);
  // And for a tall input (iterated on its transpose).
  auto [lo_t, hi_t] = spectrum(transpose(newton_schulz5(transpose(u, 0, 1)), 0, 1));
  EXPECT_NEAR(lo_t, lo, 1e-9);
  EXPECT_NEAR(hi_t, hi, 1e-9);
  Tensor bad = zeros({2, 3, 4});
  EXPECT_KILN_ERROR(newton_schulz5(bad), "[newton_schulz5] expects a rank-2 tensor, got [2, 3, 4]");
}

}  // namespace
}  // namespace kiln::optim
