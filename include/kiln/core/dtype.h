// Element types, their sizes and names, and PyTorch's type-promotion rules.
#pragma once

#include <cstdint>
#include <string_view>
#include <type_traits>

#include "kiln/core/bfloat16.h"

namespace kiln {

enum class DType : uint8_t { boolean, u8, i32, i64, bf16, f32, f64 };
inline constexpr int kNumDTypes = int(DType::f64) + 1;

inline constexpr DType kBool = DType::boolean;
inline constexpr DType kU8 = DType::u8;
inline constexpr DType kI32 = DType::i32;
inline constexpr DType kI64 = DType::i64;
inline constexpr DType kBF16 = DType::bf16;
inline constexpr DType kF32 = DType::f32;
inline constexpr DType kF64 = DType::f64;

/// Bytes per element.
constexpr int64_t itemsize(DType t) {
  switch (t) {
    case DType::boolean:
    case DType::u8: return 1;
    case DType::bf16: return 2;
    case DType::i32:
    case DType::f32: return 4;
    case DType::i64:
    case DType::f64: return 8;
  }
  return 0;
}

/// "f32", "i64", ... as they appear in error messages and files.
std::string_view name(DType t);

constexpr bool is_floating(DType t) { return t == DType::bf16 || t == DType::f32 || t == DType::f64; }
constexpr bool is_integral(DType t) { return t == DType::u8 || t == DType::i32 || t == DType::i64; }

/// PyTorch's promote_types: bool < integers < floats; within a kind the wider
/// type wins; bf16 with an integer stays bf16.
DType promote_types(DType a, DType b);

// C++ type <-> DType.
template <class T> struct dtype_of;
template <> struct dtype_of<bool> { static constexpr DType value = DType::boolean; };
template <> struct dtype_of<uint8_t> { static constexpr DType value = DType::u8; };
template <> struct dtype_of<int32_t> { static constexpr DType value = DType::i32; };
template <> struct dtype_of<int64_t> { static constexpr DType value = DType::i64; };
template <> struct dtype_of<bfloat16> { static constexpr DType value = DType::bf16; };
template <> struct dtype_of<float> { static constexpr DType value = DType::f32; };
template <> struct dtype_of<double> { static constexpr DType value = DType::f64; };
template <class T> inline constexpr DType dtype_v = dtype_of<std::remove_cv_t<T>>::value;

/// Arithmetic type for a storage type: bf16 computes in f32.
template <class T> struct acc_type { using type = T; };
template <> struct acc_type<bfloat16> { using type = float; };
template <class T> using acc_t = typename acc_type<T>::type;

template <class T> struct type_tag { using type = T; };

/// Calls fn(type_tag<T>{}) with T the C++ type of `t`. The one place that
/// switches over dtypes: kernels write `dispatch(t, [&](auto tag) { using T =
/// typename decltype(tag)::type; ... })`.
template <class Fn>
decltype(auto) dispatch(DType t, Fn&& fn) {
  switch (t) {
    case DType::boolean: return fn(type_tag<bool>{});
    case DType::u8: return fn(type_tag<uint8_t>{});
    case DType::i32: return fn(type_tag<int32_t>{});
    case DType::i64: return fn(type_tag<int64_t>{});
    case DType::bf16: return fn(type_tag<bfloat16>{});
    case DType::f32: return fn(type_tag<float>{});
    case DType::f64: return fn(type_tag<double>{});
  }
  __builtin_unreachable();
}

}  // namespace kiln
