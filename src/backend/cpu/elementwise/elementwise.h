// CPU elementwise kernels: binary and unary ops chosen by an enum (the switch
// and the dtype dispatch happen once per call), scalar-operand forms, where,
// clamp, and the plain ref:: versions the fast loops are tested against.
#pragma once

#include <cstdint>
#include <optional>

#include "kiln/core/tensor.h"

namespace kiln::backend::cpu {

/// Binary ops. Both inputs have the same dtype T (the compute dtype) and
/// broadcast to out's shape. Arithmetic ops write T; predicates write bool.
enum class BinaryOp : uint8_t {
  // arithmetic: out = f(a, b) in T
  add,       // a + p0 * b (p0 = alpha)
  sub,       // a - p0 * b
  mul,
  div,       // true division (floating T only)
  pow,
  maximum,   // NaN propagates
  minimum,
  // predicates: out is bool
  eq, ne, lt, le, gt, ge,
  logical_and, logical_or, logical_xor,  // nonzero is true
  isclose,   // |a - b| <= p1 + p0 * |b| (p0 = rtol, p1 = atol) or a == b; NaN never close
  // fused vjps: out = f(g, s) with g the incoming gradient, s the saved tensor (floating T)
  tanh_backward,        // s = tanh output: g * (1 - s^2)
  sigmoid_backward,     // s = sigmoid output: g * s * (1 - s)
  sqrt_backward,        // s = sqrt output: g / (2 s)
  relu_backward,        // s = relu output: s > 0 ? g : 0
  gelu_backward,        // s = input: g * (Phi(s) + s phi(s))
  gelu_tanh_backward,   // s = input, tanh approximation
  silu_backward,        // s = input: g * sig(s) * (1 + s (1 - sig(s)))
  softplus_backward,    // s = input: g * sigmoid(p0 s), g where p0 s > p1
  leaky_relu_backward,  // s = input: s > 0 ? g : p0 g
};
inline constexpr int kNumBinaryOps = int(BinaryOp::leaky_relu_backward) + 1;

/// Extra numbers for some ops (see BinaryOp / UnaryOp).
struct OpParams {
  double p0 = 1.0;
  double p1 = 0.0;
};

/// True for ops whose output is bool.
constexpr bool is_predicate(BinaryOp op) { return op >= BinaryOp::eq && op <= BinaryOp::isclose; }

/// out = op(a, b); a, b: dtype T, broadcast to out; out: T or bool.
void binary(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b, OpParams p = {});
/// out = op(a, s), or op(s, a) when `reversed`; s is converted to a's compute type.
void binary_scalar(BinaryOp op, const Tensor& out, const Tensor& a, Scalar s, bool reversed = false,
                   OpParams p = {});

/// Unary ops; out has x's dtype except for the predicates (bool). The
/// floating-only ops (exp ... leaky_relu) expect floating x.
enum class UnaryOp : uint8_t {
  neg, abs, sign, floor, ceil, round,  // any numeric dtype
  relu,
  square,
  exp, log, log1p, expm1, sqrt, rsqrt, reciprocal, sin, cos, tanh, sigmoid, erf,
  gelu,        // x Phi(x)
  gelu_tanh,   // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
  silu,
  softplus,    // log1p(exp(p0 x)) / p0; x where p0 x > p1
  leaky_relu,  // x > 0 ? x : p0 x
  logical_not, isnan, isfinite,  // bool out
};
inline constexpr int kNumUnaryOps = int(UnaryOp::isfinite) + 1;

constexpr bool is_predicate(UnaryOp op) { return op >= UnaryOp::logical_not; }

void unary(UnaryOp op, const Tensor& out, const Tensor& x, OpParams p = {});

/// out = min(max(x, lo), hi) with either bound absent; NaN propagates.
void clamp(const Tensor& out, const Tensor& x, std::optional<Scalar> lo, std::optional<Scalar> hi);

/// out = cond ? a : b; cond bool; a, b and out of one dtype; all broadcast to out.
void where(const Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b);
/// out = cond ? s : x (scalar_if_true) or cond ? x : s.
void where_scalar(const Tensor& out, const Tensor& cond, const Tensor& x, Scalar s, bool scalar_if_true);

/// x itself when it already has dtype t, else a converted contiguous copy
/// (not recorded: ops convert their operands and record their own vjps).
Tensor convert(const Tensor& x, DType t);

namespace ref {
// Element-by-element index arithmetic over the same functors.
void binary(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b, OpParams p = {});
void binary_scalar(BinaryOp op, const Tensor& out, const Tensor& a, Scalar s, bool reversed = false,
                   OpParams p = {});
void unary(UnaryOp op, const Tensor& out, const Tensor& x, OpParams p = {});
void clamp(const Tensor& out, const Tensor& x, std::optional<Scalar> lo, std::optional<Scalar> hi);
void where(const Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b);
}  // namespace ref

}  // namespace kiln::backend::cpu
