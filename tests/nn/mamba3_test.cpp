// The Mamba-3 scan op (kiln/ops/ssm.h) and nn::Mamba3 (kiln/nn/mamba3.h):
// goldens from tools/goldens/mamba3.py (PyTorch re-implementations of
// upstream's two reference recurrences), the fast kernels against the
// reference kernel, f64 gradchecks, thread-count determinism, step ==
// forward, error paths.
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

#include "kiln/core/parallel.h"
#include "kiln/nn/mamba3.h"
#include "kiln/ops/ssm.h"
#include "src/backend/cpu/ssm/ssm.h"
#include "tests/support/nn_testing.h"

namespace kiln {
namespace {

using testing::golden;
using testing::golden_tensor;

// tools/goldens/mamba3.py's det(): v_i = shift + scale sin(0.618034 i +
// 1.2345 seed) cos(0.0137 i + 0.5 seed), rounded to f32 (returned in `dtype`).
Tensor det(const Shape& shape, int seed, double scale = 1.0, double shift = 0.0, DType dtype = kF32) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  std::vector<double> v(n);
  for (int64_t i = 0; i < n; ++i)
    v[i] = static_cast<float>(shift + scale * std::sin(0.618034 * double(i) + 1.2345 * seed) *
                                          std::cos(0.0137 * double(i) + 0.5 * seed));
  return to(tensor(v, shape), dtype);
}

struct ScanInputs {
  Tensor q, k, v, adt, dt, trap, q_bias, k_bias, angles, D, z;
  Mamba3State init;
  std::vector<Tensor*> all() {
    return {&q, &k, &v, &adt, &dt, &trap, &q_bias, &k_bias, &angles, &D, &z, &init.angle, &init.h, &init.k, &init.v};
  }
};

// The golden script's inputs() (same seeds and scales).
ScanInputs make_inputs(int64_t B, int64_t T, int64_t H, int64_t N, int64_t P, int64_t R, bool has_D, bool has_z,
                       bool has_init, DType dtype = kF32) {
  ScanInputs in;
  in.q = det({B, T, H, N}, 1, 1, 0, dtype);
  in.k = det({B, T, H, N}, 2, 1, 0, dtype);
  in.v = det({B, T, H, P}, 3, 1, 0, dtype);
  in.dt = det({B, T, H}, 4, 0.045, 0.055, dtype);
  // adt = A dt, rounded to f32 as the script does.
  in.adt = to(to(mul(det({B, T, H}, 5, 0.75, -1.25, kF64), to(in.dt, kF64)), kF32), dtype);
  in.trap = det({B, T, H}, 6, 2.0, 0, dtype);
  in.q_bias = det({H, N}, 7, 0.1, 1.0, dtype);
  in.k_bias = det({H, N}, 8, 0.1, 1.0, dtype);
  in.angles = det({B, T, H, R}, 9, 2.0, 0, dtype);
  if (has_D) in.D = det({H}, 10, 1, 0, dtype);
  if (has_z) in.z = det({B, T, H, P}, 11, 2.0, 0, dtype);
  if (has_init) {
    in.init.angle = det({B, H, R}, 12, std::numbers::pi, std::numbers::pi, dtype);
    in.init.h = det({B, H, P, N}, 13, 0.3, 0, dtype);
    in.init.k = det({B, H, N}, 14, 1, 0, dtype);
    in.init.v = det({B, H, P}, 15, 1, 0, dtype);
  }
  return in;
}

Mamba3ScanResult run(const ScanInputs& in, int64_t chunk = 64) {
  return mamba3_scan(in.q, in.k, in.v, in.adt, in.dt, in.trap, in.q_bias, in.k_bias, in.angles, in.D, in.z, in.init,
                     chunk);
}

// |a - b| <= tol max(1, |b|) everywhere (angles compared on the circle).
::testing::AssertionResult close_to(const Tensor& a, const Tensor& b, double tol, bool circular = false) {
  if (a.shape() != b.shape())
    return ::testing::AssertionFailure() << "shape " << to_string(a.shape()) << " vs " << to_string(b.shape());
  auto x = to(a, kF64).contiguous().to_vector<double>(), y = to(b, kF64).contiguous().to_vector<double>();
  for (size_t i = 0; i < x.size(); ++i) {
    double d = std::abs(x[i] - y[i]);
    if (circular) d = std::min(d, 2 * std::numbers::pi - d);
    if (!(d <= tol * std::max(1.0, std::abs(y[i]))))
      return ::testing::AssertionFailure() << "element " << i << ": " << x[i] << " vs " << y[i] << " (diff " << d
                                           << ")";
  }
  return ::testing::AssertionSuccess();
}

// sum(y cy) + sum(state_i c_i) with the golden script's weights.
Tensor golden_loss(const Mamba3ScanResult& r) {
  Tensor loss = sum(mul(r.y, det(r.y.shape(), 21, 1, 0, r.y.dtype())));
  const Tensor* st[] = {&r.state.angle, &r.state.h, &r.state.k, &r.state.v};
  for (int i = 0; i < 4; ++i) loss = add(loss, sum(mul(*st[i], det(st[i]->shape(), 22 + i, 1, 0, r.y.dtype()))));
  return loss;
}

TEST(Mamba3Scan, GoldenAgainstPyTorchReference) {
  const auto& cases = golden("mamba3_scan")["cases"];
  ASSERT_GE(cases.size(), 10u);
  for (const auto& c : cases) {
    SCOPED_TRACE(c["name"].get<std::string>());
    const int64_t B = c["B"], T = c["T"], H = c["H"], N = c["N"], P = c["P"], R = c["R"];
    ScanInputs in = make_inputs(B, T, H, N, P, R, c["D"], c["z"], c["init"]);
    for (Tensor* t : in.all())
      if (t->defined()) t->requires_grad_(true);
    Mamba3ScanResult r = run(in);
    EXPECT_TRUE(close_to(r.y, golden_tensor(c["y"]), 2e-5));
    EXPECT_TRUE(close_to(r.state.angle, golden_tensor(c["angle"]), 2e-5, /*circular=*/true));
    EXPECT_TRUE(close_to(r.state.h, golden_tensor(c["h"]), 2e-5));
    EXPECT_TRUE(close_to(r.state.k, golden_tensor(c["k"]), 2e-5));
    EXPECT_TRUE(close_to(r.state.v, golden_tensor(c["v"]), 2e-5));
    golden_loss(r).backward();
    const auto& g = c["grads"];
    const std::pair<const char*, Tensor*> named[] = {
        {"q", &in.q},           {"k", &in.k},           {"v", &in.v},         {"adt", &in.adt},
        {"dt", &in.dt},         {"trap", &in.trap},     {"q_bias", &in.q_bias}, {"k_bias", &in.k_bias},
        {"angles", &in.angles}, {"D", &in.D},           {"z", &in.z},         {"init_angle", &in.init.angle},
        {"init_h", &in.init.h}, {"init_k", &in.init.k}, {"init_v", &in.init.v}};
    int checked = 0;
    for (auto [name, t] : named) {
      if (!t->defined()) continue;
      ASSERT_TRUE(t->grad().defined()) << name;
      if (g.contains(name)) {
        EXPECT_TRUE(close_to(t->grad(), golden_tensor(g[name]), 1e-4)) << name;
        ++checked;
      } else {
        const std::string first = std::string(name) + "_first", last = std::string(name) + "_last";
        ASSERT_TRUE(g.contains(first) && g.contains(last)) << name;
        EXPECT_TRUE(close_to(select(t->grad(), 1, 0), golden_tensor(g[first]), 1e-4)) << first;
        EXPECT_TRUE(close_to(select(t->grad(), 1, T - 1), golden_tensor(g[last]), 1e-4)) << last;
        checked += 2;
      }
    }
    EXPECT_GE(checked, 9);
  }
}

// The per-ISA kernels against the f64 reference kernel, forward and
// backward, with chunk boundaries inside the sequence.
// Both forms: the sequential recurrence and the chunked matrix form (chunks
// of 5: four whole and one of 3; and of 16: one whole, one of 7).
TEST(Mamba3Scan, FastKernelsMatchReference) {
  testing::for_each_kernel_isa([&](KernelIsa) {
   for (int64_t chunk : {5, 16})
   for (bool chunked : {false, true})
    for (bool full : {false, true}) {
      SCOPED_TRACE(std::string(chunked ? "chunked" : "sequential") + ", chunk " + std::to_string(chunk) +
                   (full ? ", D, z, initial state" : ", plain"));
      const int64_t B = 2, T = 23, H = 3, N = 12, P = 5, R = 3;
      ScanInputs in = make_inputs(B, T, H, N, P, R, full, full, full, kF64);
      backend::cpu::Mamba3Scan s;
      s.q = in.q, s.k = in.k, s.v = in.v, s.adt = in.adt, s.dt = in.dt, s.trap = in.trap;
      s.q_bias = in.q_bias, s.k_bias = in.k_bias, s.angles = in.angles, s.D = in.D, s.z = in.z;
      s.angle0 = in.init.angle, s.h0 = in.init.h, s.k0 = in.init.k, s.v0 = in.init.v;
      s.chunk = chunk;
      auto outs = [&](backend::cpu::Mamba3Scan& o) {
        o.y = zeros({B, T, H, P}, {.dtype = kF64});
        o.angle_T = zeros({B, H, R}, {.dtype = kF64});
        o.h_T = zeros({B, H, P, N}, {.dtype = kF64});
        o.k_T = zeros({B, H, N}, {.dtype = kF64});
        o.v_T = zeros({B, H, P}, {.dtype = kF64});
      };
      backend::cpu::Mamba3Scan fast = s, ref = s;
      outs(fast);
      outs(ref);
      fast.theta_all = zeros({B, T, H, R}, {.dtype = kF64});
      fast.h_ckpt = zeros({B, H, (T + chunk - 1) / chunk, P, N}, {.dtype = kF64});
      if (full) fast.o_all = zeros({B, T, H, P}, {.dtype = kF64});  // the plain case recomputes o
      if (chunked) backend::cpu::mamba3_scan_forward_chunked(fast);
      else backend::cpu::mamba3_scan_forward(fast);
      backend::cpu::ref::mamba3_scan_forward(ref);
      EXPECT_TRUE(testing::all_close(fast.y, ref.y, 1e-12, 1e-12));
      EXPECT_TRUE(testing::all_close(fast.h_T, ref.h_T, 1e-12, 1e-12));
      EXPECT_TRUE(testing::all_close(fast.angle_T, ref.angle_T, 1e-12, 1e-12));
      EXPECT_TRUE(testing::all_close(fast.k_T, ref.k_T, 1e-12, 1e-12));
      EXPECT_TRUE(testing::equal(fast.v_T, ref.v_T));
      auto grads = [&](const backend::cpu::Mamba3Scan& o) {
        backend::cpu::Mamba3ScanGrads g;
        g.dy = det(o.y.shape(), 31, 1, 0, kF64);
        g.d_angle_T = det(o.angle_T.shape(), 32, 1, 0, kF64);
        g.d_h_T = det(o.h_T.shape(), 33, 1, 0, kF64);
        g.d_k_T = det(o.k_T.shape(), 34, 1, 0, kF64);
        g.d_v_T = det(o.v_T.shape(), 35, 1, 0, kF64);
        auto like = [](const Tensor& t) { return t.defined() ? zeros(t.shape(), {.dtype = kF64}) : Tensor(); };
        g.dq = like(o.q), g.dk = like(o.k), g.dv = like(o.v), g.dadt = like(o.adt), g.ddt = like(o.dt);
        g.dtrap = like(o.trap), g.dangles = like(o.angles), g.dq_bias = like(o.q_bias), g.dk_bias = like(o.k_bias);
        g.dD = like(o.D), g.dz = like(o.z), g.d_angle0 = like(o.angle0), g.d_h0 = like(o.h0), g.d_k0 = like(o.k0);
        g.d_v0 = like(o.v0);
        return g;
      };
      backend::cpu::Mamba3ScanGrads gf = grads(fast), gr = grads(ref);
      if (chunked) backend::cpu::mamba3_scan_backward_chunked(fast, gf);
      else backend::cpu::mamba3_scan_backward(fast, gf);
      backend::cpu::ref::mamba3_scan_backward(ref, gr);
      const std::pair<Tensor*, Tensor*> pairs[] = {
          {&gf.dq, &gr.dq},         {&gf.dk, &gr.dk},           {&gf.dv, &gr.dv},         {&gf.dadt, &gr.dadt},
          {&gf.ddt, &gr.ddt},       {&gf.dtrap, &gr.dtrap},     {&gf.dangles, &gr.dangles}, {&gf.dq_bias, &gr.dq_bias},
          {&gf.dk_bias, &gr.dk_bias}, {&gf.dD, &gr.dD},         {&gf.dz, &gr.dz},         {&gf.d_angle0, &gr.d_angle0},
          {&gf.d_h0, &gr.d_h0},     {&gf.d_k0, &gr.d_k0},       {&gf.d_v0, &gr.d_v0}};
      int i = 0;
      for (auto [a, b] : pairs) {
        if (a->defined()) {
          EXPECT_TRUE(testing::all_close(*a, *b, 1e-10, 1e-10)) << "gradient " << i;
        }
        ++i;
      }
    }
  });
}

// f64 gradcheck through the op (every input, the initial state, and every
// output including the final state), across chunk boundaries.
TEST(Mamba3Scan, GradcheckF64) {
  const int64_t B = 1, T = 5, H = 2, N = 4, P = 2, R = 1;
  ScanInputs in = make_inputs(B, T, H, N, P, R, true, true, true, kF64);
  // Keep the angle state inside (0, 2 pi): the wrap's jumps are not differentiable.
  in.init.angle = full({B, H, R}, 2.0, {.dtype = kF64});
  std::vector<Tensor> xs;
  for (Tensor* t : in.all()) xs.push_back(t->detach().clone().requires_grad_(true));
  for (auto algo : {Mamba3ScanAlgo::sequential, Mamba3ScanAlgo::chunked}) {
    SCOPED_TRACE(algo == Mamba3ScanAlgo::chunked ? "chunked" : "sequential");
    auto fn = [algo](const std::vector<Tensor>& x) -> std::vector<Tensor> {
      Mamba3ScanResult r = mamba3_scan(x[0], x[1], x[2], x[3], x[4], x[5], x[6], x[7], x[8], x[9], x[10],
                                       Mamba3State{x[11], x[12], x[13], x[14]}, /*chunk=*/2, algo);
      return {r.y, r.state.angle, r.state.h, r.state.k, r.state.v};
    };
    EXPECT_GRADCHECK(fn, xs);
    // Without D, gate and initial state.
    std::vector<Tensor> ys(xs.begin(), xs.begin() + 9);
    auto fn2 = [algo](const std::vector<Tensor>& x) -> std::vector<Tensor> {
      Mamba3ScanResult r = mamba3_scan(x[0], x[1], x[2], x[3], x[4], x[5], x[6], x[7], x[8], {}, {}, {}, 3, algo);
      return {r.y, r.state.h, r.state.k};
    };
    EXPECT_GRADCHECK(fn2, ys);
  }
}

TEST(Mamba3Scan, BitwiseSameOnOneAndTwoThreads) {
  const int64_t B = 3, T = 70, H = 2, N = 16, P = 8, R = 4;
  auto once = [&](int threads) {
    set_num_threads(threads);
    ScanInputs in = make_inputs(B, T, H, N, P, R, true, true, true);
    for (Tensor* t : in.all()) t->requires_grad_(true);
    Mamba3ScanResult r = run(in);  // T 70: the chunked form
    golden_loss(r).backward();
    Mamba3ScanResult rs = mamba3_scan(in.q, in.k, in.v, in.adt, in.dt, in.trap, in.q_bias, in.k_bias, in.angles,
                                      in.D, in.z, in.init, 64, Mamba3ScanAlgo::sequential);
    std::vector<Tensor> out{r.y, r.state.h, r.state.angle, rs.y, rs.state.h};
    for (Tensor* t : in.all()) out.push_back(t->grad());
    return out;
  };
  const std::vector<Tensor> one = once(1), two = once(2);
  use_default_threads();
  for (size_t i = 0; i < one.size(); ++i) EXPECT_TRUE(testing::equal(one[i], two[i])) << i;
}

// Under the sequential form, T steps in one call equal T calls of one step,
// bit for bit, and a prefix continued through its state equals the whole
// sequence; the chunked form (what a long call takes by default) equals them
// within f32 rounding.
TEST(Mamba3Scan, StepsEqualOneCall) {
  const int64_t B = 2, T = 200, H = 2, N = 16, P = 4, R = 4;
  ScanInputs in = make_inputs(B, T, H, N, P, R, true, true, false);
  auto sl = [](const Tensor& t, int64_t a, int64_t n) { return t.defined() ? narrow(t, 1, a, n) : t; };
  auto part = [&](int64_t a, int64_t n, const Mamba3State& st, Mamba3ScanAlgo algo) {
    return mamba3_scan(sl(in.q, a, n), sl(in.k, a, n), sl(in.v, a, n), sl(in.adt, a, n), sl(in.dt, a, n),
                       sl(in.trap, a, n), in.q_bias, in.k_bias, sl(in.angles, a, n), in.D, sl(in.z, a, n), st, 64,
                       algo);
  };
  const Mamba3ScanResult whole = part(0, T, {}, Mamba3ScanAlgo::sequential);
  const Mamba3ScanResult chunked = part(0, T, {}, Mamba3ScanAlgo::chunked);
  const Mamba3ScanResult automatic = part(0, T, {}, Mamba3ScanAlgo::automatic);
  Mamba3State st;
  std::vector<Tensor> ys;
  for (int64_t t = 0; t < T; ++t) {
    Mamba3ScanResult r = part(t, 1, st, Mamba3ScanAlgo::automatic);  // one step: the sequential form
    ys.push_back(r.y);
    st = r.state;
  }
  EXPECT_TRUE(testing::equal(cat(ys, 1), whole.y));
  EXPECT_TRUE(testing::equal(st.h, whole.state.h));
  EXPECT_TRUE(testing::equal(st.angle, whole.state.angle));
  EXPECT_TRUE(testing::equal(automatic.y, chunked.y));  // T 200: automatic is chunked
  EXPECT_TRUE(close_to(chunked.y, whole.y, 1e-5));
  EXPECT_TRUE(close_to(chunked.state.h, whole.state.h, 1e-5));
  EXPECT_TRUE(close_to(chunked.state.k, whole.state.k, 1e-5));
  EXPECT_TRUE(testing::equal(chunked.state.v, whole.state.v));
  EXPECT_TRUE(close_to(chunked.state.angle, whole.state.angle, 1e-5, /*circular=*/true));
  // prefix (120) + rest (80), each form
  for (auto algo : {Mamba3ScanAlgo::sequential, Mamba3ScanAlgo::chunked}) {
    Mamba3ScanResult a = part(0, 120, {}, algo);
    Mamba3ScanResult b = part(120, 80, a.state, algo);
    if (algo == Mamba3ScanAlgo::sequential) EXPECT_TRUE(testing::equal(cat({a.y, b.y}, 1), whole.y));
    else EXPECT_TRUE(close_to(cat({a.y, b.y}, 1), whole.y, 1e-5));
  }
  // The reference kernel agrees.
  Mamba3ScanResult ref = mamba3_scan_reference(in.q, in.k, in.v, in.adt, in.dt, in.trap, in.q_bias, in.k_bias,
                                               in.angles, in.D, in.z);
  EXPECT_TRUE(close_to(whole.y, ref.y, 1e-5));
  EXPECT_TRUE(close_to(chunked.y, ref.y, 1e-5));
}

// q and k expanded over the heads (nn::Mamba3's one group): the kernels read
// one row for every head; outputs and every gradient equal those of
// contiguous copies, bit for bit, in both forms.
TEST(Mamba3Scan, HeadSharedQKEqualCopies) {
  const int64_t B = 2, T = 40, H = 3, N = 8, P = 4, R = 2;
  ScanInputs in = make_inputs(B, T, H, N, P, R, true, true, true);
  Tensor q1 = det({B, T, 1, N}, 41), k1 = det({B, T, 1, N}, 42);
  for (auto algo : {Mamba3ScanAlgo::sequential, Mamba3ScanAlgo::chunked}) {
    SCOPED_TRACE(algo == Mamba3ScanAlgo::chunked ? "chunked" : "sequential");
    std::vector<Tensor> outs[2];
    for (int shared = 0; shared < 2; ++shared) {
      Tensor qs = q1.detach().clone().requires_grad_(true), ks = k1.detach().clone().requires_grad_(true);
      Tensor vv = in.v.detach().clone().requires_grad_(true);
      Tensor qx = expand(qs, {B, T, H, N}), kx = expand(ks, {B, T, H, N});
      if (!shared) qx = contiguous(qx), kx = contiguous(kx);
      Mamba3ScanResult r = mamba3_scan(qx, kx, vv, in.adt, in.dt, in.trap, in.q_bias, in.k_bias, in.angles, in.D,
                                       in.z, in.init, 16, algo);
      golden_loss(r).backward();
      outs[shared] = {r.y, r.state.h, r.state.k, qs.grad(), ks.grad(), vv.grad()};
    }
    for (size_t i = 0; i < outs[0].size(); ++i) EXPECT_TRUE(testing::equal(outs[0][i], outs[1][i])) << i;
  }
}

TEST(Mamba3Scan, BadArgumentsAreErrors) {
  ScanInputs in = make_inputs(1, 4, 2, 8, 4, 2, true, true, true);
  auto call = [&](ScanInputs x) { return run(x); };
  auto expect_error = [&](ScanInputs x, const std::string& what) {
    try {
      call(x);
      ADD_FAILURE() << "no error for " << what;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("mamba3_scan"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  ScanInputs bad = in;
  bad.k = det({1, 4, 2, 6}, 2);
  expect_error(bad, "k [1, 4, 2, 6]");
  bad = in;
  bad.q = det({4, 2, 8}, 1);
  expect_error(bad, "q [4, 2, 8] must be [B, T, H, N]");
  bad = in;
  bad.D = det({3}, 1);
  expect_error(bad, "D [3]");
  bad = in;
  bad.init.h = Tensor();
  expect_error(bad, "all of angle, h, k, v or none");
  bad = in;
  bad.init.h = det({2, 2, 4, 8}, 1);
  expect_error(bad, "state.h [2, 2, 4, 8]");
  bad = in;
  bad.trap = det({1, 4, 2}, 6, 1, 0, kF64);
  expect_error(bad, "dtype mismatch");
  bad = in;
  bad.angles = det({1, 4, 2, 5}, 9);
  expect_error(bad, "more than N / 2");
}

// ---- nn::Mamba3 ----

nn::Mamba3Options small_options(int64_t d_state = 16, int64_t headdim = 8) {
  nn::Mamba3Options o;
  o.d_state = d_state;
  o.headdim = headdim;
  return o;
}

// The golden script's module_params(): every parameter from det().
void set_golden_params(nn::Mamba3& m, DType dtype = kF32) {
  const int64_t D = m.d_model, N = m.d_state, H = m.nheads, P = m.headdim, R = m.num_rope_angles, Di = H * P;
  nn::StateDict sd{{"in_proj.weight", det({2 * Di + 2 * N + 3 * H + R, D}, 40, 0.3, 0, dtype)},
                   {"dt_bias", det({H}, 41, 1.0, -3.0, dtype)},
                   {"B_bias", det({H, N}, 42, 0.1, 1.0, dtype)},
                   {"C_bias", det({H, N}, 43, 0.1, 1.0, dtype)},
                   {"B_norm.weight", det({N}, 44, 0.1, 1.0, dtype)},
                   {"C_norm.weight", det({N}, 45, 0.1, 1.0, dtype)},
                   {"D", det({H}, 46, 1.0, 0, dtype)},
                   {"out_proj.weight", det({D, Di}, 47, 0.2, 0, dtype)}};
  m.load_state_dict(sd);
}

TEST(Mamba3, UpstreamDefaultsAndParameters) {
  Rngs rngs{{"params", 0}};
  nn::Mamba3 m(64, rngs);
  EXPECT_EQ(m.d_state, 128);
  EXPECT_EQ(m.d_inner, 128);
  EXPECT_EQ(m.headdim, 64);
  EXPECT_EQ(m.nheads, 2);
  EXPECT_EQ(m.num_rope_angles, 32);  // d_state * rope_fraction / 2
  EXPECT_EQ(m.in_proj->weight.shape(), (Shape{2 * 128 + 2 * 128 + 3 * 2 + 32, 64}));
  // kiln's order: a module's own parameters, then its children's (the names are upstream's).
  EXPECT_EQ(testing::state_dict_keys(m),
            (std::vector<std::string>{"dt_bias", "B_bias", "C_bias", "D", "in_proj.weight", "B_norm.weight",
                                      "C_norm.weight", "out_proj.weight"}));
  // No weight decay on dt_bias, D, the B/C biases and the norms' scales (M11).
  for (const auto& [name, p] : m.named_parameters())
    EXPECT_EQ(p.decay(), name == "in_proj.weight" || name == "out_proj.weight") << name;
  // softplus(dt_bias) = dt in [dt_min, dt_max]; biases and D start at one.
  for (double dt : softplus(m.dt_bias.value()).to_vector<float>()) {
    EXPECT_GE(dt, 1e-3 * 0.999);
    EXPECT_LE(dt, 0.1 * 1.001);
  }
  EXPECT_TRUE(testing::equal(m.B_bias.value(), ones({2, 128})));
  EXPECT_TRUE(testing::equal(m.D.value(), ones({2})));
}

TEST(Mamba3, GoldenAgainstPyTorchModule) {
  const auto& g = golden("mamba3_module");
  Rngs rngs{{"params", 0}};
  nn::Mamba3 m(g["d_model"].get<int64_t>(), small_options(g["d_state"], g["headdim"]), rngs);
  set_golden_params(m);
  const int64_t B = g["B"], T = g["T"];
  Tensor x = det({B, T, m.d_model}, 48).requires_grad_(true);
  auto [y, st] = m.forward(x);
  EXPECT_TRUE(close_to(y, golden_tensor(g["y"]), 1e-5));
  EXPECT_TRUE(close_to(st.h, golden_tensor(g["h"]), 1e-5));
  sum(mul(y, det(y.shape(), 49))).backward();
  EXPECT_TRUE(close_to(x.grad(), golden_tensor(g["x_grad"]), 1e-4));
  for (const auto& [name, p] : m.named_parameters()) {
    ASSERT_TRUE(g["grads"].contains(name)) << name;
    EXPECT_TRUE(close_to(p.grad(), golden_tensor(g["grads"][name]), 1e-4)) << name;
  }
}

TEST(Mamba3, GradcheckF64TinyBlock) {
  Rngs rngs{{"params", 3}};
  nn::Mamba3 m(4, small_options(4, 2), rngs);
  m.to(kF64);
  set_golden_params(m, kF64);
  Tensor x = det({1, 4, 4}, 48, 0.5, 0, kF64).requires_grad_(true);
  EXPECT_GRADCHECK([&](const std::vector<Tensor>& in) { return m.forward(in[0]).first; }, {x});
}

// The whole block's training step (in_proj, its split, the chunked scan with
// a partial last chunk, out_proj) gives the same bits on 1 and 2 threads:
// outputs, the input's gradient and every parameter's.
TEST(Mamba3, TrainingStepBitwiseSameOnOneAndTwoThreads) {
  auto once = [&](int threads) {
    set_num_threads(threads);
    Rngs rngs{{"params", 2}};
    nn::Mamba3 m(16, small_options(), rngs);
    set_golden_params(m);
    Tensor x = det({3, 45, 16}, 50).requires_grad_(true);  // T 45: chunks of 32 and 13
    auto [y, st] = m.forward(x);
    sum(mul(y, det(y.shape(), 51))).backward();
    std::vector<Tensor> out{y, st.h, st.angle, x.grad()};
    for (const auto& [name, p] : m.named_parameters()) out.push_back(p.grad());
    return out;
  };
  const std::vector<Tensor> one = once(1), two = once(2);
  use_default_threads();
  ASSERT_EQ(one.size(), two.size());
  for (size_t i = 0; i < one.size(); ++i) EXPECT_TRUE(testing::equal(one[i], two[i])) << i;
}

TEST(Mamba3, StepEqualsForwardAndPrefixContinues) {
  Rngs rngs{{"params", 1}};
  nn::Mamba3 m(16, small_options(), rngs);
  set_golden_params(m);
  const int64_t B = 2, T = 200;
  Tensor x = det({B, T, 16}, 50);
  NoGradGuard no_grad;
  auto [y, st] = m.forward(x);
  nn::Mamba3State s;
  std::vector<Tensor> ys;
  for (int64_t t = 0; t < T; ++t) {
    auto [yt, st2] = m.step(select(x, 1, t), s);  // [B, D]
    ys.push_back(unsqueeze(yt, 1));
    s = st2;
  }
  EXPECT_TRUE(testing::all_close(cat(ys, 1), y, 0, 1e-5));
  EXPECT_TRUE(testing::all_close(s.h, st.h, 0, 1e-5));
  // forward(prefix) then step through the rest equals forward(full).
  auto [yp, sp] = m.forward(narrow(x, 1, 0, 150));
  std::vector<Tensor> tail{yp};
  for (int64_t t = 150; t < T; ++t) {
    auto [yt, st2] = m.step(narrow(x, 1, t, 1), sp);  // [B, 1, D]
    tail.push_back(yt);
    sp = st2;
  }
  EXPECT_TRUE(testing::all_close(cat(tail, 1), y, 0, 1e-5));
  // The state round-trips through a StateDict (what a checkpoint stores).
  nn::Mamba3State back = nn::mamba3_state_from_dict(nn::mamba3_state_dict(sp));
  EXPECT_TRUE(testing::equal(back.h, sp.h));
  EXPECT_TRUE(testing::equal(back.angle, sp.angle));
}

TEST(Mamba3, BadInputsAreErrorsThatChangeNothing) {
  Rngs rngs{{"params", 2}};
  nn::Mamba3 m(16, small_options(), rngs);
  const nn::StateDict before = m.state_dict();
  auto expect_error = [](const std::function<void()>& f, const std::vector<std::string>& parts) {
    try {
      f();
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      for (const auto& p : parts) EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
    }
  };
  expect_error([&] { m.forward(zeros({2, 16})); }, {"Mamba3", "[2, 16]", "[B, T, 16]"});
  expect_error([&] { m.forward(zeros({2, 3, 15})); }, {"Mamba3", "[2, 3, 15]"});
  expect_error([&] { m.step(zeros({2, 3, 16}), {}); }, {"Mamba3", "step", "[2, 3, 16]"});
  nn::Mamba3State other = m.zero_state(3);
  expect_error([&] { m.forward(zeros({2, 3, 16}), other); }, {"Mamba3", "state.angle", "[3, 4, 4]", "batch size"});
  Rngs rngs2{{"params", 2}};
  nn::Mamba3 wide(16, small_options(32), rngs2);
  expect_error([&] { m.step(zeros({3, 16}), wide.zero_state(3)); }, {"Mamba3", "another configuration"});
  nn::Mamba3State partial = m.zero_state(2);
  partial.k = Tensor();
  expect_error([&] { m.forward(zeros({2, 3, 16}), partial); }, {"Mamba3", "3 of 4"});
  const nn::StateDict after = m.state_dict();
  for (const auto& [k, v] : before) EXPECT_TRUE(testing::equal(v, after.at(k))) << k;
}

}  // namespace
}  // namespace kiln
