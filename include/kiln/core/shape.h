// Shape and Strides: a small vector of int64 that keeps up to 6 dims inline,
// so creating a tensor does not allocate for its metadata.
// Strides count elements, not bytes.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <span>
#include <string>
#include <vector>

namespace kiln {

class Shape {
 public:
  static constexpr int64_t kInline = 6;

  Shape() = default;
  Shape(std::initializer_list<int64_t> dims) { assign(dims.begin(), dims.size()); }
  explicit Shape(std::span<const int64_t> dims) { assign(dims.data(), dims.size()); }
  Shape(const std::vector<int64_t>& dims) { assign(dims.data(), dims.size()); }  // NOLINT
  /// n copies of value.
  static Shape filled(size_t n, int64_t value) {
    Shape s;
    s.resize(n, value);
    return s;
  }
  Shape(const Shape& o) { assign(o.data(), o.size_); }
  Shape(Shape&& o) noexcept { steal(o); }
  Shape& operator=(const Shape& o) {
    if (this != &o) assign(o.data(), o.size_);
    return *this;
  }
  Shape& operator=(Shape&& o) noexcept {
    if (this != &o) {
      release();
      steal(o);
    }
    return *this;
  }
  ~Shape() { release(); }

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  int64_t* data() { return heap_ ? heap_ : inline_; }
  const int64_t* data() const { return heap_ ? heap_ : inline_; }
  int64_t& operator[](size_t i) { return data()[i]; }
  int64_t operator[](size_t i) const { return data()[i]; }
  int64_t* begin() { return data(); }
  int64_t* end() { return data() + size_; }
  const int64_t* begin() const { return data(); }
  const int64_t* end() const { return data() + size_; }
  int64_t back() const { return data()[size_ - 1]; }
  operator std::span<const int64_t>() const { return {data(), size_}; }  // NOLINT
  std::vector<int64_t> vec() const { return {begin(), end()}; }

  void push_back(int64_t v) {
    reserve(size_ + 1);
    data()[size_++] = v;
  }
  void resize(size_t n, int64_t value = 0) {
    reserve(n);
    for (size_t i = size_; i < n; ++i) data()[i] = value;
    size_ = n;
  }
  void insert(size_t pos, int64_t v) {
    reserve(size_ + 1);
    int64_t* d = data();
    std::memmove(d + pos + 1, d + pos, (size_ - pos) * sizeof(int64_t));
    d[pos] = v;
    ++size_;
  }
  void erase(size_t pos) {
    int64_t* d = data();
    std::memmove(d + pos, d + pos + 1, (size_ - pos - 1) * sizeof(int64_t));
    --size_;
  }

  friend bool operator==(const Shape& a, const Shape& b) {
    return a.size_ == b.size_ && std::equal(a.begin(), a.end(), b.begin());
  }

 private:
  void reserve(size_t n) {
    if (n <= capacity_) return;
    size_t cap = std::max<size_t>(n, capacity_ * 2);
    auto* p = new int64_t[cap];
    std::memcpy(p, data(), size_ * sizeof(int64_t));
    delete[] heap_;
    heap_ = p;
    capacity_ = cap;
  }
  void assign(const int64_t* src, size_t n) {
    size_ = 0;
    reserve(n);
    if (n) std::memcpy(data(), src, n * sizeof(int64_t));  // src may be null when n == 0
    size_ = n;
  }
  void release() {
    delete[] heap_;
    heap_ = nullptr;
    capacity_ = kInline;
    size_ = 0;
  }
  void steal(Shape& o) {
    size_ = o.size_;
    capacity_ = o.capacity_;
    heap_ = o.heap_;
    if (!heap_) std::memcpy(inline_, o.inline_, size_ * sizeof(int64_t));
    o.heap_ = nullptr;
    o.capacity_ = kInline;
    o.size_ = 0;
  }

  int64_t inline_[kInline];
  int64_t* heap_ = nullptr;
  size_t size_ = 0;
  size_t capacity_ = kInline;
};

/// Strides have the same representation as shapes.
using Strides = Shape;

/// Product of the dims (1 for a scalar).
inline int64_t numel(std::span<const int64_t> shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

/// Row-major strides: strides[i] == strides[i+1] * max(shape[i+1], 1), last == 1.
Strides contiguous_strides(std::span<const int64_t> shape);

/// "[2, 3, 4]".
std::string to_string(std::span<const int64_t> shape);
inline std::string to_string(const Shape& shape) { return to_string(std::span<const int64_t>(shape)); }

/// Maps dim in [-ndim, ndim) to [0, ndim); throws "[op] dim d out of range for a
/// tensor of ndim n" otherwise. For ndim 0, dims -1 and 0 are accepted.
int64_t wrap_dim(const char* op, int64_t dim, int64_t ndim);

/// NumPy broadcasting of two shapes; throws naming op and both shapes.
Shape broadcast_shapes(const char* op, const Shape& a, const Shape& b);

}  // namespace kiln
