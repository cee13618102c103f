// CPU value reductions (sum, prod, amax/amin, all/any, norms): the functors
// and their instantiations of the reduction engine, fast and ref.
#include "src/backend/cpu/reduce/reduce.h"

#include <cmath>
#include <limits>

#include "src/backend/cpu/reduce/reduce_engine.h"

namespace kiln::backend::cpu {

namespace {

using reduce_detail::run;
using reduce_detail::run_ref;

// ---- functors: init / step (fold one input) / merge (two partials) / finish ----

template <class T>
using sum_acc_t = std::conditional_t<is_floating(dtype_v<T>), acc_t<T>, int64_t>;
template <class T>
using sum_out_t = std::conditional_t<is_floating(dtype_v<T>), T, int64_t>;

template <class T, class A = sum_acc_t<T>>
struct SumOp {
  using In = T;
  using Acc = A;
  using Out = sum_out_t<T>;
  A scale = A(1);
  A init() const { return A(0); }
  A step(A a, T x) const { return a + A(x); }
  A merge(A a, A b) const { return a + b; }
  Out finish(A a) const {
    if constexpr (std::is_floating_point_v<A>) return Out(a * scale);
    else return Out(a);
  }
};

template <class T, class A = sum_acc_t<T>>
struct ProdOp {
  using In = T;
  using Acc = A;
  using Out = sum_out_t<T>;
  A init() const { return A(1); }
  A step(A a, T x) const { return a * A(x); }
  A merge(A a, A b) const { return a * b; }
  Out finish(A a) const { return Out(a); }
};

// Largest (Max) or smallest value; a NaN wins over everything.
template <class T, bool Max>
struct ExtremeOp {
  using In = T;
  using Acc = std::conditional_t<std::is_same_v<T, bool>, uint8_t, acc_t<T>>;  // no vector<bool>
  using Out = T;
  Acc init() const {
    if constexpr (std::is_same_v<T, bool>) return !Max;
    else if constexpr (std::is_floating_point_v<Acc>)
      return Max ? -std::numeric_limits<Acc>::infinity() : std::numeric_limits<Acc>::infinity();
    else return Max ? std::numeric_limits<Acc>::lowest() : std::numeric_limits<Acc>::max();
  }
  Acc merge(Acc a, Acc v) const {
    if constexpr (std::is_same_v<T, bool>) return Max ? (a | v) : (a & v);
    else if constexpr (std::is_floating_point_v<Acc>) return ((Max ? v > a : v < a) || v != v) ? v : a;
    else return (Max ? v > a : v < a) ? v : a;
  }
  Acc step(Acc a, T x) const { return merge(a, Acc(x)); }
  Out finish(Acc a) const { return Out(a); }
};

// all (And) / any: nonzero tests folded into a byte.
template <class T, bool And>
struct TruthOp {
  using In = T;
  using Acc = uint8_t;
  using Out = bool;
  Acc init() const { return And ? 1 : 0; }
  Acc step(Acc a, T x) const {
    uint8_t nz = acc_t<T>(x) != acc_t<T>(0);
    return And ? (a & nz) : (a | nz);
  }
  Acc merge(Acc a, Acc b) const { return And ? (a & b) : (a | b); }
  Out finish(Acc a) const { return a != 0; }
};

// Norms of floating x. Kind: 1, 2, 0 (count nonzeros), inf, -inf, general p.
enum class NormKind { one, two, zero, inf, neg_inf, p };

template <class T, NormKind K, class A = acc_t<T>>
struct NormOp {
  using In = T;
  using Acc = A;
  using Out = T;
  A p = 2, inv_p = 0.5;
  A init() const {
    if constexpr (K == NormKind::neg_inf) return std::numeric_limits<A>::infinity();
    else return A(0);
  }
  A merge(A a, A b) const {
    if constexpr (K == NormKind::inf) return (b > a || b != b) ? b : a;
    else if constexpr (K == NormKind::neg_inf) return (b < a || b != b) ? b : a;
    else return a + b;
  }
  A step(A a, T x) const {
    A v = std::abs(A(x));
    if constexpr (K == NormKind::one) return a + v;
    else if constexpr (K == NormKind::two) return a + v * v;
    else if constexpr (K == NormKind::zero) return a + A(v != A(0));
    else if constexpr (K == NormKind::p) return a + std::pow(v, p);
    else return merge(a, v);
  }
  Out finish(A a) const {
    if constexpr (K == NormKind::two) return Out(std::sqrt(a));
    else if constexpr (K == NormKind::p) return Out(std::pow(a, inv_p));
    else return Out(a);
  }
};

template <class T>
void check_out(const Tensor& out, const char* op) {
  KILN_CHECK(out.dtype() == dtype_v<T> && out.is_contiguous(), op, "internal: bad output {} {}", name(out.dtype()),
             to_string(out.shape()));
}

// The engine (fast) or the plain loop (ref) over the same functor.
template <bool Ref, class Op>
void go(const Tensor& x, const Tensor& out, const Shape& dims, const Op& op) {
  check_out<typename Op::Out>(out, "reduce");
  if constexpr (Ref) run_ref(x, out, dims, op);
  else run(x, out, dims, op);
}

template <bool Ref>
void sum_impl(const Tensor& x, const Tensor& out, const Shape& dims, double scale) {
  dispatch(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (Ref && is_floating(dtype_v<T>)) go<Ref>(x, out, dims, SumOp<T, double>{.scale = scale});
    else go<Ref>(x, out, dims, SumOp<T>{.scale = sum_acc_t<T>(scale)});
  });
}

template <bool Ref>
void prod_impl(const Tensor& x, const Tensor& out, const Shape& dims) {
  dispatch(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    go<Ref>(x, out, dims, ProdOp<T>{});
  });
}

