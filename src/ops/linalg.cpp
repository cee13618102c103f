// Matrix products: argument checks, shape rules (torch.matmul's 1-D and
// batch-broadcast cases), the calls into backend::cpu::matmul, and their vjps.
#include "kiln/ops/linalg.h"

#include "kiln/core/grad_mode.h"
#include "kiln/ops/binary.h"
#include "kiln/core/replay_fusion.h"
#include "kiln/ops/record.h"
#include "kiln/ops/reduce.h"
#include "kiln/ops/shape.h"
#include "src/backend/backend.h"
#include "src/backend/cpu/copy/copy.h"
#include "src/backend/cpu/linalg/matmul.h"
#include "src/ops/checks.h"

namespace kiln {

namespace {

// A view of t with new geometry that the tape does not see (kernel plumbing).
Tensor raw_view(const Tensor& t, Shape shape, Strides strides) {
  return Tensor::make_view(t.storage(), std::move(shape), std::move(strides), t.storage_offset(), t.dtype());
}

// t's last two dims swapped, untracked: oneDNN reads the strides, nothing is copied.
Tensor raw_transpose(const Tensor& t) {
  Shape s = t.shape();
  Strides st = t.strides();
  std::swap(s[s.size() - 1], s[s.size() - 2]);
  std::swap(st[st.size() - 1], st[st.size() - 2]);
  return raw_view(t, s, st);
}

// Two operands of one product: same dtype (no implicit promotion, as in
// torch), and a dtype with a matrix kernel.
void check_pair(const char* op, const Tensor& a, const Tensor& b) {
  check_defined(op, a, "a");
  check_defined(op, b, "b");
  KILN_CHECK(a.dtype() == b.dtype(), op,
             "dtype mismatch: a {} is {} and b {} is {}; convert one with to() first", to_string(a.shape()),
             name(a.dtype()), to_string(b.shape()), name(b.dtype()));
  KILN_CHECK(a.dtype() != kBool, op, "bool tensors are not supported (a {}, b {})", to_string(a.shape()),
             to_string(b.shape()));
}

void check_inner(const char* op, const Tensor& a, const Tensor& b, int64_t ka, int64_t kb) {
  KILN_CHECK(ka == kb, op, "a {} and b {} cannot be multiplied: inner dims {} and {} differ", to_string(a.shape()),
             to_string(b.shape()), ka, kb);
}

// Shape of a [..., M, K] @ b [..., K, N]: broadcast batch dims + [M, N].
Shape product_shape(const char* op, const Tensor& a, const Tensor& b) {
  int64_t na = a.dim() - 2, nb = b.dim() - 2, n = std::max(na, nb);
  Shape out = Shape::filled(size_t(n), 1);
  for (int64_t i = 0; i < n; ++i) {
    int64_t ia = i - (n - na), ib = i - (n - nb);
    int64_t sa = ia >= 0 ? a.shape()[ia] : 1, sb = ib >= 0 ? b.shape()[ib] : 1;
    KILN_CHECK(sa == sb || sa == 1 || sb == 1, op,
               "batch dims of a {} and b {} do not broadcast (dim {} from the left of the output: {} vs {})",
               to_string(a.shape()), to_string(b.shape()), i, sa, sb);
    out[i] = sa == 1 ? sb : sa;
  }
  out.push_back(a.shape()[a.dim() - 2]);
  out.push_back(b.shape()[b.dim() - 1]);
  return out;
}

// The differentiable core of matmul/mm/bmm: a [..., M, K] @ b [..., K, N]
// with broadcast batch dims, both operands >= 2-D and already checked.
Tensor product(const char* op, const Tensor& a, const Tensor& b) {
  Tensor out = Tensor::empty(product_shape(op, a, b), a.dtype(), a.device());
  KILN_LAUNCH("matmul", backend::cpu::matmul(a, b, out));
  if (needs_grad(a, b)) {
    // grad_a = g @ b^T and grad_b = a^T @ g, summed over broadcast batch dims.
    // Each needs only the other operand.
    record(op, {a, b}, {out}, {needs_grad(b) ? a : Tensor(), needs_grad(a) ? b : Tensor()},
           [a_shape = a.shape(), b_shape = b.shape()](const VjpArgs& v) -> Grads {
             const Tensor &g = v.grad(), &a = v.saved[0], &b = v.saved[1];
             Tensor ga, gb;
             if (v.needs(0)) ga = sum_to(matmul(g, b.transpose(-1, -2)), a_shape);
             if (v.needs(1)) {
               if (b_shape.size() == 2 && a_shape.size() > 2)  // b shared by every batch: one GEMM over all rows
                 gb = mm(flatten(a, 0, -2).t(), flatten(g, 0, -2));
               else
                 gb = sum_to(matmul(a.transpose(-1, -2), g), b_shape);
             }
             return {ga, gb};
           });
  }
  return out;
}

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b) {
  check_pair("matmul", a, b);
  KILN_CHECK(a.dim() >= 1 && b.dim() >= 1, "matmul",
             "both arguments need at least 1 dim, got a {} ({}-D) and b {} ({}-D)", to_string(a.shape()), a.dim(),
             to_string(b.shape()), b.dim());
  check_inner("matmul", a, b, a.shape()[a.dim() - 1], b.dim() == 1 ? b.shape()[0] : b.shape()[b.dim() - 2]);
  if (a.dim() == 1 && b.dim() == 1) return dot(a, b);
  // 1-D operands gain a unit dim (a as a row, b as a column) that the result loses.
  if (a.dim() == 1) return squeeze(product("matmul", unsqueeze(a, 0), b), -2);
  if (b.dim() == 1) return squeeze(product("matmul", a, unsqueeze(b, -1)), -1);
  return product("matmul", a, b);
}

Tensor mm(const Tensor& a, const Tensor& b) {
  check_pair("mm", a, b);
  KILN_CHECK(a.dim() == 2 && b.dim() == 2, "mm", "expects 2-D tensors, got a {} and b {}", to_string(a.shape()),
             to_string(b.shape()));
  check_inner("mm", a, b, a.shape()[1], b.shape()[0]);
  return product("mm", a, b);
}

Tensor bmm(const Tensor& a, const Tensor& b) {
  check_pair("bmm", a, b);
  KILN_CHECK(a.dim() == 3 && b.dim() == 3, "bmm", "expects 3-D tensors, got a {} and b {}", to_string(a.shape()),
             to_string(b.shape()));
  KILN_CHECK(a.shape()[0] == b.shape()[0], "bmm", "batch sizes differ: a {} and b {}", to_string(a.shape()),
             to_string(b.shape()));
  check_inner("bmm", a, b, a.shape()[2], b.shape()[1]);
  return product("bmm", a, b);
}

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  check_defined("linear", x, "input");
  check_defined("linear", weight, "weight");
  backend::device_of("linear", x, weight, bias);
  KILN_CHECK(weight.dim() == 2, "linear", "weight {} must be 2-D [out_features, in_features]",
             to_string(weight.shape()));
  KILN_CHECK(x.dim() >= 1, "linear", "input must have at least 1 dim, got a 0-dim tensor");
  const int64_t O = weight.shape()[0], I = weight.shape()[1];
  KILN_CHECK(x.shape()[x.dim() - 1] == I, "linear", "input {} does not match weight {} (in_features {})",
             to_string(x.shape()), to_string(weight.shape()), I);
  KILN_CHECK(x.dtype() == weight.dtype(), "linear", "dtype mismatch: input {} is {} and weight {} is {}",
             to_string(x.shape()), name(x.dtype()), to_string(weight.shape()), name(weight.dtype()));
  KILN_CHECK(x.dtype() != kBool, "linear", "bool tensors are not supported (input {})", to_string(x.shape()));
  if (bias.defined()) {
    KILN_CHECK(bias.dim() == 1 && bias.shape()[0] == O, "linear",
               "bias {} does not match weight {} (expected [{}], out_features)", to_string(bias.shape()),
               to_string(weight.shape()), O);
    KILN_CHECK(bias.dtype() == x.dtype(), "linear", "dtype mismatch: bias {} is {} and input {} is {}",
               to_string(bias.shape()), name(bias.dtype()), to_string(x.shape()), name(x.dtype()));
  }

