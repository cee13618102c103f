// nn::MoE (docs/moe.md) against the dense PyTorch oracle (tools/goldens/moe.py,
// tests/goldens/moe.json), gradchecks in f64, determinism, the balancing
// losses and bias, the telemetry and the errors.
#include "kiln/nn/moe.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kiln/core/parallel.h"
#include "kiln/ops/moe.h"
#include "tests/nn/layer_testing.h"

namespace kiln::nn {
namespace {
using namespace testing;

// tools/goldens/moe.py's moe_value: exact 24-bit values times scale.
std::vector<double> moe_value(int64_t count, uint64_t seed, double scale) {
  std::vector<double> v(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) {
    const uint64_t h = (uint64_t(i) * 2654435761ull + seed * 40503ull + 12345ull) % (1ull << 32);
    v[size_t(i)] = (double(h >> 8) / double(1 << 24) - 0.5) * scale;
  }
  return v;
}

Tensor value_tensor(const Shape& shape, uint64_t seed, double scale, DType dtype) {
  return tensor<double>(moe_value(numel(shape), seed, scale), shape).to(dtype);
}

Tensor randn_data(Rngs& rngs, const Shape& shape) {
  Generator g = rngs.next("params");
  return randn(shape, g);
}

void assign(const Tensor& dst, const Tensor& src) {
  NoGradGuard no_grad;
  copy_(dst, src);
}

struct Golden {
  const nlohmann::json& c;
  int64_t D, E, F, N;
};

// |a - b| <= tol * max(|b|, floor) elementwise; reports the worst.
void expect_near_rel(const std::vector<double>& got, const std::vector<double>& want, double tol, double floor,
                     const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double worst = 0;
  size_t at = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::abs(got[i] - want[i]) / std::max(std::abs(want[i]), floor);
    if (!std::isfinite(err)) {
      worst = err, at = i;
      break;
    }
    if (err > worst) worst = err, at = i;
  }
  EXPECT_LE(worst, tol) << what << ": element " << at << " is " << got[at] << ", PyTorch " << want[at];
}

std::vector<double> rowsum(const Tensor& t) {
  const std::vector<double> v = t.detach().to_vector<double>();
  const int64_t C = t.size(-1), R = t.numel() / C;
  std::vector<double> out(static_cast<size_t>(R), 0.0);
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < C; ++c) out[size_t(r)] += v[size_t(r * C + c)];
  return out;
}

std::vector<double> every(const Tensor& t, int64_t stride) {
  const std::vector<double> v = t.detach().to_vector<double>();
  std::vector<double> out;
  for (size_t i = 0; i < v.size(); i += size_t(stride)) out.push_back(v[i]);
  return out;
}

double max_abs(const std::vector<double>& v) {
  double m = 0;
  for (double a : v) m = std::max(m, std::abs(a));
  return m;
}

// Checks a tensor stored as rowsums + every stride-th element.
void expect_packed(const nlohmann::json& c, const std::string& key, const Tensor& t, double tol, bool relative) {
  const std::vector<double> rs = golden_values(c[key + "_rowsum"]), ev = golden_values(c[key + "_every"]);
  const int64_t stride = c["stride_" + key].get<int64_t>();
  // relative: to each value, floored at a tenth of the tensor's largest (f32
  // sums of hundreds of terms near zero keep no relative digits after
  // cancellation); absolute otherwise.
  const double fe = relative ? std::max(0.1 * max_abs(ev), 1e-6) : 1.0,
               fr = relative ? std::max(0.1 * max_abs(rs), 1e-6) : 1.0;
  expect_near_rel(every(t, stride), ev, tol, fe, key + " elements");
  expect_near_rel(rowsum(t), rs, relative ? tol : tol * std::sqrt(double(t.size(-1))), fr, key + " row sums");
}

