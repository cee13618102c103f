// MPI helpers shared by the dist sources (private to src/dist).
#pragma once

#include <mpi.h>

#include <algorithm>
#include <cstdint>
#include <limits>

#include "kiln/core/dtype.h"
#include "kiln/core/error.h"
#include "kiln/core/tensor.h"

namespace kiln::dist::detail {

/// The MPI type of a dtype; arithmetic: the tensor is to be summed (no bf16).
MPI_Datatype mpi_type(DType dtype, const char* op, bool arithmetic);
/// Throws kiln::Error naming op and MPI's message when code is not MPI_SUCCESS.
void check_mpi(int code, const char* op);
void require_init(const char* op);

/// Runs fn(ptr, count) over pieces of at most INT_MAX elements (MPI counts are int).
template <class Fn>
void chunked(void* data, int64_t numel, int64_t itemsize, const char* op, Fn&& fn) {
  constexpr int64_t kMax = std::numeric_limits<int>::max();
  auto* p = static_cast<char*>(data);
  for (int64_t done = 0; done < numel || (numel == 0 && done == 0);) {
    const int64_t n = std::min(kMax, numel - done);
    if (n == 0) break;
    check_mpi(fn(p + done * itemsize, int(n)), op);
    done += n;
  }
}

inline void all_reduce_raw(void* data, int64_t numel, MPI_Datatype type, MPI_Op mop, MPI_Comm comm, const char* op) {
  int size = 0;
  MPI_Type_size(type, &size);
  chunked(data, numel, size, op, [&](void* p, int n) { return MPI_Allreduce(MPI_IN_PLACE, p, n, type, mop, comm); });
}

/// t *= s in place, for f32/f64 (Mean's division by the world size).
inline void scale(Tensor& t, double s) {
  if (t.dtype() == kF32) {
    float* p = t.data<float>();
    for (int64_t i = 0, n = t.numel(); i < n; ++i) p[i] = float(p[i] * s);
  } else if (t.dtype() == kF64) {
    double* p = t.data<double>();
    for (int64_t i = 0, n = t.numel(); i < n; ++i) p[i] *= s;
  }
}

}  // namespace kiln::dist::detail
