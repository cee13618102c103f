// The elementwise kernels, written once over a loop policy: FastLoops (the
// loops of elementwise_loops.h) for the kernels the ops call, RefLoops (their
// ref:: twins) for the oracle the tests compare them with. isa/unary.cpp,
// isa/binary.cpp (once per kernel ISA) and elementwise_ref.cpp instantiate them.
#pragma once

#include <memory>

#include "kiln/core/storage.h"
#include "src/backend/cpu/elementwise/elementwise_loops.h"
#include "src/backend/cpu/elementwise/elementwise_ops.h"

namespace kiln::backend::cpu {

/// Tag: a type of the per-ISA file's own (an isa/ folder), so that each
/// copy instantiates its own loops.
template <class Tag>
struct FastLoops {
  template <class O, class A, class F>
  static void unary(const Tensor& out, const Tensor& x, const F& f) { unary_loop<O, A, F, Tag>(out, x, f); }
  template <class O, class A, class B, class F>
  static void binary(const Tensor& out, const Tensor& a, const Tensor& b, const F& f) {
    binary_loop<O, A, B, F, Tag>(out, a, b, f);
  }
  template <class O, class A, class B, class C, class F>
  static void ternary(const Tensor& out, const Tensor& a, const Tensor& b, const Tensor& c, const F& f) {
    ternary_loop<O, A, B, C, F, Tag>(out, a, b, c, f);
  }
};

struct RefLoops {
  template <class O, class A, class F>
  static void unary(const Tensor& out, const Tensor& x, const F& f) { ref::unary_loop<O, A>(out, x, f); }
  template <class O, class A, class B, class F>
  static void binary(const Tensor& out, const Tensor& a, const Tensor& b, const F& f) {
    ref::binary_loop<O, A, B>(out, a, b, f);
  }
  template <class O, class A, class B, class C, class F>
  static void ternary(const Tensor& out, const Tensor& a, const Tensor& b, const Tensor& c, const F& f) {
    ref::ternary_loop<O, A, B, C>(out, a, b, c, f);
  }
};

// A one-element tensor of dtype `t` holding s: a scalar operand that the loops
// read with stride 0, so scalar forms reuse the tensor-tensor instantiations.
// One per thread and dtype, over thread-local memory and rewritten at each
// call (kernels read it only while they run): a scalar op allocates nothing
// beyond its output, and the caching allocator's counters never see it.
inline Tensor scalar_operand(Scalar s, DType t) {
  struct Slots {
    alignas(8) unsigned char bytes[kNumDTypes][8];
    Tensor tensors[kNumDTypes];
  };
  thread_local Slots slots;
  Tensor& v = slots.tensors[size_t(t)];
  if (!v.defined()) {
    auto storage = std::make_shared<Storage>(slots.bytes[size_t(t)], 8, kCPU, [](void*, void*) {}, nullptr);
    v = Tensor::make_view(std::move(storage), {}, {}, 0, t);
  }
  dispatch(t, [&](auto tag) {
    using T = typename decltype(tag)::type;
    *static_cast<T*>(v.data_ptr()) = s.to<T>();
  });
  return v;
}

template <class L>
void binary_kernel(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b, OpParams p) {
  dispatch(a.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = acc_t<T>;
    fn::visit_binary<T>(op, p, [&](const auto& f) {
      using O = fn::out_t<T, decltype(f), C, C>;
      L::template binary<O, T, T>(out, a, b, f);
    });
  });
}

// s is held in a's compute type (f32 for bf16, as PyTorch's opmath does); for
// every other dtype this is binary_kernel's own instantiation.
template <class L>
void binary_scalar_kernel(BinaryOp op, const Tensor& out, const Tensor& a, Scalar s, bool reversed, OpParams p) {
  dispatch(a.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = acc_t<T>;
    const Tensor v = scalar_operand(s, dtype_v<C>);
    fn::visit_binary<T>(op, p, [&](const auto& f) {
      using O = fn::out_t<T, decltype(f), C, C>;
      if (reversed) L::template binary<O, C, T>(out, v, a, f);
      else L::template binary<O, T, C>(out, a, v, f);
    });
  });
}

template <class L>
void unary_kernel(UnaryOp op, const Tensor& out, const Tensor& x, OpParams p) {
  dispatch(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = acc_t<T>;
    fn::visit_unary<T>(op, p, [&](const auto& f) {
      using O = fn::out_t<T, decltype(f), C>;
      L::template unary<O, T>(out, x, f);
    });
  });
}

template <class L>
void clamp_kernel(const Tensor& out, const Tensor& x, std::optional<Scalar> lo, std::optional<Scalar> hi) {
  dispatch(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    L::template unary<T, T>(out, x, fn::make_clamp<T>(lo, hi));
  });
}

template <class L>
void where_kernel(const Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b) {
  dispatch(out.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = acc_t<T>;
    L::template ternary<T, bool, T, T>(out, cond, a, b, [](bool c, C x, C y) { return c ? x : y; });
  });
}

}  // namespace kiln::backend::cpu
