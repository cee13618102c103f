// Creating tensors: filled, ranges, identity, and from host data.
#pragma once

#include <initializer_list>
#include <vector>

#include "kiln/core/tensor.h"

namespace kiln {

/// dtype and device of a new tensor, set with designated initializers:
/// zeros({2, 3}, {.dtype = kF64}).
struct TensorOptions {
  DType dtype = kF32;
  Device device = kCPU;
  bool requires_grad = false;
};

/// Uninitialised.
Tensor empty(const Shape& shape, TensorOptions opts = {});
Tensor zeros(const Shape& shape, TensorOptions opts = {});
Tensor ones(const Shape& shape, TensorOptions opts = {});
Tensor full(const Shape& shape, Scalar value, TensorOptions opts = {});
/// Same shape, dtype and device as `like`.
Tensor empty_like(const Tensor& like);
Tensor zeros_like(const Tensor& like);
Tensor ones_like(const Tensor& like);
Tensor full_like(const Tensor& like, Scalar value);

/// [start, end) in steps of `step` (torch.arange); dtype i64 unless given or
/// any bound is fractional (then f32).
Tensor arange(Scalar end);
Tensor arange(Scalar start, Scalar end, Scalar step = 1);
Tensor arange(Scalar start, Scalar end, Scalar step, TensorOptions opts);
/// `steps` points from start to end inclusive.
Tensor linspace(double start, double end, int64_t steps, TensorOptions opts = {});
/// n x m identity (m defaults to n).
Tensor eye(int64_t n, int64_t m = -1, TensorOptions opts = {});

/// Copies host data into a new tensor of `shape` (default: 1-D). The element
/// type picks the dtype: tensor(std::vector<float>{1, 2}) is f32.
template <class T>
Tensor tensor(const std::vector<T>& data, const Shape& shape);
template <class T>
Tensor tensor(const std::vector<T>& data) { return tensor(data, Shape{int64_t(data.size())}); }
template <class T>
Tensor tensor(std::initializer_list<T> data, const Shape& shape) { return tensor(std::vector<T>(data), shape); }
template <class T>
Tensor tensor(std::initializer_list<T> data) { return tensor(std::vector<T>(data)); }
/// A 0-dim tensor holding `value` (dtype: f32 for floats, i64 for integers, bool).
Tensor scalar_tensor(Scalar value, TensorOptions opts);
Tensor scalar_tensor(Scalar value);
/// Copies numel(shape) elements of `dtype` from `data`.
Tensor from_buffer(const void* data, const Shape& shape, DType dtype);
/// Wraps external memory without copying; `deleter(data, ctx)` runs when the
/// last view goes (may be null when the caller keeps the memory alive).
Tensor from_blob(void* data, const Shape& shape, DType dtype, void (*deleter)(void*, void*) = nullptr,
                 void* ctx = nullptr);
/// Copies all elements (row-major) into `dst`, which holds numel() * itemsize().
void copy_to_buffer(const Tensor& src, void* dst);

}  // namespace kiln
