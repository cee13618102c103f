// The kernels' one dtype dispatcher: kiln::dispatch (kiln/core/dtype.h, the
// one switch over dtypes) restricted to the dtypes a kernel supports.
#pragma once

#include <tuple>
#include <type_traits>

#include "kiln/core/dtype.h"
#include "kiln/core/error.h"

namespace kiln::backend::cpu {

/// fn(type_tag<T>{}) for T the C++ type of `t`, instantiated only for the
/// listed Ts (all dtypes when none is listed); any other dtype is an Error
/// naming op (ops check dtypes first: reaching it means a missing check).
/// Floating kernels list <bfloat16, float, double>, index kernels
/// <int32_t, int64_t>:
///   dispatch_only<float, double>(q.dtype(), [&](auto tag) { using T = typename decltype(tag)::type; ... },
///                                "flash_attention");
template <class... Ts, class Fn>
decltype(auto) dispatch_only(DType t, Fn&& fn, const char* op = "dispatch") {
  using First = std::tuple_element_t<0, std::tuple<Ts..., void>>;
  return dispatch(t, [&](auto tag) -> decltype(auto) {
    using T = typename decltype(tag)::type;
    if constexpr (sizeof...(Ts) == 0 || (std::is_same_v<T, Ts> || ...)) {
      return fn(tag);
    } else {
      KILN_FAIL(op, "dtype {} is not supported by this kernel", name(t));
      // Never reached; gives this instantiation the allowed ones' return type.
      return fn(type_tag<First>{});
    }
  });
}

}  // namespace kiln::backend::cpu