TEST(MoE, MatchesTheDenseOracle) {
  const nlohmann::json& g = golden("moe");
  const int64_t D = g["D"], E = g["E"], F = g["F"], N = g["N"];
  for (const auto& c : g["cases"]) {
    SCOPED_TRACE(c["name"].get<std::string>());
    const bool swiglu = c["activation"] == "swiglu";
    const double alpha = c["alpha"], beta = c["beta"];
    Rngs rngs(0);
    MoE moe(D, {.num_experts = E, .top_k = c["k"].get<int64_t>(), .expert_hidden = F,
                .activation = swiglu ? ExpertActivation::swiglu : ExpertActivation::gelu,
                .renormalize = c["renormalize"].get<bool>(),
                .balance = alpha > 0 ? MoEBalance::aux : MoEBalance::none, .aux_loss_coef = alpha,
                .z_loss_coef = beta},
            rngs);
    const int64_t up = swiglu ? 2 * F : F;
    Tensor x = value_tensor({N, D}, 1, 2.0, kF32);
    Tensor wr = value_tensor({E, D}, 2, 1.0, kF32);
    if (c["one_expert"].get<bool>()) {
      NoGradGuard no_grad;
      for (int64_t n = 0; n < N; ++n) x.data<float>()[n * D] = 1.0f;
      wr.data<float>()[3 * D] = 16.0f;
    }
    x.requires_grad_(true);
    assign(moe.router->weight.value(), wr);
    assign(moe.w1.value(), value_tensor({E, up, D}, 3, 0.25, kF32));
    assign(moe.w2.value(), value_tensor({E, D, F}, 4, 0.25, kF32));
    const Tensor cot = value_tensor({N, D}, 5, 2.0, kF32);

    Tensor out = moe.forward(x);
    ASSERT_EQ(out.shape(), (Shape{N, D}));
    const std::vector<int64_t> counts = c["counts"].get<std::vector<int64_t>>();
    EXPECT_EQ(moe.stats().tokens_per_expert, counts);  // the same selection, nothing dropped
    expect_packed(c, "out", out, 1e-6, /*relative=*/false);
    EXPECT_NEAR(moe.stats().z_loss, c["z_value"].get<double>(), 1e-6 * c["z_value"].get<double>());
    Tensor loss = add(sum(mul(out, cot)), moe.aux_loss());
    if (alpha > 0) {
      EXPECT_NEAR(moe.aux_loss().item<double>(), c["aux"].get<double>() + c["z"].get<double>(), 1e-8);
    }
    loss.backward();
    // 3e-5: oneDNN's AVX2 GEMMs sum in another order than its AVX-512 ones
    // (grad_x's row sums measured 1.2e-5 off with ONEDNN_MAX_CPU_ISA=AVX2,
    // as on an AVX2-only CPU; 1e-5 held with AVX-512).
    expect_packed(c, "grad_x", x.grad(), 3e-5, true);
    expect_packed(c, "grad_w1", moe.w1.grad(), 3e-5, true);
    expect_packed(c, "grad_w2", moe.w2.grad(), 3e-5, true);
    const std::vector<double> gr = golden_values(c["grad_router"]);
    // k = 1 renormalised: every weight is p / p = 1, so the router's gradient is 0 up to rounding.
    expect_near_rel(moe.router->weight.grad().to_vector<double>(), gr, 1e-5, std::max(0.1 * max_abs(gr), 1e-6),
                    "grad_router");
  }
}

MoE tiny_moe(ExpertActivation act, int64_t k, bool renorm, Rngs& rngs, MoEOptions extra = {}) {
  MoEOptions o = extra;
  o.num_experts = 3;
  o.top_k = k;
  o.expert_hidden = 5;
  o.activation = act;
  o.renormalize = renorm;
  return MoE(4, o, f64_init(rngs));
}

