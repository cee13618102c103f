// The reference matrix product: a plain triple loop over out's multi-index,
// reading a and b through their own strides. Slow and obvious on purpose.
#include "src/backend/cpu/linalg/matmul.h"

namespace kiln::backend::cpu::ref {

void matmul(const Tensor& a, const Tensor& b, const Tensor& out, const MatmulEpilogue& ep) {
  const int64_t nd = out.dim(), nb = nd - 2;
  const int64_t M = out.shape()[nd - 2], N = out.shape()[nd - 1], K = a.shape()[a.dim() - 1];
  const int64_t batches = numel(std::span<const int64_t>(out.shape().data(), size_t(nb)));
  dispatch(out.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same_v<T, bool>) {
      KILN_FAIL("matmul", "bool tensors are not supported");
    } else {
      using Acc = acc_t<T>;
      const T* pa = static_cast<const T*>(a.data_ptr());
      const T* pb = static_cast<const T*>(b.data_ptr());
      T* po = static_cast<T*>(out.data_ptr());
      const T* pbias = ep.bias ? static_cast<const T*>(ep.bias->data_ptr()) : nullptr;
      Shape idx = Shape::filled(size_t(nb), 0);
      // Offset of batch index idx in t (t's batch dims align to out's from the right).
      auto batch_offset = [&](const Tensor& t) {
        int64_t off = 0, shift = nb - (t.dim() - 2);
        for (int64_t d = 0; d < t.dim() - 2; ++d)
          if (t.shape()[d] != 1) off += idx[d + shift] * t.strides()[d];
        return off;
      };
      for (int64_t bi = 0; bi < batches; ++bi) {
        int64_t rest = bi;
        for (int64_t d = nb - 1; d >= 0; --d) {
          idx[d] = rest % out.shape()[d];
          rest /= out.shape()[d];
        }
        const T* ab = pa + batch_offset(a);
        const T* bb = pb + batch_offset(b);
        T* ob = po + batch_offset(out);
        for (int64_t m = 0; m < M; ++m)
          for (int64_t n = 0; n < N; ++n) {
            Acc s = 0;
            for (int64_t k = 0; k < K; ++k)
              s += Acc(ab[m * a.strides()[a.dim() - 2] + k * a.strides()[a.dim() - 1]]) *
                   Acc(bb[k * b.strides()[b.dim() - 2] + n * b.strides()[b.dim() - 1]]);
            T& o = ob[m * out.strides()[nd - 2] + n * out.strides()[nd - 1]];
            Acc v = ep.alpha.to<Acc>() * s;
            if (pbias) v += Acc(pbias[n * ep.bias->strides()[0]]);
            if (ep.beta.to_double() != 0.0) v += ep.beta.to<Acc>() * Acc(o);
            o = T(v);
          }
      }
    }
  });
}

}  // namespace kiln::backend::cpu::ref
