// rotary_embedding: argument checks, positions, the per-call cos/sin table
// and the vjp. The op is a rotation R(theta) of feature pairs; its vjp is
// R(-theta), the same kernel with the sine negated, recorded in turn with
// R(theta) as its vjp, so backward is one pass and create_graph works.
#include "kiln/ops/rotary.h"

#include <cmath>
#include <vector>

#include "kiln/ops/record.h"
#include "src/backend/backend.h"
#include "src/backend/cpu/nn/rotary.h"
#include "src/ops/checks.h"

namespace kiln {

namespace {

// out = x rotated by sign * theta; table [2, T, rd / 2] holds cos and sin.
Tensor rotate(const backend::cpu::RotaryGeom& g, const Tensor& x, const Tensor& table, int sign) {
  Tensor out = Tensor::empty(x.shape(), x.dtype(), x.device());
  KILN_LAUNCH("rotary", backend::cpu::rotary(g, x, table, sign, out));
  if (needs_grad(x))
    record(sign > 0 ? "rotary_embedding" : "rotary_embedding_backward", {x}, {out}, {},
           [g, table, sign](const VjpArgs& v) -> Grads { return {rotate(g, v.grad(), table, -sign)}; });
  return out;
}

}  // namespace

Tensor rotary_embedding(const Tensor& x, const RotaryOptions& o) {
  const char* op = "rotary_embedding";
  check_defined(op, x);
  backend::device_of(op, x, o.positions);
  KILN_CHECK(x.dim() >= 2, op, "input {} must have at least 2 dims [..., T, D], got {}-D", to_string(x.shape()),
             x.dim());
  KILN_CHECK(is_floating(x.dtype()), op, "expects a floating input, got {} {}", name(x.dtype()),
             to_string(x.shape()));
  const int64_t T = x.size(-2), D = x.size(-1);
  const int64_t rd = o.rotary_dim == -1 ? D : o.rotary_dim;
  KILN_CHECK(rd > 0 && rd % 2 == 0, op, "rotary_dim must be positive and even, got {} (input {}, -1 means D)", rd,
             to_string(x.shape()));
  KILN_CHECK(rd <= D, op, "rotary_dim {} exceeds the feature dim D = {} of input {}", rd, D, to_string(x.shape()));
  KILN_CHECK(o.base > 0 && std::isfinite(o.base), op, "base must be positive and finite, got {}", o.base);

  std::vector<int64_t> pos(static_cast<size_t>(T));
  if (o.positions.defined()) {
    const Tensor& p = o.positions;
    KILN_CHECK(is_integral(p.dtype()), op, "positions must be an integer tensor, got {} {}", name(p.dtype()),
               to_string(p.shape()));
    KILN_CHECK(p.dim() == 1 && p.size(0) == T, op, "positions {} must be 1-D of length T = {} (dim -2 of input {})",
               to_string(p.shape()), T, to_string(x.shape()));
    KILN_CHECK(o.offset == 0, op, "give either offset ({}) or positions, not both", o.offset);
    pos = p.to_vector<int64_t>();
  } else {
    for (int64_t t = 0; t < T; ++t) pos[size_t(t)] = o.offset + t;
  }

  backend::cpu::RotaryGeom g;
  g.T = T, g.D = D, g.rd = rd, g.interleaved = o.interleaved;
  g.rows = T * D == 0 ? 0 : x.numel() / (T * D);
  Tensor table = Tensor::empty({2, T, rd / 2}, x.dtype() == kF64 ? kF64 : kF32, x.device());
  KILN_LAUNCH("rotary_table", backend::cpu::rotary_table(pos, o.base, rd, table));
  return rotate(g, x, table, 1);
}

}  // namespace kiln
