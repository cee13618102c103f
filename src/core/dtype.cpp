// dtype names and promotion.
#include "kiln/core/dtype.h"

#include "kiln/core/device.h"

namespace kiln {

std::string_view name(DType t) {
  switch (t) {
    case DType::boolean: return "bool";
    case DType::u8: return "u8";
    case DType::i32: return "i32";
    case DType::i64: return "i64";
    case DType::bf16: return "bf16";
    case DType::f32: return "f32";
    case DType::f64: return "f64";
  }
  return "?";
}

DType promote_types(DType a, DType b) {
  if (a == b) return a;
  // Kind rank: bool 0, integer 1, floating 2.
  auto kind = [](DType t) { return t == DType::boolean ? 0 : is_integral(t) ? 1 : 2; };
  int ka = kind(a), kb = kind(b);
  if (ka != kb) return ka > kb ? a : b;
  // Same kind: the enum is ordered by width within each kind.
  return a > b ? a : b;
}

std::string Device::str() const {
  return type == DeviceType::cpu ? std::string("cpu") : "cuda:" + std::to_string(index);
}

}  // namespace kiln