TEST(MoE, GradcheckF64) {
  for (auto act : {ExpertActivation::gelu, ExpertActivation::swiglu}) {
    for (int64_t k : {1, 2}) {
      for (bool renorm : {false, true}) {
        SCOPED_TRACE(::testing::Message() << int(act) << " k " << k << " renorm " << renorm);
        Rngs rngs(7);
        MoE moe = tiny_moe(act, k, renorm, rngs);
        expect_module_gradcheck(moe, leaf({2, 3, 4}, 11));
      }
    }
  }
}

TEST(MoE, GradcheckF64WithBalancingLosses) {
  for (auto [alpha, beta] : {std::pair{0.3, 0.0}, std::pair{0.0, 0.2}, std::pair{0.3, 0.2}}) {
    SCOPED_TRACE(::testing::Message() << "alpha " << alpha << " beta " << beta);
    Rngs rngs(3);
    MoE moe = tiny_moe(ExpertActivation::gelu, 2, true, rngs,
                       {.balance = alpha > 0 ? MoEBalance::aux : MoEBalance::none, .aux_loss_coef = alpha,
                        .z_loss_coef = beta});
    std::vector<Tensor> inputs{leaf({6, 4}, 5)};
    for (const auto& [n, p] : moe.named_parameters()) inputs.push_back(p.value());
    EXPECT_GRADCHECK(
        [&](const std::vector<Tensor>& in) {
          Tensor y = moe.forward(in[0]);  // first: aux_loss() is the latest forward's
          return add(sum(y), moe.aux_loss());
        },
        inputs);
  }
}

// Runs forward + backward and returns the output and every gradient, as bits.
std::vector<std::vector<double>> run_once(MoE& moe, const Tensor& x_in, bool with_aux = true) {
  moe.zero_grad();
  Tensor x = x_in.detach().clone().requires_grad_(true);
  Tensor y = moe.forward(x);
  Tensor loss = sum(mul(y, y));
  if (with_aux) loss = add(loss, moe.aux_loss());
  loss.backward();
  std::vector<std::vector<double>> out{y.detach().to_vector<double>(), x.grad().to_vector<double>()};
  for (const auto& [n, p] : moe.named_parameters()) out.push_back(p.grad().to_vector<double>());
  return out;
}

bool bitwise_equal(const std::vector<std::vector<double>>& a, const std::vector<std::vector<double>>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].size() != b[i].size() || std::memcmp(a[i].data(), b[i].data(), a[i].size() * sizeof(double)) != 0)
      return false;
  return true;
}

TEST(MoE, BitwiseEqualOnOneAndTwoThreads) {
  Rngs rngs(1);
  MoE moe(32, {.num_experts = 8, .top_k = 2, .expert_hidden = 64, .balance = MoEBalance::aux, .z_loss_coef = 1e-3},
          rngs);
  const Tensor x = randn_data(rngs, {4, 64, 32});
  const int before = get_num_threads();
  set_num_threads(1);
  const auto one = run_once(moe, x);
  set_num_threads(2);
  const auto two = run_once(moe, x);
  set_num_threads(before);
  EXPECT_TRUE(bitwise_equal(one, two));
}

TEST(MoE, UniformRouterGivesAuxExactlyAlpha) {
  Rngs rngs(2);
  MoE moe(16, {.num_experts = 8, .top_k = 2, .expert_hidden = 32, .balance = MoEBalance::aux, .aux_loss_coef = 0.01},
          rngs);
  assign(moe.router->weight.value(), zeros({8, 16}));
  moe.forward(randn_data(rngs, {64, 16}));
  EXPECT_EQ(moe.aux_loss().item<float>(), 0.01f);
  EXPECT_NEAR(moe.stats().router_entropy, std::log(8.0), 1e-12);
}

