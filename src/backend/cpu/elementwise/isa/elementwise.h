// The elementwise kernels' two copies (NOTE [Per-ISA kernels] in
// CMakeLists.txt); contracts as in ../elementwise.h, whose cpu::unary,
// cpu::binary, ... pick one with KILN_ISA_CALL.
#pragma once

#include "src/backend/cpu/elementwise/elementwise.h"
#include "src/backend/cpu/isa.h"

namespace kiln::backend::cpu {

KILN_ISA_DECLARE(
    void unary(UnaryOp op, const Tensor& out, const Tensor& x, OpParams p);
    void clamp(const Tensor& out, const Tensor& x, std::optional<Scalar> lo, std::optional<Scalar> hi);
    void binary(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b, OpParams p);
    void binary_scalar(BinaryOp op, const Tensor& out, const Tensor& a, Scalar s, bool reversed, OpParams p);
    void where(const Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b);)

}  // namespace kiln::backend::cpu