template <bool Ref, bool Max>
void extreme_impl(const Tensor& x, const Tensor& out, const Shape& dims) {
  dispatch(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    go<Ref>(x, out, dims, ExtremeOp<T, Max>{});
  });
}

template <bool Ref, bool And>
void truth_impl(const Tensor& x, const Tensor& out, const Shape& dims) {
  dispatch(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    go<Ref>(x, out, dims, TruthOp<T, And>{});
  });
}

template <bool Ref>
void norm_impl(const Tensor& x, const Tensor& out, const Shape& dims, double p) {
  dispatch(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (is_floating(dtype_v<T>)) {
      using A = std::conditional_t<Ref, double, acc_t<T>>;
      auto with = [&](auto kind) {
        constexpr NormKind K = decltype(kind)::value;
        go<Ref>(x, out, dims, NormOp<T, K, A>{.p = A(p), .inv_p = A(1.0 / p)});
      };
      if (p == 1) with(std::integral_constant<NormKind, NormKind::one>{});
      else if (p == 2) with(std::integral_constant<NormKind, NormKind::two>{});
      else if (p == 0) with(std::integral_constant<NormKind, NormKind::zero>{});
      else if (std::isinf(p) && p > 0) with(std::integral_constant<NormKind, NormKind::inf>{});
      else if (std::isinf(p)) with(std::integral_constant<NormKind, NormKind::neg_inf>{});
      else with(std::integral_constant<NormKind, NormKind::p>{});
    } else {
      KILN_FAIL("norm", "internal: expects a floating input, got {}", name(x.dtype()));
    }
  });
}

}  // namespace

void sum(const Tensor& x, const Tensor& out, const Shape& dims, double scale) { sum_impl<false>(x, out, dims, scale); }
void prod(const Tensor& x, const Tensor& out, const Shape& dims) { prod_impl<false>(x, out, dims); }
void amax(const Tensor& x, const Tensor& out, const Shape& dims) { extreme_impl<false, true>(x, out, dims); }
void amin(const Tensor& x, const Tensor& out, const Shape& dims) { extreme_impl<false, false>(x, out, dims); }
void all(const Tensor& x, const Tensor& out, const Shape& dims) { truth_impl<false, true>(x, out, dims); }
void any(const Tensor& x, const Tensor& out, const Shape& dims) { truth_impl<false, false>(x, out, dims); }
void norm(const Tensor& x, const Tensor& out, const Shape& dims, double p) { norm_impl<false>(x, out, dims, p); }

namespace ref {
void sum(const Tensor& x, const Tensor& out, const Shape& dims, double scale) { sum_impl<true>(x, out, dims, scale); }
void prod(const Tensor& x, const Tensor& out, const Shape& dims) { prod_impl<true>(x, out, dims); }
void amax(const Tensor& x, const Tensor& out, const Shape& dims) { extreme_impl<true, true>(x, out, dims); }
void amin(const Tensor& x, const Tensor& out, const Shape& dims) { extreme_impl<true, false>(x, out, dims); }
void all(const Tensor& x, const Tensor& out, const Shape& dims) { truth_impl<true, true>(x, out, dims); }
void any(const Tensor& x, const Tensor& out, const Shape& dims) { truth_impl<true, false>(x, out, dims); }
void norm(const Tensor& x, const Tensor& out, const Shape& dims, double p) { norm_impl<true>(x, out, dims, p); }
}  // namespace ref

}  // namespace kiln::backend::cpu