TEST(MoE, ZeroCoefficientsChangeNoGradientBit) {
  Rngs rngs(4);
  MoE off(16, {.num_experts = 4, .top_k = 2, .expert_hidden = 32}, rngs);
  MoE zero(16, {.num_experts = 4, .top_k = 2, .expert_hidden = 32, .balance = MoEBalance::aux, .aux_loss_coef = 0,
                .z_loss_coef = 0},
           rngs);
  zero.load_state_dict(off.state_dict());
  const Tensor x = randn_data(rngs, {32, 16});
  const auto a = run_once(off, x, /*with_aux=*/false);
  const auto b = run_once(zero, x, /*with_aux=*/true);  // adds aux_loss() = untracked 0
  EXPECT_TRUE(bitwise_equal(a, b));
  EXPECT_FALSE(zero.aux_loss().requires_grad());
}

TEST(MoE, BiasThatKeepsTheSelectionChangesNoBit) {
  Rngs rngs(5);
  MoE moe(16, {.num_experts = 4, .top_k = 2, .expert_hidden = 32, .balance = MoEBalance::bias}, rngs);
  const Tensor x = randn_data(rngs, {32, 16});
  const auto base = run_once(moe, x);
  const std::vector<int64_t> counts = moe.stats().tokens_per_expert;
  assign(moe.expert_bias, full({4}, 0.01));  // the same shift for every expert: no ranking changes
  const auto shifted = run_once(moe, x);
  EXPECT_EQ(moe.stats().tokens_per_expert, counts);
  EXPECT_TRUE(bitwise_equal(base, shifted));
  assign(moe.expert_bias, tensor<float>({0.f, 0.f, 0.f, 10.f}));  // a large one changes the selection
  run_once(moe, x);
  EXPECT_EQ(moe.stats().tokens_per_expert[3], 32);
  // ... but never the combine weights: only p of the picked experts, which the bias does not touch.
}

TEST(MoE, BiasBalancesAFrozenSkewedRouter) {
  // A frozen router (logits of std ~2) and a constant input feature that
  // expert 0's row weighs 3: most tokens go to expert 0 (max violation 5.8).
  // The bias alone (gamma 1e-2) must bring it to <= 0.2 and keep it there.
  Rngs rngs(6);
  const int64_t E = 8, D = 16, N = 1024;
  MoE moe(D, {.num_experts = E, .top_k = 1, .expert_hidden = 8, .balance = MoEBalance::bias}, rngs);
  moe.requires_grad_(false);
  Generator g(9);
  Tensor x = randn({N, D}, g);
  NoGradGuard no_grad;
  mul_(moe.router->weight.value(), 2.0);
  for (int64_t n = 0; n < N; ++n) x.data<float>()[n * D] = 1.0f;
  moe.router->weight.value().data<float>()[0] = 3.0f;
  moe.forward(x);
  const double start = moe.stats().max_violation;
  EXPECT_GE(start, 3.0);
  int reached = -1;
  double late = 0;  // the largest over updates 401..500
  for (int step = 1; step <= 500; ++step) {
    moe.update_bias(1e-2);
    moe.forward(x);
    if (reached < 0 && moe.stats().max_violation <= 0.2) reached = step;
    if (step > 400) late = std::max(late, moe.stats().max_violation);
  }
  EXPECT_GT(reached, 0) << "max violation " << moe.stats().max_violation << " after 500 updates (from " << start << ")";
  EXPECT_LE(late, 0.2);
  // The combine weights never saw the bias: they are the router's own p.
  EXPECT_NE(moe.expert_bias.to_vector<float>()[0], 0.f);
}

TEST(MoE, UpdateBiasMovesTowardTheMeanLoad) {
  Rngs rngs(8);
  MoE moe(4, {.num_experts = 2, .top_k = 1, .expert_hidden = 4, .balance = MoEBalance::bias}, rngs);
  EXPECT_KILN_ERROR(moe.update_bias(), "[MoE] update_bias needs the loads of a forward");
  Tensor x = randn_data(rngs, {10, 4});
  moe.forward(x);
  const auto c = moe.stats().tokens_per_expert;
  moe.update_bias(0.5);
  const std::vector<float> b = moe.expert_bias.to_vector<float>();
  for (int e = 0; e < 2; ++e) {
    const double want = c[size_t(e)] < 5 ? 0.5 : c[size_t(e)] > 5 ? -0.5 : 0.0;
    EXPECT_EQ(b[size_t(e)], float(want)) << e;
  }
}

