// Elementwise binary ops with NumPy broadcasting and PyTorch type promotion,
// their scalar forms, in-place forms, comparisons, logical ops and selection.
#pragma once

#include "kiln/core/tensor.h"

namespace kiln {

// ---- arithmetic (differentiable) ----
Tensor add(const Tensor& a, const Tensor& b);
/// a + alpha * b.
Tensor add(const Tensor& a, const Tensor& b, Scalar alpha);
Tensor add(const Tensor& a, Scalar b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, Scalar b);
/// b - a (torch.rsub).
Tensor rsub(const Tensor& a, Scalar b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, Scalar b);
/// True division: integer inputs give f32.
Tensor div(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, Scalar b);
/// b / a.
Tensor rdiv(const Tensor& a, Scalar b);
Tensor pow(const Tensor& a, const Tensor& b);
Tensor pow(const Tensor& a, Scalar exponent);
/// base ** a.
Tensor pow(Scalar base, const Tensor& a);
/// Elementwise max / min; the gradient goes to the larger (smaller) input,
/// split evenly on ties (as PyTorch does).
Tensor maximum(const Tensor& a, const Tensor& b);
Tensor minimum(const Tensor& a, const Tensor& b);

// ---- in place: write into a (a's dtype must hold the result) ----
Tensor add_(const Tensor& a, const Tensor& b);
Tensor add_(const Tensor& a, const Tensor& b, Scalar alpha);
Tensor add_(const Tensor& a, Scalar b);
Tensor sub_(const Tensor& a, const Tensor& b);
Tensor sub_(const Tensor& a, Scalar b);
Tensor mul_(const Tensor& a, const Tensor& b);
Tensor mul_(const Tensor& a, Scalar b);
Tensor div_(const Tensor& a, const Tensor& b);
Tensor div_(const Tensor& a, Scalar b);
Tensor pow_(const Tensor& a, Scalar exponent);
/// Fills a with value.
Tensor fill_(const Tensor& a, Scalar value);
Tensor zero_(const Tensor& a);

// ---- comparisons and logic: bool results, not differentiable ----
Tensor eq(const Tensor& a, const Tensor& b);
Tensor eq(const Tensor& a, Scalar b);
Tensor ne(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, Scalar b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, Scalar b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, Scalar b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, Scalar b);
Tensor ge(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, Scalar b);
/// Nonzero is true.
Tensor logical_and(const Tensor& a, const Tensor& b);
Tensor logical_or(const Tensor& a, const Tensor& b);
Tensor logical_xor(const Tensor& a, const Tensor& b);
Tensor logical_not(const Tensor& a);
/// Elementwise a == b or |a - b| <= atol + rtol * |b| for finite values
/// (NaN is never close), as a bool tensor.
Tensor isclose(const Tensor& a, const Tensor& b, double rtol = 1e-5, double atol = 1e-8);
/// Whether every element is close (isclose).
bool allclose(const Tensor& a, const Tensor& b, double rtol = 1e-5, double atol = 1e-8);
Tensor isnan(const Tensor& a);
Tensor isfinite(const Tensor& a);

// ---- selection ----
/// cond ? a : b, broadcasting all three; cond must be bool.
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
Tensor where(const Tensor& cond, const Tensor& a, Scalar b);
Tensor where(const Tensor& cond, Scalar a, const Tensor& b);
/// x with `value` (cast to x's dtype) where mask (bool) is true; x and mask
/// broadcast together. The in-place form needs mask to broadcast to x.
Tensor masked_fill(const Tensor& x, const Tensor& mask, Scalar value);
Tensor masked_fill_(const Tensor& x, const Tensor& mask, Scalar value);

// ---- operators ----
inline Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
inline Tensor operator+(const Tensor& a, Scalar b) { return add(a, b); }
inline Tensor operator+(Scalar a, const Tensor& b) { return add(b, a); }
inline Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
inline Tensor operator-(const Tensor& a, Scalar b) { return sub(a, b); }
inline Tensor operator-(Scalar a, const Tensor& b) { return rsub(b, a); }
inline Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
inline Tensor operator*(const Tensor& a, Scalar b) { return mul(a, b); }
inline Tensor operator*(Scalar a, const Tensor& b) { return mul(b, a); }
inline Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
inline Tensor operator/(const Tensor& a, Scalar b) { return div(a, b); }
inline Tensor operator/(Scalar a, const Tensor& b) { return rdiv(b, a); }
Tensor operator-(const Tensor& a);
inline Tensor operator+=(const Tensor& a, const Tensor& b) { return add_(a, b); }
inline Tensor operator+=(const Tensor& a, Scalar b) { return add_(a, b); }
inline Tensor operator-=(const Tensor& a, const Tensor& b) { return sub_(a, b); }
inline Tensor operator-=(const Tensor& a, Scalar b) { return sub_(a, b); }
inline Tensor operator*=(const Tensor& a, const Tensor& b) { return mul_(a, b); }
inline Tensor operator*=(const Tensor& a, Scalar b) { return mul_(a, b); }
inline Tensor operator/=(const Tensor& a, const Tensor& b) { return div_(a, b); }
inline Tensor operator/=(const Tensor& a, Scalar b) { return div_(a, b); }
inline Tensor operator==(const Tensor& a, const Tensor& b) { return eq(a, b); }
inline Tensor operator==(const Tensor& a, Scalar b) { return eq(a, b); }
inline Tensor operator!=(const Tensor& a, const Tensor& b) { return ne(a, b); }
inline Tensor operator!=(const Tensor& a, Scalar b) { return ne(a, b); }
inline Tensor operator<(const Tensor& a, const Tensor& b) { return lt(a, b); }
inline Tensor operator<(const Tensor& a, Scalar b) { return lt(a, b); }
inline Tensor operator<=(const Tensor& a, const Tensor& b) { return le(a, b); }
inline Tensor operator<=(const Tensor& a, Scalar b) { return le(a, b); }
inline Tensor operator>(const Tensor& a, const Tensor& b) { return gt(a, b); }
inline Tensor operator>(const Tensor& a, Scalar b) { return gt(a, b); }
inline Tensor operator>=(const Tensor& a, const Tensor& b) { return ge(a, b); }
inline Tensor operator>=(const Tensor& a, Scalar b) { return ge(a, b); }
inline Tensor operator&&(const Tensor& a, const Tensor& b) { return logical_and(a, b); }
inline Tensor operator||(const Tensor& a, const Tensor& b) { return logical_or(a, b); }
inline Tensor operator!(const Tensor& a) { return logical_not(a); }

}  // namespace kiln
