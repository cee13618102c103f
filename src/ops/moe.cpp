// The MoE primitives: argument checks, allocation, the calls into the moe
// kernel family (src/backend/cpu/moe/) and grouped_linear's vjp.
#include "kiln/ops/moe.h"
#include "kiln/ops/moe_combine.h"

#include <numeric>

#include "kiln/core/grad_mode.h"
#include "kiln/ops/creation.h"
#include "kiln/ops/record.h"
#include "kiln/ops/unary.h"
#include "src/backend/backend.h"
#include "src/backend/cpu/elementwise/elementwise.h"
#include "src/backend/cpu/index/index.h"
#include "src/backend/cpu/moe/moe.h"
#include "src/ops/checks.h"

namespace kiln {

namespace {

std::string sizes_str(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

}  // namespace

MoEGroups moe_group(const Tensor& experts, int64_t E) {
  check_defined("moe_group", experts, "experts");
  backend::device_of("moe_group", experts);
  KILN_CHECK(E > 0, "moe_group", "num_experts must be positive, got {}", E);
  KILN_CHECK(experts.dtype() == kI64 || experts.dtype() == kI32, "moe_group",
             "experts {} must be integer (i64 or i32), got {}", to_string(experts.shape()), name(experts.dtype()));
  const int64_t M = experts.numel();
  Tensor ex = Tensor::empty({M}, kI64, experts.device());
  {
    const std::vector<int64_t> v = experts.to_vector<int64_t>();
    for (int64_t i = 0; i < M; ++i) {
      KILN_CHECK(v[size_t(i)] >= 0 && v[size_t(i)] < E, "moe_group", "experts {}: entry {} is {}, outside [0, {})",
                 to_string(experts.shape()), i, v[size_t(i)], E);
      ex.data<int64_t>()[i] = v[size_t(i)];
    }
  }
  MoEGroups g;
  g.order = Tensor::empty({M}, kI64, experts.device());
  Tensor counts = Tensor::empty({E}, kI64, experts.device());
  backend::cpu::moe_group(ex, E, g.order, counts);
  g.counts.assign(counts.data<int64_t>(), counts.data<int64_t>() + E);
  return g;
}

namespace {

// A row map's entries as i64 on the CPU, checked: values in [0, bound), and
// distinct when `permutation` (then bound == M).
Tensor checked_rows(const char* what, const Tensor& rows, int64_t M, int64_t bound, bool permutation) {
  if (!rows.defined()) return rows;
  backend::device_of("grouped_linear", rows);
  KILN_CHECK(rows.dtype() == kI64 || rows.dtype() == kI32, "grouped_linear", "{} {} must be integer (i64 or i32), got {}",
             what, to_string(rows.shape()), name(rows.dtype()));
  KILN_CHECK(rows.dim() == 1 && rows.numel() == M, "grouped_linear", "{} {} must be [M = {}] (one entry per row)", what,
             to_string(rows.shape()), M);
  Tensor r = Tensor::empty({M}, kI64, rows.device());
  const std::vector<int64_t> v = rows.to_vector<int64_t>();
  std::vector<char> seen(permutation ? size_t(M) : 0, 0);
  int64_t* out = r.data<int64_t>();
  for (int64_t i = 0; i < M; ++i) {
    const int64_t x = v[size_t(i)];
    KILN_CHECK(x >= 0 && x < bound, "grouped_linear", "{} {}: entry {} is {}, outside [0, {})", what,
               to_string(rows.shape()), i, x, bound);
    if (permutation) {
      KILN_CHECK(!seen[size_t(x)], "grouped_linear", "{} {} must be a permutation of [0, {}), but {} appears twice",
                 what, to_string(rows.shape()), M, x);
      seen[size_t(x)] = 1;
    }
    out[i] = x;
  }
  return r;
}

}  // namespace

Tensor grouped_linear(const Tensor& x, const Tensor& weight, const std::vector<int64_t>& sizes) {
  return grouped_linear(x, weight, sizes, Tensor(), Tensor());
}

namespace {

// grouped_linear's checked operands: the row maps as i64, x and weight
// contiguous, and the sizes (E experts, O / I out / in width, T input rows,
// M product rows).
struct GroupedArgs {
  Tensor x, weight, gather, scatter;
  int64_t E, O, I, T, M;
};

GroupedArgs check_grouped(const Tensor& x, const Tensor& weight, const std::vector<int64_t>& sizes,
                          const Tensor& gather_in, const Tensor& scatter_in) {
  check_defined("grouped_linear", x, "input");
  check_defined("grouped_linear", weight, "weight");
  backend::device_of("grouped_linear", x, weight);
  KILN_CHECK(weight.dim() == 3, "grouped_linear", "weight {} must be 3-D [experts, out_features, in_features]",
             to_string(weight.shape()));
  KILN_CHECK(x.dim() == 2, "grouped_linear", "input {} must be 2-D [rows, in_features]", to_string(x.shape()));
  const int64_t E = weight.size(0), O = weight.size(1), I = weight.size(2), T = x.size(0);
  KILN_CHECK(x.size(1) == I, "grouped_linear", "input {} does not match weight {} (in_features {})",
             to_string(x.shape()), to_string(weight.shape()), I);
  KILN_CHECK(x.dtype() == weight.dtype(), "grouped_linear", "dtype mismatch: input {} is {} and weight {} is {}",
             to_string(x.shape()), name(x.dtype()), to_string(weight.shape()), name(weight.dtype()));
  KILN_CHECK(is_floating(x.dtype()), "grouped_linear", "input {} must be floating, got {}", to_string(x.shape()),
             name(x.dtype()));
  KILN_CHECK(int64_t(sizes.size()) == E, "grouped_linear", "group_sizes {} must have one entry per expert ({})",
             sizes_str(sizes), E);
  int64_t total = 0;
  for (int64_t s : sizes) {
    KILN_CHECK(s >= 0, "grouped_linear", "group_sizes {} has a negative entry", sizes_str(sizes));
    total += s;
  }
  const int64_t M = total;
  if (!gather_in.defined()) {
    KILN_CHECK(total == T, "grouped_linear", "group_sizes {} add up to {}, but input {} has {} rows", sizes_str(sizes),
               total, to_string(x.shape()), T);
  }
  return {x.is_contiguous() ? x : x.contiguous(),
          weight.is_contiguous() ? weight : weight.contiguous(),
          checked_rows("gather", gather_in, M, T, false),
          checked_rows("scatter", scatter_in, M, M, true),
          E, O, I, T, M};
}

// The vjp of out[scatter[r]] = x[gather[r]] @ weight[e]^T given g = d out
// (saved: x when weight needs a gradient, weight when x does, gather, scatter).
Grads grouped_linear_backward(const Tensor& g, const VjpArgs& v, const std::vector<int64_t>& sizes, int64_t E,
                              int64_t O, int64_t I, int64_t M, int64_t T) {
  const Tensor& gather = v.saved[2];
  const Tensor& scatter = v.saved[3];
  Tensor gx, gw;
  if (v.needs(0)) {  // row r: g[scatter[r]] [O] @ weight[e] [O, I], then summed into x's row gather[r]
    if (!gather.defined()) {
      gx = Tensor::empty({M, I}, g.dtype(), g.device());
      backend::cpu::grouped_matmul(g, v.saved[1], sizes, gx, /*trans_b=*/false, scatter);
    } else {
      Tensor rows = Tensor::empty({M, I}, g.dtype(), g.device());
      backend::cpu::grouped_matmul(g, v.saved[1], sizes, rows, /*trans_b=*/false, scatter);
      gx = zeros({T, I}, {.dtype = g.dtype(), .device = g.device()});
      backend::cpu::index_add(gx, 0, gather, rows);
    }
  }
  if (v.needs(1)) {  // gw[e] = sum over run e of g[scatter[r]]^T x[gather[r]]
    gw = Tensor::empty({E, O, I}, g.dtype(), g.device());
    backend::cpu::grouped_matmul_weight_grad(g, v.saved[0], sizes, gw, scatter, gather);
  }
  return {gx, gw};
}

}  // namespace

Tensor grouped_linear(const Tensor& x, const Tensor& weight, const std::vector<int64_t>& sizes, const Tensor& gather_in,
                      const Tensor& scatter_in) {
  const GroupedArgs a = check_grouped(x, weight, sizes, gather_in, scatter_in);
  Tensor out = Tensor::empty({a.M, a.O}, x.dtype(), x.device());
  backend::cpu::grouped_matmul(a.x, a.weight, sizes, out, /*trans_b=*/true, a.gather, a.scatter);

  if (needs_grad(x, weight)) {
    record("grouped_linear", {x, weight}, {out},
           {needs_grad(weight) ? a.x : Tensor(), needs_grad(x) ? a.weight : Tensor(), a.gather, a.scatter},
           [sizes, E = a.E, O = a.O, I = a.I, M = a.M, T = a.T](const VjpArgs& v) -> Grads {
             KILN_CHECK(!GradMode::is_enabled(), "grouped_linear",
                        "double backward (create_graph) is not supported");
             const Tensor g = v.grad().is_contiguous() ? v.grad() : v.grad().contiguous();
             return grouped_linear_backward(g, v, sizes, E, O, I, M, T);
           });
  }
  return out;
}

Tensor grouped_linear_gelu(const Tensor& x, const Tensor& weight, const std::vector<int64_t>& sizes,
                           const Tensor& gather_in, const Tensor& scatter_in) {
  const GroupedArgs a = check_grouped(x, weight, sizes, gather_in, scatter_in);
  if (x.dtype() != kF32) return gelu(grouped_linear(x, weight, sizes, gather_in, scatter_in));
  const bool grad = needs_grad(x, weight);
  Tensor out = Tensor::empty({a.M, a.O}, x.dtype(), x.device());
  Tensor dgelu = grad ? Tensor::empty({a.M, a.O}, x.dtype(), x.device()) : Tensor();
  backend::cpu::grouped_matmul_gelu(a.x, a.weight, sizes, out, dgelu, a.gather, a.scatter);

  if (grad) {
    record("grouped_linear_gelu", {x, weight}, {out},
           {needs_grad(weight) ? a.x : Tensor(), needs_grad(x) ? a.weight : Tensor(), a.gather, a.scatter, dgelu},
           [sizes, E = a.E, O = a.O, I = a.I, M = a.M, T = a.T](const VjpArgs& v) -> Grads {
             KILN_CHECK(!GradMode::is_enabled(), "grouped_linear_gelu",
                        "double backward (create_graph) is not supported");
             // d pre-activation = g * gelu'(pre): the product gelu's backward
             // forms, with the derivative kept by the forward.
             Tensor gp = Tensor::empty({M, O}, v.grad().dtype(), v.grad().device());
             backend::cpu::binary(backend::cpu::BinaryOp::mul, gp, v.grad(), v.saved[4]);
             return grouped_linear_backward(gp, v, sizes, E, O, I, M, T);
           });
  }
  return out;
}

Tensor moe_combine(const Tensor& y, const Tensor& weights) {
  check_defined("moe_combine", y, "y");
  check_defined("moe_combine", weights, "weights");
  backend::device_of("moe_combine", y, weights);
  KILN_CHECK(weights.dim() == 2, "moe_combine", "weights {} must be 2-D [N, k]", to_string(weights.shape()));
  const int64_t N = weights.size(0), k = weights.size(1);
  KILN_CHECK(y.dim() == 2 && y.size(0) == N * k, "moe_combine", "y {} must be [N k = {}, D] for weights {}",
             to_string(y.shape()), N * k, to_string(weights.shape()));
  KILN_CHECK(y.dtype() == weights.dtype() && is_floating(y.dtype()), "moe_combine",
             "y {} ({}) and weights {} ({}) must share one floating dtype", to_string(y.shape()), name(y.dtype()),
             to_string(weights.shape()), name(weights.dtype()));
  const int64_t D = y.size(1);
  const Tensor yc = y.is_contiguous() ? y : y.contiguous();
  const Tensor wc = weights.is_contiguous() ? weights : weights.contiguous();
  Tensor out = Tensor::empty({N, D}, y.dtype(), y.device());
  backend::cpu::moe_combine(yc, wc, out);
  if (needs_grad(y, weights)) {
    record("moe_combine", {y, weights}, {out}, {yc, wc}, [N, k, D](const VjpArgs& v) -> Grads {
      KILN_CHECK(!GradMode::is_enabled(), "moe_combine", "double backward (create_graph) is not supported");
      const Tensor g = v.grad().is_contiguous() ? v.grad() : v.grad().contiguous();
      Tensor dy = v.needs(0) ? Tensor::empty({N * k, D}, g.dtype(), g.device()) : Tensor();
      Tensor dw = v.needs(1) ? Tensor::empty({N, k}, g.dtype(), g.device()) : Tensor();
      backend::cpu::moe_combine_backward(g, v.saved[0], v.saved[1], dy, dw);
      return {dy, dw};
    });
  }
  return out;
}

}  // namespace kiln
