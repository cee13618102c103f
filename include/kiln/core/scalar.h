// Scalar: a number passed to an op (add(x, 2.5), full(shape, 3)), kept as a
// double, an int64 or a bool so that type promotion can see which it was.
#pragma once

#include <cstdint>
#include <type_traits>

#include "kiln/core/dtype.h"

namespace kiln {

class Scalar {
 public:
  enum class Kind : uint8_t { boolean, integer, floating };

  Scalar() : kind_(Kind::integer), i_(0) {}
  Scalar(bool v) : kind_(Kind::boolean), i_(v) {}  // NOLINT
  template <class T, std::enable_if_t<std::is_integral_v<T> && !std::is_same_v<T, bool>, int> = 0>
  Scalar(T v) : kind_(Kind::integer), i_(int64_t(v)) {}  // NOLINT
  template <class T, std::enable_if_t<std::is_floating_point_v<T>, int> = 0>
  Scalar(T v) : kind_(Kind::floating), d_(double(v)) {}  // NOLINT
  Scalar(bfloat16 v) : kind_(Kind::floating), d_(float(v)) {}  // NOLINT

  Kind kind() const { return kind_; }
  bool is_floating() const { return kind_ == Kind::floating; }
  bool is_integral() const { return kind_ == Kind::integer; }
  bool is_bool() const { return kind_ == Kind::boolean; }

  double to_double() const { return kind_ == Kind::floating ? d_ : double(i_); }
  int64_t to_int() const { return kind_ == Kind::floating ? int64_t(d_) : i_; }
  /// The value converted to T (float for bf16 arithmetic).
  template <class T>
  T to() const {
    if constexpr (std::is_same_v<T, bool>) return kind_ == Kind::floating ? d_ != 0 : i_ != 0;
    else if constexpr (std::is_floating_point_v<T> || std::is_same_v<T, bfloat16>)
      return T(to_double());
    else return kind_ == Kind::floating ? T(d_) : T(i_);
  }

  /// The widest dtype of this kind of number: f64, i64 or bool. Promotion
  /// with tensors uses the kind only (see result_type in ops/promotion.h).
  DType natural_dtype() const {
    return kind_ == Kind::floating ? DType::f64 : kind_ == Kind::integer ? DType::i64 : DType::boolean;
  }

 private:
  Kind kind_;
  union {
    int64_t i_;
    double d_;
  };
};

}  // namespace kiln
