// PyTorch's result_type: operands fall into three priority groups (tensors
// with dims, 0-dim tensors, plain numbers); a lower group only matters when
// it has a higher kind (bool < integer < floating) than the groups above.
#include "kiln/ops/promotion.h"

#include <optional>

namespace kiln {

namespace {

int kind(DType t) { return t == kBool ? 0 : is_integral(t) ? 1 : 2; }

struct Groups {
  std::optional<DType> dim, zero, number;

  static void join(std::optional<DType>& g, DType t) { g = g ? promote_types(*g, t) : t; }
  void add(const Tensor& t) { join(t.dim() > 0 ? dim : zero, t.dtype()); }
  // A floating number counts as the default dtype f32; integers as i64.
  void add(Scalar s) { join(number, s.is_floating() ? kF32 : s.natural_dtype()); }

  // The higher group wins unless it is bool or the lower one is floating.
  static std::optional<DType> combine(std::optional<DType> higher, std::optional<DType> lower) {
    if (!higher) return lower;
    if (!lower || is_floating(*higher)) return higher;
    if (*higher == kBool || kind(*lower) > kind(*higher)) return promote_types(*higher, *lower);
    return higher;
  }
  DType result() const { return *combine(dim, combine(zero, number)); }
};

}  // namespace

DType result_type(const Tensor& a, const Tensor& b) {
  if (a.dtype() == b.dtype()) return a.dtype();
  Groups g;
  g.add(a);
  g.add(b);
  return g.result();
}

DType result_type(const Tensor& a, Scalar b) {
  Groups g;
  g.add(a);
  g.add(b);
  return g.result();
}

DType result_type(const Tensor& a, Scalar b, Scalar c) {
  Groups g;
  g.add(a);
  g.add(b);
  g.add(c);
  return g.result();
}

bool can_cast(DType from, DType to) { return kind(from) <= kind(to); }

}  // namespace kiln