  // out [..., O] = x [..., I] @ weight^T [I, O] + bias: one GEMM, the
  // transposed weight read in place and the bias added by oneDNN.
  Shape out_shape = x.shape();
  out_shape[out_shape.size() - 1] = O;
  Tensor out = Tensor::empty(out_shape, x.dtype(), x.device());
  const bool vec = x.dim() == 1;
  Tensor x2 = vec ? raw_view(x, {1, I}, {I * x.strides()[0], x.strides()[0]}) : x;
  Tensor o2 = vec ? raw_view(out, {1, O}, {O, 1}) : out;
  backend::cpu::MatmulEpilogue ep;
  if (bias.defined()) ep.bias = &bias;
  // The epilogue points at the bias: a replay rebuilds it over its own copy of
  // the handle. The transposed view is made once, outside the launch, so a
  // replay does not rebuild it (a heap allocation per call).
  Tensor wt = raw_transpose(weight);
  KILN_LAUNCH("linear", backend::cpu::MatmulEpilogue e = ep; if (bias.defined()) e.bias = &bias;
              backend::cpu::matmul(x2, wt, o2, e));
  if (replay::active()) replay::note_linear(x2, wt, o2, bias);  // the Fusion pass's (docs/compile.md)

  if (needs_grad(x, weight, bias)) {
    // g [..., O]: grad_x = g @ W; grad_W = g^T x over all leading dims
    // flattened into rows; grad_bias = g summed over leading dims.
    record("linear", {x, weight, bias}, {out}, {needs_grad(weight) ? x : Tensor(), needs_grad(x) ? weight : Tensor()},
           [O, I](const VjpArgs& v) -> Grads {
             const Tensor &g = v.grad(), &x = v.saved[0], &w = v.saved[1];
             Tensor gx, gw, gb;
             if (!GradMode::is_enabled() && g.is_contiguous() && (!v.needs(1) || x.is_contiguous())) {
               // No double backward: the two products go straight to the
               // kernel on [rows, O] / [rows, I] views of g and x, without the
               // checks, reshapes and transposed tensors of matmul/mm (a few
               // hundred ns each, as much as the products of an RL-sized layer).
               const int64_t rows = O == 0 ? 0 : g.numel() / O;
               if (v.needs(0)) {
                 Shape xs = g.shape();
                 xs[xs.size() - 1] = I;
                 gx = Tensor::empty(xs, g.dtype(), g.device());
                 Tensor g2 = raw_view(g, {rows, O}, {O, 1}), gx2 = raw_view(gx, {rows, I}, {I, 1});
                 KILN_LAUNCH("matmul", backend::cpu::matmul(g2, w, gx2));
               }
               if (v.needs(1)) {
                 gw = Tensor::empty({O, I}, g.dtype(), g.device());
                 Tensor gt = raw_view(g, {O, rows}, {1, O}), x2d = raw_view(x, {rows, I}, {I, 1});
                 KILN_LAUNCH("matmul", backend::cpu::matmul(gt, x2d, gw));
               }
               if (v.needs(2)) gb = sum_to(g, {O});
               return {gx, gw, gb};
             }
             if (v.needs(0)) gx = matmul(g, w);
             if (v.needs(1)) gw = mm(reshape(g, {-1, O}).t(), reshape(x, {-1, I}));
             if (v.needs(2)) gb = sum_to(g, {O});
             return {gx, gw, gb};
           });
  }
  return out;
}

