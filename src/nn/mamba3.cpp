// nn::Mamba3 (kiln/nn/mamba3.h; docs/ssm.md): the input projection and its
// split, the data-dependent A, dt and angles, RMSNorm on B and C, then the
// scan op (kiln/ops/ssm.h) and the output projection. forward and step share
// this one path (spec 002: the in_proj split, the norms and the
// discretisation are computed by the same code for both).
#include "kiln/nn/mamba3.h"

#include <cmath>

#include "kiln/ops/binary.h"
#include "kiln/ops/creation.h"
#include "kiln/ops/index.h"
#include "kiln/ops/random.h"
#include "kiln/ops/shape.h"
#include "kiln/ops/unary.h"
#include "src/nn/layer_error.h"

namespace kiln::nn {

namespace {

constexpr const char* kLayer = "Mamba3";

// dt_bias: softplus^-1(dt) for dt log-uniform on [dt_min, dt_max], at least
// dt_init_floor (upstream: dt + log(-expm1(-dt))).
Initializer dt_bias_init(const Mamba3Options& o) {
  return [o](const Shape& shape, Fan, Generator& gen, DType dtype) {
    Tensor u = rand(shape, gen, {.dtype = kF64});
    const double lo = std::log(o.dt_min), hi = std::log(o.dt_max);
    Tensor dt = clamp_min(exp(add(mul(u, hi - lo), lo)), o.dt_init_floor);
    return to(add(dt, log(neg(expm1(neg(dt))))), dtype);
  };
}

std::string shape_str(const Tensor& t) { return to_string(t.shape()); }

}  // namespace

StateDict mamba3_state_dict(const Mamba3State& s) {
  KILN_CHECK(s.defined(), kLayer, "mamba3_state_dict: the state is undefined (the zero state has no tensors)");
  return StateDict{{"angle", s.angle}, {"h", s.h}, {"k", s.k}, {"v", s.v}};
}

Mamba3State mamba3_state_from_dict(const StateDict& d) {
  for (const char* key : {"angle", "h", "k", "v"})
    KILN_CHECK(d.contains(key), kLayer, "mamba3_state_from_dict: no key '{}' (a Mamba3 state has angle, h, k, v)",
               key);
  return {d.at("angle"), d.at("h"), d.at("k"), d.at("v")};
}

Mamba3::Mamba3(int64_t dm, const Mamba3Options& o, const Init& init) : d_model(dm), options(o) {
  KILN_CHECK(dm > 0 && o.expand > 0 && o.headdim > 0 && o.d_state > 0, kLayer,
             "d_model {}, expand {}, headdim {}, d_state {} must be positive", dm, o.expand, o.headdim, o.d_state);
  KILN_CHECK(o.rope_fraction == 0.5 || o.rope_fraction == 1.0, kLayer, "rope_fraction must be 0.5 or 1.0, got {}",
             o.rope_fraction);
  d_inner = o.expand * dm;
  KILN_CHECK(d_inner % o.headdim == 0, kLayer, "d_inner = expand * d_model = {} is not a multiple of headdim {}",
             d_inner, o.headdim);
  KILN_CHECK(o.dt_min > 0 && o.dt_max >= o.dt_min, kLayer, "dt range [{}, {}] must be positive and ordered",
             o.dt_min, o.dt_max);
  KILN_CHECK(o.chunk_size > 0, kLayer, "chunk_size must be positive, got {}", o.chunk_size);
  headdim = o.headdim;
  nheads = d_inner / headdim;
  d_state = o.d_state;
  int64_t split = static_cast<int64_t>(static_cast<double>(d_state) * o.rope_fraction);
  if (split % 2 != 0) --split;
  num_rope_angles = split / 2;
  KILN_CHECK(num_rope_angles > 0, kLayer, "d_state {} with rope_fraction {} leaves no rotary angle", d_state,
             o.rope_fraction);
  const int64_t d_in_proj = 2 * d_inner + 2 * d_state + 3 * nheads + num_rope_angles;
  in_proj = register_module("in_proj", Linear(dm, d_in_proj, init, /*bias=*/false));
  dt_bias = register_parameter("dt_bias", init.make(dt_bias_init(o), {nheads}, {1, 1}, /*decay=*/false));
  B_bias = register_parameter("B_bias", ones({nheads, d_state}, {.dtype = init.dtype}), /*decay=*/false);
  C_bias = register_parameter("C_bias", ones({nheads, d_state}, {.dtype = init.dtype}), /*decay=*/false);
  B_norm = register_module("B_norm", RMSNorm({d_state}, init, 1e-5));
  C_norm = register_module("C_norm", RMSNorm({d_state}, init, 1e-5));
  D = register_parameter("D", ones({nheads}, {.dtype = init.dtype}), /*decay=*/false);
  out_proj = register_module("out_proj", Linear(d_inner, dm, init, /*bias=*/false));
}

Mamba3State Mamba3::zero_state(int64_t batch) const {
  const TensorOptions opt{.dtype = D.dtype()};
  return {zeros({batch, nheads, num_rope_angles}, opt), zeros({batch, nheads, headdim, d_state}, opt),
          zeros({batch, nheads, d_state}, opt), zeros({batch, nheads, headdim}, opt)};
}

void Mamba3::check_state(const Mamba3State& s, int64_t batch, const Tensor& x) const {
  const int n = s.angle.defined() + s.h.defined() + s.k.defined() + s.v.defined();
  if (n == 0) return;
  KILN_CHECK(n == 4, kLayer, "the state needs all of angle, h, k, v or none, got {} of 4", n);
  const Shape want[] = {{batch, nheads, num_rope_angles},
                        {batch, nheads, headdim, d_state},
                        {batch, nheads, d_state},
                        {batch, nheads, headdim}};
  const Tensor* got[] = {&s.angle, &s.h, &s.k, &s.v};
  const char* names[] = {"angle", "h", "k", "v"};
  for (int i = 0; i < 4; ++i) {
    KILN_CHECK(got[i]->shape() == want[i] && got[i]->dtype() == D.dtype(), kLayer,
               "state.{} is {} {}, expected {} {} for input {} (a state from another configuration or batch size)",
               names[i], shape_str(*got[i]), name(got[i]->dtype()), to_string(want[i]), name(D.dtype()),
               shape_str(x));
  }
}

std::pair<Tensor, Mamba3State> Mamba3::forward(const Tensor& x, const Mamba3State& state) const {
  KILN_CHECK(x.defined(), kLayer, "input is an undefined tensor");
  KILN_CHECK(x.dim() == 3 && x.shape()[2] == d_model && x.shape()[1] > 0, kLayer,
             "input {} must be [B, T, {}] (d_model = {}) with T > 0", shape_str(x), d_model, d_model);
  KILN_CHECK(is_floating(x.dtype()), kLayer, "input must be floating, got {} {}", name(x.dtype()), shape_str(x));
  const int64_t B = x.shape()[0], T = x.shape()[1], H = nheads, P = headdim, N = d_state, R = num_rope_angles;
  check_state(state, B, x);
  Tensor zx = in_proj->forward(x);  // [B, T, 2 Di + 2 N + 3 H + R]
  // One split (one autograd node: backward joins the eight gradients with one
  // cat) rather than eight narrows, whose backward would zero-fill a whole
  // [B, T, 2 Di + 2 N + 3 H + R] buffer per part and sum the eight.
  const std::vector<Tensor> parts = split(zx, {d_inner, d_inner, N, N, H, H, H, R}, 2);
  const Tensor &z = parts[0], &xs = parts[1], &Bm = parts[2], &Cm = parts[3], &dd_dt = parts[4], &dd_A = parts[5],
               &trap = parts[6], &ang = parts[7];
  // A = -max(f(dd_A), A_floor), f(v) = 1 + v (v >= 0), 1 / (1 - v) (v < 0):
  // f = (1 + relu(v)) / (1 + relu(-v)), one expression for both branches.
  Tensor f = div(add(relu(dd_A), 1.0), add(relu(neg(dd_A)), 1.0));
  Tensor A = neg(clamp_min(f, options.A_floor));
  Tensor dt = softplus(add(dd_dt, dt_bias));  // [B, T, H]
  Tensor adt = mul(A, dt);
  Tensor Bn = B_norm->forward(Bm), Cn = C_norm->forward(Cm);  // [B, T, N]
  Tensor q = expand(unsqueeze(Cn, 2), {B, T, H, N}), k = expand(unsqueeze(Bn, 2), {B, T, H, N});
  Tensor angles = expand(unsqueeze(ang, 2), {B, T, H, R});
  auto res = [&] {
    try {
      return mamba3_scan(q, k, reshape(xs, {B, T, H, P}), adt, dt, trap, C_bias, B_bias, angles, D,
                         reshape(z, {B, T, H, P}), state, options.chunk_size);
    } catch (const Error& e) {
      throw Error(kLayer, e.what(), e.file(), e.line());
    }
  }();
  Tensor y = out_proj->forward(reshape(res.y, {B, T, d_inner}));
  return {y, res.state};
}

std::pair<Tensor, Mamba3State> Mamba3::step(const Tensor& x, const Mamba3State& state) const {
  KILN_CHECK(x.defined(), kLayer, "step: input is an undefined tensor");
  KILN_CHECK((x.dim() == 2 && x.shape()[1] == d_model) || (x.dim() == 3 && x.shape()[1] == 1 && x.shape()[2] == d_model),
             kLayer, "step: input {} must be [B, {}] or [B, 1, {}] (one token; d_model = {})", shape_str(x), d_model,
             d_model, d_model);
  const int64_t B = x.shape()[0];
  auto [y, st] = forward(x.dim() == 2 ? unsqueeze(x, 1) : x, state);
  return {x.dim() == 2 ? reshape(y, {B, d_model}) : y, st};
}

std::string Mamba3::extra_repr() const {
  return "d_model=" + std::to_string(d_model) + ", d_state=" + std::to_string(d_state) +
         ", expand=" + std::to_string(options.expand) + ", headdim=" + std::to_string(headdim) +
         ", nheads=" + std::to_string(nheads) + ", rope_angles=" + std::to_string(num_rope_angles);
}

}  // namespace kiln::nn
