// Tensor handle: metadata, element access and autograd state.
#include "kiln/core/tensor.h"

#include <ostream>

#include "kiln/core/backends.h"
#include "kiln/core/grad_mode.h"
#include "kiln/core/replay.h"
#include "kiln/core/size_check.h"

namespace kiln {

TensorImpl::TensorImpl(std::shared_ptr<Storage> storage_, Shape shape_, Strides strides_, int64_t offset_,
                       DType dtype_)
    : storage(std::move(storage_)),
      shape(std::move(shape_)),
      strides(std::move(strides_)),
      offset(offset_),
      numel(kiln::numel(shape)),
      dtype(dtype_) {}

AutogradMeta& TensorImpl::autograd_meta() {
  if (!autograd) autograd = std::make_unique<AutogradMeta>();
  return *autograd;
}

int64_t checked_nbytes(const char* op, std::span<const int64_t> shape, DType dtype) {
  int64_t bytes = 0;
  KILN_CHECK(!__builtin_mul_overflow(checked_numel(op, shape), kiln::itemsize(dtype), &bytes), op,
             "shape {} of {} has more than 2^63 bytes", to_string(shape), name(dtype));
  return bytes;
}

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) {
  return empty_for("empty", shape, dtype, device);
}

Tensor empty_for(const char* op, const Shape& shape, DType dtype, Device device) {
  check_device(op, device);
  const int64_t nbytes = checked_nbytes(op, shape, dtype);
  std::shared_ptr<Storage> storage;
  try {
    storage = std::make_shared<Storage>(size_t(nbytes), device);
  } catch (const Error& e) {
    if (e.op() != detail::kAllocateOp) throw;
    KILN_FAIL(op, "cannot allocate {} bytes ({}) for shape {} of {}: out of memory", nbytes,
              format_bytes(nbytes), to_string(shape), name(dtype));
  }
  return Tensor(std::make_shared<TensorImpl>(std::move(storage), shape, contiguous_strides(shape), 0, dtype));
}

Tensor Tensor::make_view(std::shared_ptr<Storage> storage, Shape shape, Strides strides, int64_t offset,
                         DType dtype) {
  auto impl = std::make_shared<TensorImpl>(std::move(storage), std::move(shape), std::move(strides), offset, dtype);
  impl->is_view = true;
  return Tensor(std::move(impl));
}

int64_t Tensor::size(int64_t d) const { return impl_->shape[wrap_dim("size", d, dim())]; }
int64_t Tensor::stride(int64_t d) const { return impl_->strides[wrap_dim("stride", d, dim())]; }

bool Tensor::is_contiguous() const {
  int64_t expected = 1;
  for (size_t i = impl_->shape.size(); i-- > 0;) {
    if (impl_->shape[i] == 1) continue;
    if (impl_->strides[i] != expected) return impl_->numel == 0;
    expected *= impl_->shape[i];
  }
  return true;
}

void* Tensor::data_ptr() const {
  KILN_CHECK(defined(), "data_ptr", "undefined tensor");
  if (replay::recording()) [[unlikely]] replay::on_data_access(impl_);
  return static_cast<char*>(impl_->storage->data()) + impl_->offset * kiln::itemsize(impl_->dtype);
}

void Tensor::check_dtype(DType expected, const char* op) const {
  KILN_CHECK(defined(), op, "undefined tensor");
  KILN_CHECK(dtype() == expected, op, "tensor has dtype {}, expected {}", name(dtype()), name(expected));
}

namespace {
// Visits every element in row-major order as fn(const T*).
template <class T, class Fn>
void for_each_element(const Tensor& t, Fn&& fn) {
  const T* base = static_cast<const T*>(t.data_ptr());
  int64_t nd = t.dim(), n = t.numel();
  if (t.is_contiguous()) {
    for (int64_t i = 0; i < n; ++i) fn(base[i]);
    return;
  }
  Shape idx = Shape::filled(size_t(nd), 0);
  for (int64_t i = 0; i < n; ++i) {
    int64_t off = 0;
    for (int64_t d = 0; d < nd; ++d) off += idx[d] * t.strides()[d];
    fn(base[off]);
    for (int64_t d = nd - 1; d >= 0; --d) {
      if (++idx[d] < t.shape()[d]) break;
      idx[d] = 0;
    }
  }
}
}  // namespace

