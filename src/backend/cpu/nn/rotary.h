// CPU rotary-embedding kernels: the cos/sin table and the fused rotation of
// rows [rows, T, D] (both pair conventions), plus a plain ref:: version.
#pragma once

#include <cstdint>
#include <vector>

#include "kiln/core/tensor.h"

namespace kiln::backend::cpu {

/// x viewed as [rows, T, D]: the first rd features of each row rotate.
struct RotaryGeom {
  int64_t rows = 0, T = 0, D = 0, rd = 0;
  bool interleaved = false;
};

/// table [2, T, rd / 2] (f32 or f64): cos then sin of pos[t] * base^(-2i / rd),
/// computed in f64.
void rotary_table(const std::vector<int64_t>& pos, double base, int64_t rd, const Tensor& table);

/// out [rows, T, D] (x's dtype) = x rotated by +theta (sign 1) or -theta
/// (sign -1, the adjoint); features past rd are copied. x: any layout.
void rotary(const RotaryGeom& g, const Tensor& x, const Tensor& table, int sign, const Tensor& out);

namespace ref {
/// The same, straight from the definition, one element at a time in f64.
void rotary(const RotaryGeom& g, const Tensor& x, const std::vector<int64_t>& pos, double base, int sign,
            const Tensor& out);
}  // namespace ref

}  // namespace kiln::backend::cpu