TEST(MoE, Telemetry) {
  Rngs rngs(9);
  MoE moe(8, {.num_experts = 4, .top_k = 2, .expert_hidden = 8}, rngs);
  Tensor x = randn_data(rngs, {2, 5, 8});
  moe.forward(x);
  const MoEStats& s = moe.stats();
  EXPECT_EQ(s.tokens, 10);
  int64_t total = 0;
  double load = 0, prob = 0;
  for (int e = 0; e < 4; ++e) total += s.tokens_per_expert[size_t(e)], load += s.load[size_t(e)], prob += s.mean_prob[size_t(e)];
  EXPECT_EQ(total, 20);
  EXPECT_NEAR(load, 1.0, 1e-12);
  EXPECT_NEAR(prob, 1.0, 1e-6);
  const int64_t mx = *std::max_element(s.tokens_per_expert.begin(), s.tokens_per_expert.end());
  EXPECT_DOUBLE_EQ(s.max_violation, (double(mx) - 5.0) / 5.0);
  EXPECT_GT(s.router_entropy, 0.0);
  EXPECT_LE(s.router_entropy, std::log(4.0) + 1e-9);
  // An expert that gets nothing is counted as starved, in training only.
  assign(moe.router->weight.value(), zeros({4, 8}));
  {
    NoGradGuard no_grad;
    moe.router->weight.value().data<float>()[3 * 8] = -100.f;  // expert 3: never picked for x[0] > 0...
  }
  Tensor pos = abs(x);
  moe.reset_stats();
  moe.forward(pos);
  EXPECT_EQ(moe.stats().tokens_per_expert[3], 0);
  EXPECT_EQ(moe.stats().starved_steps[3], 1);
  moe.eval();
  moe.forward(pos);
  EXPECT_EQ(moe.stats().starved_steps[3], 1);
}

TEST(MoE, BadInputNamesTheLayerAndUpdatesNothing) {
  Rngs rngs(10);
  EXPECT_KILN_ERROR(MoE(8, {.num_experts = 4, .top_k = 5}, rngs), "[MoE] top_k 5 must be in [1, num_experts = 4]");
  EXPECT_KILN_ERROR(MoE(8, {.num_experts = 4, .top_k = 0}, rngs), "[MoE] top_k 0 must be in [1, num_experts = 4]");
  EXPECT_KILN_ERROR(MoE(8, {.num_experts = 4, .top_k = -1}, rngs), "[MoE] top_k -1 must be in [1, num_experts = 4]");
  EXPECT_KILN_ERROR(MoE(8, {.num_experts = 0}, rngs), "[MoE] num_experts must be positive");
  MoE moe(8, {.num_experts = 4, .top_k = 2, .expert_hidden = 8, .balance = MoEBalance::bias}, rngs);
  moe.forward(randn_data(rngs, {3, 8}));
  const MoEStats before = moe.stats();
  EXPECT_KILN_ERROR(moe.forward(randn_data(rngs, {3, 7})), "[MoE] x [3, 7] must be [..., D = 8]");
  Tensor bad = randn_data(rngs, {3, 8});
  bad.data<float>()[9] = std::nanf("");
  EXPECT_KILN_ERROR(moe.forward(bad), "[MoE] router score (logit) of token 1 for expert");
  EXPECT_EQ(moe.stats().forwards, before.forwards);
  EXPECT_EQ(moe.stats().tokens, before.tokens);
  EXPECT_EQ(moe.stats().tokens_per_expert, before.tokens_per_expert);
  EXPECT_EQ(moe.expert_bias.to_vector<float>(), std::vector<float>(4, 0.f));
}

