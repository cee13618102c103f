// The math of each elementwise op as a small functor on the compute type C
// (acc_t<T>: bf16 computes in f32), shared by the fast loops and the ref
// loops; visit_binary / visit_unary map an op enum to its functor.
#pragma once

#include <cmath>
#include <type_traits>

#include "src/backend/cpu/elementwise/elementwise.h"
#include "src/backend/cpu/elementwise/elementwise_math.h"

namespace kiln::backend::cpu::fn {

template <class C>
inline constexpr bool kSignedInt = std::is_integral_v<C> && std::is_signed_v<C>;

// Integer arithmetic wraps like PyTorch's (two's complement), without UB.
template <class C>
inline C add(C a, C b) {
  if constexpr (kSignedInt<C>) return C(std::make_unsigned_t<C>(a) + std::make_unsigned_t<C>(b));
  else return C(a + b);
}
template <class C>
inline C sub(C a, C b) {
  if constexpr (kSignedInt<C>) return C(std::make_unsigned_t<C>(a) - std::make_unsigned_t<C>(b));
  else return C(a - b);
}
template <class C>
inline C mul(C a, C b) {
  if constexpr (kSignedInt<C>) return C(std::make_unsigned_t<C>(a) * std::make_unsigned_t<C>(b));
  else if constexpr (std::is_same_v<C, bool>) return a && b;
  else return C(a * b);
}

/// a ** b for integers; negative exponents give 1, +-1 or 0 like torch.
template <class C>
inline C ipow(C a, C b) {
  if constexpr (std::is_same_v<C, bool>) {
    return b ? a : true;
  } else {
    if constexpr (std::is_signed_v<C>) {
      if (b < 0) return a == 1 ? C(1) : a == -1 ? ((b & 1) ? C(-1) : C(1)) : C(0);
    }
    C r = 1;
    while (b) {
      if (b & 1) r = mul(r, a);
      a = mul(a, a);
      b = C(b >> 1);
    }
    return r;
  }
}

template <class C> struct Add { C operator()(C a, C b) const { return add(a, b); } };
template <class C> struct AddScaled {
  C alpha;
  C operator()(C a, C b) const { return add(a, mul(alpha, b)); }
};
template <class C> struct Sub { C operator()(C a, C b) const { return sub(a, b); } };
template <class C> struct SubScaled {
  C alpha;
  C operator()(C a, C b) const { return sub(a, mul(alpha, b)); }
};
template <class C> struct Mul { C operator()(C a, C b) const { return mul(a, b); } };
template <class C> struct Div { C operator()(C a, C b) const { return a / b; } };
template <class C> struct Pow {
  C operator()(C a, C b) const {
    if constexpr (std::is_floating_point_v<C>) return std::pow(a, b);
    else return ipow(a, b);
  }
};
/// x ** 2, the common case of pow with a scalar exponent.
template <class C> struct Square { C operator()(C a) const { return mul(a, a); } };
template <class C> struct Maximum {
  C operator()(C a, C b) const {
    if constexpr (std::is_floating_point_v<C>) return (a > b || a != a) ? a : b;
    else return a > b ? a : b;
  }
};
template <class C> struct Minimum {
  C operator()(C a, C b) const {
    if constexpr (std::is_floating_point_v<C>) return (a < b || a != a) ? a : b;
    else return a < b ? a : b;
  }
};

template <class C> struct Eq { bool operator()(C a, C b) const { return a == b; } };
template <class C> struct Ne { bool operator()(C a, C b) const { return a != b; } };
template <class C> struct Lt { bool operator()(C a, C b) const { return a < b; } };
template <class C> struct Le { bool operator()(C a, C b) const { return a <= b; } };
template <class C> struct Gt { bool operator()(C a, C b) const { return a > b; } };
template <class C> struct Ge { bool operator()(C a, C b) const { return a >= b; } };
template <class C> struct LogicalAnd { bool operator()(C a, C b) const { return (a != C(0)) & (b != C(0)); } };
template <class C> struct LogicalOr { bool operator()(C a, C b) const { return (a != C(0)) | (b != C(0)); } };
template <class C> struct LogicalXor { bool operator()(C a, C b) const { return (a != C(0)) != (b != C(0)); } };
/// Floating types compare in their own precision, integers in f64.
template <class C> struct IsClose {
  using F = std::conditional_t<std::is_floating_point_v<C>, C, double>;
  F rtol, atol;
  bool operator()(C a_, C b_) const {
    F a = F(a_), b = F(b_);
    if (a == b) return true;
    // Finite only: with b = inf the bound rtol * |b| would accept anything.
    bool finite = (a - a) == F(0) && (b - b) == F(0);
    return finite && std::abs(a - b) <= atol + rtol * std::abs(b);
  }
};

// ---- fused vjps: f(g, s) ----
template <class C> struct TanhBackward { C operator()(C g, C y) const { return g * (C(1) - y * y); } };
template <class C> struct SigmoidBackward { C operator()(C g, C y) const { return g * (C(1) - y) * y; } };
template <class C> struct SqrtBackward { C operator()(C g, C y) const { return g / (C(2) * y); } };
template <class C> struct ReluBackward { C operator()(C g, C y) const { return y > C(0) ? g : C(0); } };

inline constexpr double kInvSqrt2Pi = 0.39894228040143267794;   // 1 / sqrt(2 pi)
inline constexpr double kSqrt2OverPi = 0.79788456080286535588;  // sqrt(2 / pi)
inline constexpr double kGeluKappa = 0.044715;

template <class C> struct GeluBackward {
  C operator()(C g, C x) const {
    if constexpr (std::is_same_v<C, float>) {
      return g * math::gelu_grad_f32(x);  // one exponential for Phi and phi
    } else {
      C cdf = math::normal_cdf(x);
      C pdf = math::exp(C(-0.5) * x * x) * C(kInvSqrt2Pi);
      return g * (cdf + x * pdf);
    }
  }
};
// d/dx x s(v) = s + x s (1 - s) v' with s = sigmoid(v), v = 2u (GeluTanh).
template <class C> struct GeluTanhBackward {
  C operator()(C g, C x) const {
    C v = C(2 * kSqrt2OverPi) * (x + C(kGeluKappa) * x * x * x);
    C s = C(1) / (C(1) + math::exp(-v));
    C dv = C(2 * kSqrt2OverPi) * (C(1) + C(3 * kGeluKappa) * x * x);
    return g * (s + x * s * (C(1) - s) * dv);
  }
};
template <class C> struct SiluBackward {
  C operator()(C g, C x) const {
    C s = math::sigmoid(x);
    return g * s * (C(1) + x * (C(1) - s));
  }
};
template <class C> struct SoftplusBackward {
  C beta, threshold;
  C operator()(C g, C x) const {
    C bx = x * beta;
    return bx > threshold ? g : g * math::sigmoid(bx);
  }
};
template <class C> struct LeakyReluBackward {
  C slope;
  C operator()(C g, C x) const { return x > C(0) ? g : g * slope; }
};

// ---- unary ----
template <class C> struct Neg {
  C operator()(C a) const {
    if constexpr (std::is_same_v<C, bool>) return a;
    else return sub(C(0), a);
  }
};
template <class C> struct Abs {
  C operator()(C a) const {
    if constexpr (std::is_floating_point_v<C>) return std::abs(a);
    else if constexpr (kSignedInt<C>) return a < 0 ? sub(C(0), a) : a;
    else return a;
  }
};
template <class C> struct Sign {
  C operator()(C a) const {
    if constexpr (std::is_same_v<C, bool>) return a;
    else return C(int(C(0) < a) - int(a < C(0)));
  }
};
template <class C> struct Floor {
  C operator()(C a) const {
    if constexpr (std::is_floating_point_v<C>) return std::floor(a);
    else return a;
  }
};
template <class C> struct Ceil {
  C operator()(C a) const {
    if constexpr (std::is_floating_point_v<C>) return std::ceil(a);
    else return a;
  }
};
/// Half to even (the default rounding mode), like torch.round.
template <class C> struct Round {
  C operator()(C a) const {
    if constexpr (std::is_floating_point_v<C>) return std::nearbyint(a);
    else return a;
  }
};
template <class C> struct Relu {
  C operator()(C a) const {
    if constexpr (std::is_same_v<C, bool>) return a;
    else return a < C(0) ? C(0) : a;  // NaN stays NaN
  }
};
template <class C> struct Exp { C operator()(C a) const { return math::exp(a); } };
template <class C> struct Log { C operator()(C a) const { return math::log(a); } };
template <class C> struct Log1p { C operator()(C a) const { return math::log1p(a); } };
template <class C> struct Expm1 { C operator()(C a) const { return std::expm1(a); } };
template <class C> struct Sqrt { C operator()(C a) const { return std::sqrt(a); } };
template <class C> struct Rsqrt { C operator()(C a) const { return C(1) / std::sqrt(a); } };
template <class C> struct Reciprocal { C operator()(C a) const { return C(1) / a; } };
template <class C> struct Sin { C operator()(C a) const { return std::sin(a); } };
template <class C> struct Cos { C operator()(C a) const { return std::cos(a); } };
template <class C> struct Tanh { C operator()(C a) const { return math::tanh(a); } };
template <class C> struct Sigmoid { C operator()(C a) const { return math::sigmoid(a); } };
template <class C> struct Erf { C operator()(C a) const { return math::erf(a); } };
template <class C> struct Gelu {
  C operator()(C x) const { return x * math::normal_cdf(x); }
};
// 0.5 x (1 + tanh(u)) = x sigmoid(2u) = x / (1 + e^(-2u)), u = sqrt(2/pi) (x
// + 0.044715 x^3): one exponential and one division, where tanh_f32 computes
// a polynomial, an exponential and a division for every lane (3.5x the time
// of this form in the DiT's MLP), and no cancellation in 1 + tanh(u) for x < 0.
template <class C> struct GeluTanh {
  C operator()(C x) const {
    C v = C(2 * kSqrt2OverPi) * (x + C(kGeluKappa) * x * x * x);
    return x / (C(1) + math::exp(-v));
  }
};
template <class C> struct Silu { C operator()(C x) const { return x / (C(1) + math::exp(-x)); } };
template <class C> struct Softplus {
  C beta, threshold;
  C operator()(C x) const {
    C bx = x * beta;
    return math::select(bx > threshold, math::log1p(math::exp(bx)) / beta, x);
  }
};
template <class C> struct LeakyRelu {
  C slope;
  C operator()(C x) const { return x > C(0) ? x : x * slope; }
};
template <class C> struct LogicalNot { bool operator()(C a) const { return a == C(0); } };
template <class C> struct IsNan {
  bool operator()(C a) const { return a != a; }
};
template <class C> struct IsFinite {
  bool operator()(C a) const {
    if constexpr (std::is_floating_point_v<C>) return (a - a) == C(0);  // inf - inf and NaN give NaN
    else return true;
  }
};
template <class C> struct Clamp {
  C lo, hi;
  bool has_lo, has_hi;
  C operator()(C a) const {
    if (has_lo) a = a < lo ? lo : a;  // NaN fails both tests and stays NaN
    if (has_hi) a = a > hi ? hi : a;
    return a;
  }
};

[[noreturn]] void unsupported(const char* kind, int op, DType t);

/// Calls cb(functor) for binary `op` on storage type T.
template <class T, class Cb>
void visit_binary(BinaryOp op, OpParams p, Cb&& cb) {
  using C = acc_t<T>;
  constexpr bool fl = std::is_floating_point_v<C>;
  switch (op) {
    case BinaryOp::add:
      if (p.p0 == 1.0) return cb(Add<C>{});
      return cb(AddScaled<C>{C(p.p0)});
    case BinaryOp::sub:
      if (p.p0 == 1.0) return cb(Sub<C>{});
      return cb(SubScaled<C>{C(p.p0)});
    case BinaryOp::mul: return cb(Mul<C>{});
    case BinaryOp::pow: return cb(Pow<C>{});
    case BinaryOp::maximum: return cb(Maximum<C>{});
    case BinaryOp::minimum: return cb(Minimum<C>{});
    case BinaryOp::eq: return cb(Eq<C>{});
    case BinaryOp::ne: return cb(Ne<C>{});
    case BinaryOp::lt: return cb(Lt<C>{});
    case BinaryOp::le: return cb(Le<C>{});
    case BinaryOp::gt: return cb(Gt<C>{});
    case BinaryOp::ge: return cb(Ge<C>{});
    case BinaryOp::logical_and: return cb(LogicalAnd<C>{});
    case BinaryOp::logical_or: return cb(LogicalOr<C>{});
    case BinaryOp::logical_xor: return cb(LogicalXor<C>{});
    case BinaryOp::isclose: {
      using F = typename IsClose<C>::F;
      return cb(IsClose<C>{F(p.p0), F(p.p1)});
    }
    default: break;
  }
  if constexpr (fl) {
    switch (op) {
      case BinaryOp::div: return cb(Div<C>{});
      case BinaryOp::tanh_backward: return cb(TanhBackward<C>{});
      case BinaryOp::sigmoid_backward: return cb(SigmoidBackward<C>{});
      case BinaryOp::sqrt_backward: return cb(SqrtBackward<C>{});
      case BinaryOp::relu_backward: return cb(ReluBackward<C>{});
      case BinaryOp::gelu_backward: return cb(GeluBackward<C>{});
      case BinaryOp::gelu_tanh_backward: return cb(GeluTanhBackward<C>{});
      case BinaryOp::silu_backward: return cb(SiluBackward<C>{});
      case BinaryOp::softplus_backward: return cb(SoftplusBackward<C>{C(p.p0), C(p.p1)});
      case BinaryOp::leaky_relu_backward: return cb(LeakyReluBackward<C>{C(p.p0)});
      default: break;
    }
  }
  unsupported("binary", int(op), dtype_v<T>);
}

/// Calls cb(functor) for unary `op` on storage type T.
template <class T, class Cb>
void visit_unary(UnaryOp op, OpParams p, Cb&& cb) {
  using C = acc_t<T>;
  constexpr bool fl = std::is_floating_point_v<C>;
  switch (op) {
    case UnaryOp::neg: return cb(Neg<C>{});
    case UnaryOp::abs: return cb(Abs<C>{});
    case UnaryOp::sign: return cb(Sign<C>{});
    case UnaryOp::floor: return cb(Floor<C>{});
    case UnaryOp::ceil: return cb(Ceil<C>{});
    case UnaryOp::round: return cb(Round<C>{});
    case UnaryOp::relu: return cb(Relu<C>{});
    case UnaryOp::square: return cb(Square<C>{});
    case UnaryOp::logical_not: return cb(LogicalNot<C>{});
    case UnaryOp::isnan: return cb(IsNan<C>{});
    case UnaryOp::isfinite: return cb(IsFinite<C>{});
    default: break;
  }
  if constexpr (fl) {
    switch (op) {
      case UnaryOp::exp: return cb(Exp<C>{});
      case UnaryOp::log: return cb(Log<C>{});
      case UnaryOp::log1p: return cb(Log1p<C>{});
      case UnaryOp::expm1: return cb(Expm1<C>{});
      case UnaryOp::sqrt: return cb(Sqrt<C>{});
      case UnaryOp::rsqrt: return cb(Rsqrt<C>{});
      case UnaryOp::reciprocal: return cb(Reciprocal<C>{});
      case UnaryOp::sin: return cb(Sin<C>{});
      case UnaryOp::cos: return cb(Cos<C>{});
      case UnaryOp::tanh: return cb(Tanh<C>{});
      case UnaryOp::sigmoid: return cb(Sigmoid<C>{});
      case UnaryOp::erf: return cb(Erf<C>{});
      case UnaryOp::gelu: return cb(Gelu<C>{});
      case UnaryOp::gelu_tanh: return cb(GeluTanh<C>{});
      case UnaryOp::silu: return cb(Silu<C>{});
      case UnaryOp::softplus: return cb(Softplus<C>{C(p.p0), C(p.p1)});
      case UnaryOp::leaky_relu: return cb(LeakyRelu<C>{C(p.p0)});
      default: break;
    }
  }
  unsupported("unary", int(op), dtype_v<T>);
}

/// The clamp functor for T with the bounds converted to its compute type.
template <class T>
Clamp<acc_t<T>> make_clamp(const std::optional<Scalar>& lo, const std::optional<Scalar>& hi) {
  using C = acc_t<T>;
  return {lo ? lo->to<C>() : C(0), hi ? hi->to<C>() : C(0), lo.has_value(), hi.has_value()};
}

/// Output storage type of functor F applied to T: bool for predicates.
template <class T, class F, class... A>
using out_t = std::conditional_t<std::is_same_v<std::invoke_result_t<const F&, A...>, bool>, bool, T>;

}  // namespace kiln::backend::cpu::fn