Tensor addmm(const Tensor& input, const Tensor& a, const Tensor& b, Scalar beta, Scalar alpha) {
  check_defined("addmm", input, "input");
  check_pair("addmm", a, b);
  backend::device_of("addmm", input, a, b);
  KILN_CHECK(input.dtype() == a.dtype(), "addmm", "dtype mismatch: input {} is {} and a {} is {}",
             to_string(input.shape()), name(input.dtype()), to_string(a.shape()), name(a.dtype()));
  KILN_CHECK(a.dim() == 2 && b.dim() == 2, "addmm", "expects 2-D a and b, got a {} and b {}", to_string(a.shape()),
             to_string(b.shape()));
  check_inner("addmm", a, b, a.shape()[1], b.shape()[0]);
  const int64_t M = a.shape()[0], N = b.shape()[1];
  const Shape out_shape{M, N};
  bool broadcasts = input.dim() <= 2;
  for (int64_t i = 0; broadcasts && i < input.dim(); ++i) {
    int64_t have = input.shape()[input.dim() - 1 - i], want = out_shape[1 - size_t(i)];
    broadcasts = have == want || have == 1;
  }
  KILN_CHECK(broadcasts, "addmm",
             "input {} does not broadcast to the product's shape {}", to_string(input.shape()), to_string(out_shape));
  KILN_CHECK(is_floating(a.dtype()) || (!alpha.is_floating() && !beta.is_floating()), "addmm",
             "alpha and beta must be integers for {} tensors, got alpha {} and beta {}", name(a.dtype()),
             alpha.to_double(), beta.to_double());

  Tensor out = Tensor::empty(out_shape, a.dtype(), a.device());
  backend::cpu::MatmulEpilogue ep;
  ep.alpha = alpha;
  Tensor row;  // input as a [N] bias row, when it is one
  const bool unit = alpha.to_double() == 1.0 && beta.to_double() == 1.0;
  if (unit && input.dim() >= 1 && input.numel() == N && input.shape()[input.dim() - 1] == N) {
    row = raw_view(input, {N}, {input.strides()[input.dim() - 1]});
    ep.bias = &row;
  } else if (beta.to_double() != 0.0) {
    KILN_LAUNCH("copy", backend::cpu::copy(input, out));  // beta * input enters through oneDNN's sum post-op
    ep.beta = beta;
  }
  KILN_LAUNCH("addmm", backend::cpu::MatmulEpilogue e = ep; if (row.defined()) e.bias = &row;
              backend::cpu::matmul(a, b, out, e));

  if (needs_grad(input, a, b)) {
    record("addmm", {input, a, b}, {out}, {needs_grad(b) ? a : Tensor(), needs_grad(a) ? b : Tensor()},
           [in_shape = input.shape(), beta, alpha](const VjpArgs& v) -> Grads {
             const Tensor &g = v.grad(), &a = v.saved[0], &b = v.saved[1];
             const bool scaled = alpha.to_double() != 1.0;
             Tensor gi, ga, gb;
             if (v.needs(0)) gi = sum_to(beta.to_double() == 1.0 ? g : mul(g, beta), in_shape);
             if (v.needs(1)) ga = scaled ? mul(mm(g, b.t()), alpha) : mm(g, b.t());
             if (v.needs(2)) gb = scaled ? mul(mm(a.t(), g), alpha) : mm(a.t(), g);
             return {gi, ga, gb};
           });
  }
  return out;
}