TEST(MoE, ReprAndStateDictKeys) {
  Rngs rngs(11);
  MoE moe(8, {.num_experts = 4, .top_k = 2, .expert_hidden = 16, .activation = ExpertActivation::swiglu}, rngs);
  std::vector<std::string> keys = state_dict_keys(moe);
  std::sort(keys.begin(), keys.end());
  EXPECT_EQ(keys, (std::vector<std::string>{"expert_bias", "router.weight", "w1", "w2"}));
  EXPECT_EQ(moe.w1.value().shape(), (Shape{4, 32, 8}));
  EXPECT_EQ(moe.w2.value().shape(), (Shape{4, 8, 16}));
  EXPECT_NE(moe.extra_repr().find("num_experts=4, top_k=2, expert_hidden=16, activation=swiglu"), std::string::npos);
}

}  // namespace
}  // namespace kiln::nn

namespace kiln::nn {
namespace {
using namespace testing;

// The MoE as a block's FFN (TransformerBlockOptions::moe): registered as
// "moe", every other parameter keeps its name; also in a DiT (AdaLN-Zero) block.
TEST(MoE, InATransformerBlock) {
  Rngs rngs(12);
  TransformerBlock dense(16, 2, rngs, {.adaln_zero = true, .cond_dim = 8});
  TransformerBlock sparse(16, 2, rngs,
                          {.adaln_zero = true, .cond_dim = 8, .moe = MoEOptions{.num_experts = 4, .top_k = 2,
                                                                                .expert_hidden = 32}});
  EXPECT_EQ(sparse.linear1.get(), nullptr);
  std::vector<std::string> kd = state_dict_keys(dense), ks = state_dict_keys(sparse);
  std::vector<std::string> rest_d, rest_s;
  for (const auto& k : kd)
    if (k.rfind("linear1.", 0) != 0 && k.rfind("linear2.", 0) != 0) rest_d.push_back(k);
  for (const auto& k : ks)
    if (k.rfind("moe.", 0) != 0) rest_s.push_back(k);
  EXPECT_EQ(rest_d, rest_s);
  Generator g(1);
  Tensor x = randn({2, 5, 16}, g).requires_grad_(true), c = randn({2, 8}, g);
  {
    NoGradGuard no_grad;  // AdaLN-Zero starts as the identity: give the gates a value
    copy_(sparse.adaLN_modulation->bias.value(), full({6 * 16}, 0.5));
  }
  Tensor y = sparse.forward(x, {.cond = c});
  ASSERT_EQ(y.shape(), (Shape{2, 5, 16}));
  add(sum(mul(y, y)), sparse.moe->aux_loss()).backward();
  EXPECT_TRUE(sparse.moe->w1.grad().defined());
  EXPECT_EQ(sparse.moe->stats().tokens, 10);
}

// Mixed precision: bf16 compute with f32 parameters runs the same routing
// and stays close to the f32 result.
TEST(MoE, Bf16ComputeDtype) {
  Rngs rngs(13);
  MoE moe(32, {.num_experts = 4, .top_k = 2, .expert_hidden = 64}, rngs);
  Generator g(2);
  Tensor x = randn({64, 32}, g);
  Tensor y32 = moe.forward(x);
  moe.set_compute_dtype(kBF16);
  Tensor xb = x.clone().requires_grad_(true);
  Tensor y16 = moe.forward(xb);
  EXPECT_EQ(y16.dtype(), kBF16);
  sum(y16.to(kF32)).backward();
  EXPECT_EQ(moe.w1.grad().dtype(), kF32);
  const std::vector<float> a = y32.to_vector<float>(), b = y16.to_vector<float>();
  double worst = 0, scale = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, double(std::abs(a[i] - b[i]))), scale = std::max(scale, double(std::abs(a[i])));
  EXPECT_LT(worst, 0.05 * scale);  // bf16 has 8 bits: a few percent, or a token routed differently
}

}  // namespace
}  // namespace kiln::nn
