// The Mamba-3 scan op: checks, allocation, the CPU kernels
// (src/backend/cpu/ssm/), and one autograd node whose backward is the
// kernels' fused adjoint (NOTE [Mamba-3 scan backward]).
#include "kiln/ops/ssm.h"

#include <array>
#include <string>

#include "kiln/core/grad_mode.h"
#include "kiln/ops/creation.h"
#include "kiln/ops/record.h"
#include "kiln/ops/shape.h"
#include "src/backend/backend.h"
#include "src/backend/cpu/ssm/ssm.h"
#include "src/ops/checks.h"

namespace kiln {

namespace {

constexpr const char* kOp = "mamba3_scan";
// From this many steps on, Mamba3ScanAlgo::automatic takes the chunked form.
constexpr int64_t kChunkedMinT = 16;

bool has_shape(const Tensor& t, std::initializer_list<int64_t> s) {
  if (t.dim() != static_cast<int64_t>(s.size())) return false;
  int64_t i = 0;
  for (int64_t e : s)
    if (t.shape()[i++] != e) return false;
  return true;
}

std::string dims_str(std::initializer_list<int64_t> s) {
  std::string out = "[";
  for (int64_t e : s) out += (out.size() > 1 ? ", " : "") + std::to_string(e);
  return out + "]";
}

// Checks every argument (nothing is allocated or written before this).
void check_args(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& adt, const Tensor& dt,
                const Tensor& trap, const Tensor& q_bias, const Tensor& k_bias, const Tensor& angles,
                const Tensor& D, const Tensor& z, const Mamba3State& init) {
  for (auto [t, what] : {std::pair<const Tensor*, const char*>{&q, "q"}, {&k, "k"}, {&v, "v"}, {&adt, "adt"},
                         {&dt, "dt"}, {&trap, "trap"}, {&q_bias, "q_bias"}, {&k_bias, "k_bias"},
                         {&angles, "angles"}})
    check_defined(kOp, *t, what);
  const Device dev = backend::device_of(kOp, q, k, v, adt, dt, trap, q_bias, k_bias, angles, D, z, init.angle,
                                        init.h, init.k, init.v);
  KILN_CHECK(dev == kCPU, kOp, "runs on the CPU only, got tensors on {}", dev.str());
  KILN_CHECK(q.dtype() == DType::f32 || q.dtype() == DType::f64, kOp, "expects f32 or f64, got q {} {}",
             name(q.dtype()), to_string(q.shape()));
  KILN_CHECK(q.dim() == 4 && q.shape()[1] > 0, kOp, "q {} must be [B, T, H, N] with T > 0", to_string(q.shape()));
  const int64_t B = q.shape()[0], T = q.shape()[1], H = q.shape()[2], N = q.shape()[3];
  KILN_CHECK(v.dim() == 4, kOp, "v {} must be [B, T, H, P] for q {}", to_string(v.shape()), to_string(q.shape()));
  const int64_t P = v.shape()[3];
  KILN_CHECK(angles.dim() == 4, kOp, "angles {} must be [B, T, H, R] for q {}", to_string(angles.shape()),
             to_string(q.shape()));
  const int64_t R = angles.shape()[3];
  KILN_CHECK(2 * R <= N, kOp, "angles {} has R = {} angle pairs, more than N / 2 for q {}",
             to_string(angles.shape()), R, to_string(q.shape()));
  auto expect = [&](const Tensor& t, const char* what, std::initializer_list<int64_t> s) {
    if (!t.defined()) return;
    KILN_CHECK(has_shape(t, s), kOp, "{} {} must be {} for q {} and v {}", what, to_string(t.shape()), dims_str(s),
               to_string(q.shape()), to_string(v.shape()));
    KILN_CHECK(t.dtype() == q.dtype(), kOp, "dtype mismatch: q is {} and {} is {}", name(q.dtype()), what,
               name(t.dtype()));
  };
  expect(k, "k", {B, T, H, N});
  expect(v, "v", {B, T, H, P});
  expect(adt, "adt", {B, T, H});
  expect(dt, "dt", {B, T, H});
  expect(trap, "trap", {B, T, H});
  expect(q_bias, "q_bias", {H, N});
  expect(k_bias, "k_bias", {H, N});
  expect(angles, "angles", {B, T, H, R});
  expect(D, "D", {H});
  expect(z, "z", {B, T, H, P});
  const int n_init = init.angle.defined() + init.h.defined() + init.k.defined() + init.v.defined();
  KILN_CHECK(n_init == 0 || n_init == 4, kOp, "the initial state needs all of angle, h, k, v or none, got {} of 4",
             n_init);
  expect(init.angle, "state.angle", {B, H, R});
  expect(init.h, "state.h", {B, H, P, N});
  expect(init.k, "state.k", {B, H, N});
  expect(init.v, "state.v", {B, H, P});
}

Tensor contig(const Tensor& t) { return t.defined() ? contiguous(t) : Tensor(); }

// q or k [B, T, H, N] expanded over the heads (stride 0 on H, as nn::Mamba3
// passes its one group of B and C): the kernels read its [B, T, 1, N] rows
// for every head instead of H copies.
bool heads_shared(const Tensor& t) { return t.shape()[2] > 1 && t.strides()[2] == 0; }

}  // namespace

// NOTE [Mamba-3 scan backward]: forward keeps every step's angle state
// theta [B, T, H, R] and the state h before each chunk of `chunk` steps
// [B, H, ceil(T / chunk), P, N] and the pre-gate output o [B, T, H, P];
// backward recomputes one chunk's states at a
// time from its checkpoint and runs the adjoint of the recurrence through the
// chunk, last step first (src/backend/cpu/ssm/isa/ssm.cpp). The floor in the
// angle's wrap is piecewise constant, so the angle's gradient passes through
// it unchanged. From kChunkedMinT steps on (or when asked) forward and
// backward take the chunked matrix form instead (NOTE [Mamba-3 chunked scan]
// in src/backend/cpu/ssm/isa/ssm_chunked.cpp), from the same saved tensors;
// the node remembers which form ran.
Mamba3ScanResult mamba3_scan(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& adt, const Tensor& dt,
                             const Tensor& trap, const Tensor& q_bias, const Tensor& k_bias, const Tensor& angles,
                             const Tensor& D, const Tensor& z, const Mamba3State& initial, int64_t chunk,
                             Mamba3ScanAlgo algo) {
  check_args(q, k, v, adt, dt, trap, q_bias, k_bias, angles, D, z, initial);
  KILN_CHECK(chunk > 0, kOp, "chunk must be positive, got {}", chunk);
  const int64_t B = q.shape()[0], T = q.shape()[1], H = q.shape()[2], N = q.shape()[3], P = v.shape()[3],
                R = angles.shape()[3];
  const bool chunked = algo == Mamba3ScanAlgo::chunked || (algo == Mamba3ScanAlgo::automatic && T >= kChunkedMinT);
  const DType dty = q.dtype();
  const bool grad = needs_grad(q, k, v, adt, dt, trap, q_bias, k_bias, angles, D, z) ||
                    needs_grad(initial.angle, initial.h, initial.k, initial.v);
  backend::cpu::Mamba3Scan s;
  {
    NoGradGuard no_grad;
    if (heads_shared(q) && heads_shared(k)) s.q = contig(narrow(q, 2, 0, 1)), s.k = contig(narrow(k, 2, 0, 1));
    else s.q = contig(q), s.k = contig(k);
    s.v = contig(v), s.adt = contig(adt), s.dt = contig(dt);
    s.trap = contig(trap), s.q_bias = contig(q_bias), s.k_bias = contig(k_bias), s.angles = contig(angles);
    s.D = contig(D), s.z = contig(z);
    s.angle0 = contig(initial.angle), s.h0 = contig(initial.h), s.k0 = contig(initial.k), s.v0 = contig(initial.v);
  }
  s.y = Tensor::empty({B, T, H, P}, dty, kCPU);
  s.angle_T = Tensor::empty({B, H, R}, dty, kCPU);
  s.h_T = Tensor::empty({B, H, P, N}, dty, kCPU);
  s.k_T = Tensor::empty({B, H, N}, dty, kCPU);
  s.v_T = Tensor::empty({B, H, P}, dty, kCPU);
  s.chunk = chunk;
  if (grad) {
    s.theta_all = Tensor::empty({B, T, H, R}, dty, kCPU);
    s.h_ckpt = Tensor::empty({B, H, (T + chunk - 1) / chunk, P, N}, dty, kCPU);
    s.o_all = Tensor::empty({B, T, H, P}, dty, kCPU);
  }
  if (chunked) backend::cpu::mamba3_scan_forward_chunked(s);
  else backend::cpu::mamba3_scan_forward(s);
  Mamba3ScanResult out{s.y, {s.angle_T, s.h_T, s.k_T, s.v_T}};
  if (grad) {
    const Tensor ins[] = {q, k, v, adt, dt, trap, q_bias, k_bias, angles, D, z,
                          initial.angle, initial.h, initial.k, initial.v};
    const Tensor outs[] = {s.y, s.angle_T, s.h_T, s.k_T, s.v_T};
    const Tensor saved[] = {s.q,  s.k, s.v,      s.adt,    s.dt,     s.trap,   s.q_bias, s.k_bias,
                            s.angles, s.D, s.z, s.angle0, s.h0, s.k0, s.v0, s.theta_all, s.h_ckpt, s.o_all};
    record(kOp, std::span<const Tensor>(ins), std::span<const Tensor>(outs), std::span<const Tensor>(saved),
           [chunk, chunked](const VjpArgs& a) -> Grads {
             KILN_CHECK(!GradMode::is_enabled(), kOp, "has no second derivative (backward with create_graph)");
             backend::cpu::Mamba3Scan s;
             const auto& sv = a.saved;
             s.q = sv[0], s.k = sv[1], s.v = sv[2], s.adt = sv[3], s.dt = sv[4], s.trap = sv[5];
             s.q_bias = sv[6], s.k_bias = sv[7], s.angles = sv[8], s.D = sv[9], s.z = sv[10];
             s.angle0 = sv[11], s.h0 = sv[12], s.k0 = sv[13], s.v0 = sv[14];
             s.theta_all = sv[15], s.h_ckpt = sv[16], s.o_all = sv[17], s.chunk = chunk;
             backend::cpu::Mamba3ScanGrads g;
             g.dy = contiguous(a.grads[0]), g.d_angle_T = contiguous(a.grads[1]), g.d_h_T = contiguous(a.grads[2]);
             g.d_k_T = contiguous(a.grads[3]), g.d_v_T = contiguous(a.grads[4]);
             auto like = [](const Tensor& t) { return t.defined() ? Tensor::empty(t.shape(), t.dtype(), kCPU) : Tensor(); };
             const Shape qk_shape = {s.v.shape()[0], s.v.shape()[1], s.v.shape()[2], s.q.shape()[3]};
             g.dq = Tensor::empty(qk_shape, s.q.dtype(), kCPU), g.dk = Tensor::empty(qk_shape, s.k.dtype(), kCPU);
             g.dv = like(s.v), g.dadt = like(s.adt), g.ddt = like(s.dt);
             g.dtrap = like(s.trap), g.dangles = like(s.angles), g.dq_bias = like(s.q_bias);
             g.dk_bias = like(s.k_bias), g.dD = like(s.D), g.dz = like(s.z);
             g.d_angle0 = like(s.angle0), g.d_h0 = like(s.h0), g.d_k0 = like(s.k0), g.d_v0 = like(s.v0);
             if (chunked) backend::cpu::mamba3_scan_backward_chunked(s, g);
             else backend::cpu::mamba3_scan_backward(s, g);
             Grads out = {g.dq,    g.dk,      g.dv,     g.dadt,   g.ddt,      g.dtrap, g.dq_bias, g.dk_bias,
                          g.dangles, g.dD,   g.dz,     g.d_angle0, g.d_h0, g.d_k0,    g.d_v0};
             for (size_t i = 0; i < out.size(); ++i)
               if (!a.needs(i)) out[i] = Tensor();
             return out;
           });
  }
  return out;
}

Mamba3ScanResult mamba3_scan_reference(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& adt,
                                       const Tensor& dt, const Tensor& trap, const Tensor& q_bias,
                                       const Tensor& k_bias, const Tensor& angles, const Tensor& D,
                                       const Tensor& z, const Mamba3State& initial) {
  check_args(q, k, v, adt, dt, trap, q_bias, k_bias, angles, D, z, initial);
  const int64_t B = q.shape()[0], T = q.shape()[1], H = q.shape()[2], N = q.shape()[3], P = v.shape()[3],
                R = angles.shape()[3];
  const DType dty = q.dtype();
  NoGradGuard no_grad;
  backend::cpu::Mamba3Scan s;
  s.q = contig(q), s.k = contig(k), s.v = contig(v), s.adt = contig(adt), s.dt = contig(dt);
  s.trap = contig(trap), s.q_bias = contig(q_bias), s.k_bias = contig(k_bias), s.angles = contig(angles);
  s.D = contig(D), s.z = contig(z);
  s.angle0 = contig(initial.angle), s.h0 = contig(initial.h), s.k0 = contig(initial.k), s.v0 = contig(initial.v);
  s.y = Tensor::empty({B, T, H, P}, dty, kCPU);
  s.angle_T = Tensor::empty({B, H, R}, dty, kCPU);
  s.h_T = Tensor::empty({B, H, P, N}, dty, kCPU);
  s.k_T = Tensor::empty({B, H, N}, dty, kCPU);
  s.v_T = Tensor::empty({B, H, P}, dty, kCPU);
  backend::cpu::ref::mamba3_scan_forward(s);
  return {s.y, {s.angle_T, s.h_T, s.k_T, s.v_T}};
}

}  // namespace kiln