Tensor outer(const Tensor& a, const Tensor& b) {
  check_defined("outer", a, "a");
  check_defined("outer", b, "b");
  KILN_CHECK(a.dim() == 1 && b.dim() == 1, "outer", "expects 1-D tensors, got a {} and b {}", to_string(a.shape()),
             to_string(b.shape()));
  // [M, 1] * [N] broadcasts to [M, N]; mul brings promotion and the vjp.
  return mul(unsqueeze(a, 1), b);
}

Tensor dot(const Tensor& a, const Tensor& b) {
  check_pair("dot", a, b);
  KILN_CHECK(a.dim() == 1 && b.dim() == 1, "dot", "expects 1-D tensors, got a {} and b {}", to_string(a.shape()),
             to_string(b.shape()));
  const int64_t K = a.shape()[0];
  KILN_CHECK(b.shape()[0] == K, "dot", "sizes differ: a {} and b {}", to_string(a.shape()), to_string(b.shape()));
  // [1, K] @ [K, 1] -> [1, 1], viewed as a 0-dim result.
  Tensor out = Tensor::empty({}, a.dtype(), a.device());
  KILN_LAUNCH("dot", backend::cpu::matmul(raw_view(a, {1, K}, {K * a.strides()[0], a.strides()[0]}),
                                          raw_view(b, {K, 1}, {b.strides()[0], K * b.strides()[0]}),
                                          raw_view(out, {1, 1}, {1, 1})));
  if (needs_grad(a, b))
    record("dot", {a, b}, {out}, {needs_grad(b) ? a : Tensor(), needs_grad(a) ? b : Tensor()},
           [](const VjpArgs& v) -> Grads {
             return {v.needs(0) ? mul(v.grad(), v.saved[1]) : Tensor(), v.needs(1) ? mul(v.grad(), v.saved[0]) : Tensor()};
           });
  return out;
}

}  // namespace kiln