template <class T>
T Tensor::item() const {
  KILN_CHECK(defined(), "item", "undefined tensor");
  replay::host_read("item");
  KILN_CHECK(numel() == 1, "item", "tensor of shape {} has {} elements, expected 1", to_string(shape()), numel());
  return dispatch(dtype(), [&](auto tag) {
    using S = typename decltype(tag)::type;
    return T(acc_t<S>(*static_cast<const S*>(data_ptr())));
  });
}

template <class T>
std::vector<T> Tensor::to_vector() const {
  KILN_CHECK(defined(), "to_vector", "undefined tensor");
  replay::host_read("to_vector");
  std::vector<T> out;
  out.reserve(size_t(numel()));
  dispatch(dtype(), [&](auto tag) {
    using S = typename decltype(tag)::type;
    for_each_element<S>(*this, [&](const S& v) { out.push_back(T(acc_t<S>(v))); });
  });
  return out;
}

#define KILN_INSTANTIATE(T) \
  template T Tensor::item<T>() const; \
  template std::vector<T> Tensor::to_vector<T>() const;
KILN_INSTANTIATE(bool)
KILN_INSTANTIATE(uint8_t)
KILN_INSTANTIATE(int32_t)
KILN_INSTANTIATE(int64_t)
KILN_INSTANTIATE(float)
KILN_INSTANTIATE(double)
#undef KILN_INSTANTIATE
template <> bfloat16 Tensor::item<bfloat16>() const { return bfloat16(item<float>()); }
template <> std::vector<bfloat16> Tensor::to_vector<bfloat16>() const {
  auto f = to_vector<float>();
  return {f.begin(), f.end()};
}

Tensor& Tensor::requires_grad_(bool on) {
  KILN_CHECK(defined(), "requires_grad_", "undefined tensor");
  KILN_CHECK(is_leaf() || on, "requires_grad_",
             "can only change requires_grad of leaf tensors (this one comes from '{}'); use detach()",
             grad_fn()->name());
  KILN_CHECK(!on || is_floating(dtype()), "requires_grad_",
             "only floating-point tensors can require gradients, got {}", name(dtype()));
  if (on || impl_->autograd) impl_->autograd_meta().requires_grad = on;
  return *this;
}

Tensor Tensor::grad() const {
  KILN_CHECK(defined(), "grad", "undefined tensor");
  if (!impl_->autograd || !impl_->autograd->grad) return Tensor();
  return Tensor(impl_->autograd->grad);
}

void Tensor::set_grad(const Tensor& g) const {
  KILN_CHECK(defined(), "set_grad", "undefined tensor");
  if (g.defined())
    KILN_CHECK(g.shape() == shape() && g.dtype() == dtype(), "set_grad",
               "gradient {} {} does not match tensor {} {}", to_string(g.shape()), name(g.dtype()),
               to_string(shape()), name(dtype()));
  if (!g.defined() && !impl_->autograd) return;
  impl_->autograd_meta().grad = g.impl_;
  if (replay::active()) [[unlikely]] replay::on_set_grad(impl_, g.impl_);
}

const std::shared_ptr<Node>& Tensor::grad_fn() const {
  static const std::shared_ptr<Node> none;
  return impl_->autograd ? impl_->autograd->grad_fn : none;
}

void Tensor::retain_grad() const {
  KILN_CHECK(requires_grad(), "retain_grad", "tensor does not require grad");
  if (is_leaf()) return;  // leaves keep their grad anyway
  AutogradMeta& m = impl_->autograd_meta();
  if (m.retains_grad) return;
  m.retains_grad = true;
  m.grad_fn->retained().emplace_back(m.output_nr, impl_);
}

Tensor Tensor::detach() const {
  KILN_CHECK(defined(), "detach", "undefined tensor");
  auto impl = std::make_shared<TensorImpl>(impl_->storage, impl_->shape, impl_->strides, impl_->offset,
                                           impl_->dtype);
  impl->is_view = true;
  return Tensor(std::move(impl));
}

std::ostream& operator<<(std::ostream& os, const Tensor& t) { return os << t.str(); }

}  // namespace kiln
