// Dataset's default gather (get() per example, then a row copy) and
// TensorDataset, whose gather copies whole rows with memcpy.
#include "kiln/data/dataset.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstring>

#include "kiln/core/error.h"
#include "src/data/batch_checks.h"

namespace kiln::data {

void check_batch_part(const char* op, const char* what, const Tensor& out, int64_t n, std::span<const int64_t> row,
                      DType dtype) {
  KILN_CHECK(out.defined(), op, "the batch's {} is undefined", what);
  bool shape_ok = out.dim() == int64_t(row.size()) + 1 && out.size(0) == n &&
                  std::equal(row.begin(), row.end(), out.shape().begin() + 1);
  KILN_CHECK(shape_ok && out.dtype() == dtype, op, "the batch's {} is {}, expected [{}{}{}] {}", what, describe(out), n,
             row.empty() ? "" : ", ", fmt::join(row, ", "), name(dtype));
  KILN_CHECK(out.is_contiguous(), op, "the batch's {} must be contiguous", what);
}

namespace {

// Row `i` of a contiguous [N, ...] tensor as a view [...], without the ops
// layer (no autograd, no checks beyond the caller's).
Tensor row_view(const Tensor& t, int64_t i) {
  Shape shape(std::span<const int64_t>(t.shape().data() + 1, t.shape().size() - 1));
  int64_t row = numel(shape);
  return Tensor::make_view(t.storage(), shape, contiguous_strides(shape), t.storage_offset() + i * row, t.dtype());
}

// Copies `src` (any layout) into the contiguous row `dst` of the same shape.
void copy_row(const Tensor& src, void* dst) {
  Tensor c = src.is_contiguous() ? src : src.contiguous();
  std::memcpy(dst, c.data_ptr(), size_t(c.nbytes()));
}

}  // namespace

void Dataset::gather(std::span<const int64_t> indices, Batch& out) const {
  constexpr const char* op = "Dataset.gather";
  const int64_t n = int64_t(indices.size());
  KILN_CHECK(out.input.defined() && out.input.dim() >= 1 && out.input.size(0) == n, op,
             "the batch's input is {}, expected {} rows", describe(out.input), n);
  std::span<const int64_t> in_row(out.input.shape().data() + 1, out.input.shape().size() - 1);
  check_batch_part(op, "input", out.input, n, in_row, out.input.dtype());
  const bool has_target = out.target.defined();
  std::span<const int64_t> tgt_row;
  if (has_target) {
    KILN_CHECK(out.target.dim() >= 1 && out.target.size(0) == n, op, "the batch's target is {}, expected {} rows",
               describe(out.target), n);
    tgt_row = std::span<const int64_t>(out.target.shape().data() + 1, out.target.shape().size() - 1);
    check_batch_part(op, "target", out.target, n, tgt_row, out.target.dtype());
  }
  auto* in_dst = static_cast<char*>(out.input.data_ptr());
  const size_t in_bytes = size_t(numel(in_row) * out.input.itemsize());
  auto* tgt_dst = has_target ? static_cast<char*>(out.target.data_ptr()) : nullptr;
  const size_t tgt_bytes = has_target ? size_t(numel(tgt_row) * out.target.itemsize()) : 0;
  for (int64_t k = 0; k < n; ++k) {
    Example e = get(indices[size_t(k)]);
    // Every example must look like the one the batch was shaped after.
    KILN_CHECK(e.input.defined() && e.input.shape() == Shape(in_row) && e.input.dtype() == out.input.dtype(), op,
               "example {} has input {}, but the batch's rows are {}", indices[size_t(k)], describe(e.input),
               describe(row_view(out.input, 0)));
    KILN_CHECK(e.target.defined() == has_target, op, "example {} {} a target, the batch's first example {}",
               indices[size_t(k)], e.target.defined() ? "has" : "has no", has_target ? "has" : "has none");
    copy_row(e.input, in_dst + size_t(k) * in_bytes);
    if (has_target) {
      KILN_CHECK(e.target.shape() == Shape(tgt_row) && e.target.dtype() == out.target.dtype(), op,
                 "example {} has target {}, but the batch's rows are {}", indices[size_t(k)], describe(e.target),
                 describe(row_view(out.target, 0)));
      copy_row(e.target, tgt_dst + size_t(k) * tgt_bytes);
    }
  }
}

TensorDataset::TensorDataset(Tensor inputs, Tensor targets) {
  constexpr const char* op = "TensorDataset";
  KILN_CHECK(inputs.defined() && targets.defined(), op, "inputs and targets must be defined, got {} and {}",
             describe(inputs), describe(targets));
  KILN_CHECK(inputs.dim() >= 1 && targets.dim() >= 1, op,
             "inputs and targets need a first (example) dimension, got {} and {}", describe(inputs), describe(targets));
  KILN_CHECK(inputs.size(0) == targets.size(0), op,
             "inputs and targets must have the same first dimension, got {} and {}", describe(inputs),
             describe(targets));
  KILN_CHECK(inputs.device() == kCPU && targets.device() == kCPU, op, "inputs and targets must be on the CPU");
  // Rows are memcpy'd out of these, so they are kept contiguous (a copy only
  // when the caller's are not) and cut from any autograd graph.
  inputs_ = inputs.detach();
  targets_ = targets.detach();
  if (!inputs_.is_contiguous()) inputs_ = inputs_.contiguous();
  if (!targets_.is_contiguous()) targets_ = targets_.contiguous();
}

Example TensorDataset::get(int64_t index) const {
  KILN_CHECK(index >= 0 && index < size(), "TensorDataset.get", "index {} is out of range for {} examples", index,
             size());
  return {row_view(inputs_, index), row_view(targets_, index)};
}

void TensorDataset::gather(std::span<const int64_t> indices, Batch& out) const {
  constexpr const char* op = "TensorDataset.gather";
  const int64_t n = int64_t(indices.size()), size = inputs_.size(0);
  std::span<const int64_t> in_row(inputs_.shape().data() + 1, inputs_.shape().size() - 1);
  std::span<const int64_t> tgt_row(targets_.shape().data() + 1, targets_.shape().size() - 1);
  check_batch_part(op, "input", out.input, n, in_row, inputs_.dtype());
  check_batch_part(op, "target", out.target, n, tgt_row, targets_.dtype());
  // Row bytes = numel / N * itemsize; [64, 1, 28, 28] f32 is 64 copies of 3136 bytes.
  const size_t in_bytes = size_t(numel(in_row) * inputs_.itemsize());
  const size_t tgt_bytes = size_t(numel(tgt_row) * targets_.itemsize());
  const auto* in_src = static_cast<const char*>(inputs_.data_ptr());
  const auto* tgt_src = static_cast<const char*>(targets_.data_ptr());
  auto* in_dst = static_cast<char*>(out.input.data_ptr());
  auto* tgt_dst = static_cast<char*>(out.target.data_ptr());
  for (int64_t k = 0; k < n; ++k) {
    const int64_t i = indices[size_t(k)];
    KILN_CHECK(i >= 0 && i < size, op, "index {} is out of range for {} examples", i, size);
    std::memcpy(in_dst + size_t(k) * in_bytes, in_src + size_t(i) * in_bytes, in_bytes);
    std::memcpy(tgt_dst + size_t(k) * tgt_bytes, tgt_src + size_t(i) * tgt_bytes, tgt_bytes);
  }
}

}  // namespace kiln::data
