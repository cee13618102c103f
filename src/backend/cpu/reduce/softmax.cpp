// CPU softmax, log_softmax and logsumexp: the entry points, which run the
// kernel copy for the CPU's vector ISA (isa/softmax.cpp), and the row layout
// both copies and the reference share.
#include "src/backend/cpu/reduce/isa/softmax.h"
#include "src/backend/cpu/reduce/reduce.h"

namespace kiln::backend::cpu {

Rows rows_around(const Tensor& x, int64_t dim) {
  Rows r;
  r.c = x.contiguous();
  for (int64_t d = 0; d < x.dim(); ++d) {
    if (d < dim) r.outer *= x.shape()[d];
    else if (d == dim) r.n = x.shape()[d];
    else r.inner *= x.shape()[d];
  }
  return r;
}

void softmax(const Tensor& x, int64_t dim, const Tensor& out, bool log) {
  KILN_ISA_CALL(softmax, x, dim, out, log);
}

void logsumexp(const Tensor& x, int64_t dim, const Tensor& out) {
  KILN_ISA_CALL(logsumexp, x, dim, out);
}

}  // namespace kiln::backend::cpu
