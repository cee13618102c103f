// Sorting ops: sort, argsort, topk. Values are differentiable (the gradient is
// scattered back to where each value came from); indices are i64.
#include "kiln/ops/creation.h"
#include "kiln/ops/index.h"
#include "kiln/ops/record.h"
#include "src/backend/cpu/index/index.h"
#include "src/ops/checks.h"

namespace kiln {

namespace {

// (values, indices) of the first k of each row of x sorted along dim.
std::pair<Tensor, Tensor> sorted_prefix(const char* op, const Tensor& x, int64_t dim, int64_t k, bool descending) {
  int64_t d = wrap_dim(op, dim, x.dim());
  Shape s = x.shape();
  if (x.dim() > 0) s[size_t(d)] = k;
  Tensor values = Tensor::empty(s, x.dtype(), x.device());
  Tensor indices = Tensor::empty(s, kI64, x.device());
  // A 0-dim tensor sorts as one row of one element.
  auto row = [](const Tensor& t) {
    return t.dim() ? t : Tensor::make_view(t.storage(), {1}, {1}, t.storage_offset(), t.dtype());
  };
  KILN_LAUNCH(op, backend::cpu::sort(row(x), d, descending, row(values), row(indices)));
  if (needs_grad(x))
    record(op, {x}, {values}, {indices}, [d, in = x.shape()](const VjpArgs& a) -> Grads {
      return {scatter(zeros(in, {.dtype = a.grad().dtype(), .device = a.grad().device()}), d, a.saved[0], a.grad())};
    });
  return {values, indices};
}

void check_input(const char* op, const Tensor& x) { check_defined(op, x); }

}  // namespace

std::pair<Tensor, Tensor> topk(const Tensor& x, int64_t k, int64_t dim, bool largest, bool sorted) {
  check_input("topk", x);
  int64_t d = wrap_dim("topk", dim, x.dim());
  int64_t n = x.dim() ? x.shape()[size_t(d)] : 1;
  KILN_CHECK(k >= 0 && k <= n, "topk", "k {} is out of range for dim {} of size {} (input {})", k, d, n,
             to_string(x.shape()));
  (void)sorted;  // the k values always come out sorted, which `sorted == false` allows
  return sorted_prefix("topk", x, d, k, largest);
}

std::pair<Tensor, Tensor> sort(const Tensor& x, int64_t dim, bool descending) {
  check_input("sort", x);
  int64_t d = wrap_dim("sort", dim, x.dim());
  return sorted_prefix("sort", x, d, x.dim() ? x.shape()[size_t(d)] : 1, descending);
}

Tensor argsort(const Tensor& x, int64_t dim, bool descending) {
  check_input("argsort", x);
  NoGradGuard no_grad;  // only the indices are returned
  int64_t d = wrap_dim("argsort", dim, x.dim());
  return sorted_prefix("argsort", x, d, x.dim() ? x.shape()[size_t(d)] : 1, descending).second;
}

}  // namespace kiln
