// The helpers over ops of tests/support/ops_testing.h.
#include "tests/support/ops_testing.h"

#include <string>

namespace kiln::testing {
namespace {
DType dtype_from_name(const std::string& s) {
  for (DType t : {kBool, kU8, kI32, kI64, kBF16, kF32, kF64})
    if (name(t) == s) return t;
  KILN_FAIL("golden", "unknown dtype '{}'", s);
}
}  // namespace

Tensor golden_tensor(const nlohmann::json& j) {
  Shape shape(j.at("shape").get<std::vector<int64_t>>());
  Tensor t = tensor(golden_values(j.at("data")), shape);
  return to(t, dtype_from_name(j.at("dtype").get<std::string>()));
}

Tensor noncontiguous(const Tensor& x) {
  if (x.dim() == 0) return x;
  // Store with the last dim outermost, then view back: same values, strides permuted.
  Shape perm;
  perm.push_back(x.dim() - 1);
  for (int64_t d = 0; d + 1 < x.dim(); ++d) perm.push_back(d);
  Shape inv;
  for (int64_t d = 1; d < x.dim(); ++d) inv.push_back(d);
  inv.push_back(0);
  Tensor stored;
  {
    NoGradGuard g;
    stored = contiguous(permute(x, perm));
  }
  Tensor out = permute(stored, inv);
  if (x.requires_grad() && x.is_leaf()) {
    // A leaf with the same values and a non-contiguous layout.
    out = out.detach();
    out.requires_grad_(true);
  }
  return out;
}

Tensor leaf(const Shape& shape, uint64_t seed, double lo, double hi) {
  Generator gen(seed);
  Tensor t = rand(shape, gen, {.dtype = kF64});
  Tensor out;
  {
    NoGradGuard g;
    out = add(mul(t, hi - lo), lo);
  }
  out.requires_grad_(true);
  return out;
}

Tensor leaf_of(const Tensor& x) {
  Tensor t;
  {
    NoGradGuard g;
    t = clone(x);
  }
  t.requires_grad_(true);
  return t;
}

Tensor randn_seeded(const Shape& shape, uint64_t seed, DType dtype) {
  Generator gen(seed);
  return to(randn(shape, gen, {.dtype = kF64}), dtype);
}

}  // namespace kiln::testing
