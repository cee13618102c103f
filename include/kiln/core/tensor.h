// Tensor: a cheap handle (shared storage + sizes + strides + offset + dtype +
// optional autograd state). Views share storage. Most math lives in free
// functions (kiln/ops/*.h); the methods here are metadata, element access and
// the PyTorch-style shorthands (x.view(...), loss.backward()), which are
// defined by the ops and autograd layers.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

#include "kiln/core/device.h"
#include "kiln/core/dtype.h"
#include "kiln/core/error.h"
#include "kiln/core/node.h"
#include "kiln/core/scalar.h"
#include "kiln/core/shape.h"
#include "kiln/core/storage.h"

namespace kiln {

class TensorImpl {
 public:
  TensorImpl(std::shared_ptr<Storage> storage, Shape shape, Strides strides, int64_t offset,
             DType dtype);

  std::shared_ptr<Storage> storage;
  Shape shape;
  Strides strides;   // in elements; 0 along broadcast (expanded) dims
  int64_t offset;    // in elements from storage->data()
  int64_t numel;     // == product of shape
  DType dtype;
  bool is_view = false;  // shares storage with the tensor it was made from
  std::unique_ptr<AutogradMeta> autograd;

  AutogradMeta& autograd_meta();  // creates it on first use
};

class Tensor {
 public:
  /// An undefined tensor (like a default torch::Tensor()); most calls throw.
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  /// Uninitialised contiguous tensor.
  static Tensor empty(const Shape& shape, DType dtype = kF32, Device device = kCPU);
  /// A tensor viewing `storage` with the given geometry (no copy, no checks
  /// beyond bounds).
  static Tensor make_view(std::shared_ptr<Storage> storage, Shape shape, Strides strides,
                          int64_t offset, DType dtype);

  bool defined() const { return impl_ != nullptr; }
  TensorImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }

  // ---- metadata ----
  const Shape& shape() const { return impl_->shape; }
  const Shape& sizes() const { return impl_->shape; }
  /// size(-1) is the last dim.
  int64_t size(int64_t dim) const;
  int64_t dim() const { return int64_t(impl_->shape.size()); }
  int64_t ndim() const { return dim(); }
  int64_t numel() const { return impl_->numel; }
  const Strides& strides() const { return impl_->strides; }
  int64_t stride(int64_t dim) const;
  int64_t storage_offset() const { return impl_->offset; }
  DType dtype() const { return impl_->dtype; }
  Device device() const { return impl_->storage->device(); }
  int64_t itemsize() const { return kiln::itemsize(impl_->dtype); }
  int64_t nbytes() const { return numel() * itemsize(); }
  /// Row-major with no gaps (dims of size 1 may have any stride).
  bool is_contiguous() const;
  bool is_view() const { return impl_->is_view; }
  const std::shared_ptr<Storage>& storage() const { return impl_->storage; }
  /// True when both share the same storage object.
  bool is_same_storage(const Tensor& other) const { return storage() == other.storage(); }
  /// Same TensorImpl (identity, as `a is b` in Python).
  bool is_same(const Tensor& other) const { return impl_ == other.impl_; }

  // ---- raw data (host devices only) ----
  /// Pointer to element 0 (storage base + offset).
  void* data_ptr() const;
  /// Typed pointer to element 0; throws when T does not match dtype().
  template <class T>
  T* data() const {
    check_dtype(dtype_v<T>, "data");
    return static_cast<T*>(data_ptr());
  }
  /// The single element as T (numel must be 1).
  template <class T>
  T item() const;
  /// All elements in row-major order, converted to T.
  template <class T>
  std::vector<T> to_vector() const;

  // ---- autograd (state here; the engine is in layer autograd) ----
  bool requires_grad() const { return impl_->autograd && impl_->autograd->requires_grad; }
  /// Marks a leaf as needing gradients; throws for a non-leaf or an integer dtype.
  Tensor& requires_grad_(bool on = true);
  /// Accumulated gradient; undefined before the first backward.
  Tensor grad() const;
  /// Replaces the gradient (undefined clears it).
  void set_grad(const Tensor& grad) const;
  /// True unless produced by a recorded op.
  bool is_leaf() const { return !impl_->autograd || !impl_->autograd->grad_fn; }
  /// The node that produced this tensor, or null.
  const std::shared_ptr<Node>& grad_fn() const;
  uint32_t output_nr() const { return impl_->autograd ? impl_->autograd->output_nr : 0; }
  /// Keep grad() for this non-leaf after backward.
  void retain_grad() const;
  /// Backpropagates from this tensor. A non-scalar needs `gradient` (same
  /// shape). Defined in layer autograd (src/autograd/engine.cpp).
  void backward(const Tensor& gradient = {}, bool retain_graph = false,
                bool create_graph = false) const;
  /// Same data, cut from the graph.
  Tensor detach() const;

  // ---- shorthands for ops in kiln/ops (defined there) ----
  Tensor view(const Shape& shape) const;
  Tensor reshape(const Shape& shape) const;
  Tensor transpose(int64_t dim0, int64_t dim1) const;
  Tensor t() const;  // 2-D transpose
  Tensor permute(const Shape& dims) const;
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  Tensor slice(int64_t dim, int64_t start, int64_t end, int64_t step = 1) const;
  Tensor select(int64_t dim, int64_t index) const;
  Tensor expand(const Shape& shape) const;
  Tensor squeeze() const;
  Tensor squeeze(int64_t dim) const;
  Tensor unsqueeze(int64_t dim) const;
  Tensor flatten(int64_t start_dim = 0, int64_t end_dim = -1) const;
  Tensor contiguous() const;
  Tensor clone() const;
  Tensor to(DType dtype) const;
  /// x[i]: select along dim 0.
  Tensor operator[](int64_t index) const { return select(0, index); }

  /// PyTorch-like text: "tensor([[1., 2.],\n        [3., 4.]])".
  std::string str() const;

  void check_dtype(DType expected, const char* op) const;

 private:
  std::shared_ptr<TensorImpl> impl_;
};

std::ostream& operator<<(std::ostream& os, const Tensor& t);

/// Shape and dtype for error messages: "[3, 2] f32" ("an undefined tensor").
std::string describe(const Tensor& t);

}  // namespace kiln
