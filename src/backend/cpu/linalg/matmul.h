// CPU matrix-product kernels: oneDNN's matmul primitive for f32 and bf16, a
// plain blocked kernel for f64 and integers, and the triple-loop reference.
#pragma once

#include <string>

#include "kiln/core/tensor.h"

namespace kiln::backend::cpu {

/// What matmul adds around the product (all optional).
struct MatmulEpilogue {
  const Tensor* bias = nullptr;  // [N], any stride; added to every row
  Scalar alpha = 1;              // scales a @ b
  Scalar beta = 0;               // 0: out is overwritten; else out = beta * out + ...
};

/// out[..., M, N] = alpha * a[..., M, K] @ b[..., K, N] + bias + beta * out.
/// a and b have >= 2 dims and any strides (transposed views are not copied);
/// their batch dims broadcast to out's (they may have fewer dims, or size 1
/// or stride 0 where out's is larger). All three share one dtype; the caller
/// has checked every shape. f32/bf16 run on oneDNN (bf16 accumulates in f32),
/// other dtypes on the plain kernel. With beta == 0, out's old values (NaN
/// included) are ignored.
void matmul(const Tensor& a, const Tensor& b, const Tensor& out, const MatmulEpilogue& ep = {});

/// Which implementation oneDNN picked for the last f32/bf16 matmul on this
/// thread ("brg:avx512_core", ...; "plain" when the plain kernel ran). Tests
/// use it to check that strided operands do not fall back to oneDNN's slow
/// reference code.
const std::string& last_matmul_impl();

/// Primitive-cache statistics of the calling thread (tests, benchmarks).
struct MatmulCacheStats {
  int64_t hits = 0, misses = 0, size = 0;
};
MatmulCacheStats matmul_cache_stats();

namespace ref {
/// The plain triple loop (same contract as cpu::matmul), accumulating in
/// acc_t<T>: the oracle for the fast kernels.
void matmul(const Tensor& a, const Tensor& b, const Tensor& out, const MatmulEpilogue& ep = {});
}  // namespace ref

}  // namespace kiln::backend::cpu
