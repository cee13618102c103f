// Tensor::str(): PyTorch's repr (torch/_tensor_str.py with the default print
// options: precision 4, threshold 1000, edgeitems 3, linewidth 80), with
// kiln's dtype names in the suffix ("dtype=f64") and the node name in
// "grad_fn=<add>".
#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "kiln/core/tensor.h"

namespace kiln {

namespace {

constexpr int64_t kThreshold = 1000;  // more elements than this: summarise
constexpr int64_t kEdgeItems = 3;     // shown at each end of a summarised dim
constexpr int64_t kLineWidth = 80;

// Element at storage offset `off` (in elements from the storage base).
double read_real(const Tensor& t, int64_t off) {
  return dispatch(t.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    return double(acc_t<T>(static_cast<const T*>(t.storage()->data())[off]));
  });
}

int64_t read_integer(const Tensor& t, int64_t off) {
  return dispatch(t.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_integral_v<T>) return int64_t(static_cast<const T*>(t.storage()->data())[off]);
    else return int64_t(0);
  });
}

// The indices of a dim that are printed: all, or the edge items when summarising.
std::vector<int64_t> shown(int64_t size, bool summarize) {
  std::vector<int64_t> idx;
  if (summarize && size > 2 * kEdgeItems) {
    for (int64_t i = 0; i < kEdgeItems; ++i) idx.push_back(i);
    for (int64_t i = size - kEdgeItems; i < size; ++i) idx.push_back(i);
  } else {
    for (int64_t i = 0; i < size; ++i) idx.push_back(i);
  }
  return idx;
}

// Calls fn(offset) for every printed element.
template <class F>
void visit(const Tensor& t, int64_t d, int64_t off, bool summarize, F& fn) {
  if (d == t.dim()) {
    fn(off);
    return;
  }
  for (int64_t i : shown(t.size(d), summarize)) visit(t, d + 1, off + i * t.stride(d), summarize, fn);
}

// One formatting rule for all elements (torch's _Formatter): integers, or
// floats as integers ("3."), fixed ("0.1000") or scientific ("1.0000e+08"),
// right-aligned to a common width.
class Formatter {
 public:
  Formatter(const Tensor& t, bool summarize) : t_(t), floating_(is_floating(t.dtype())) {
    if (!floating_) {
      auto fn = [&](int64_t off) { width_ = std::max(width_, int64_t(plain(off).size())); };
      visit(t, 0, t.storage_offset(), summarize, fn);
      return;
    }
    std::vector<double> vals;  // nonzero finite values
    auto collect = [&](int64_t off) {
      double v = read_real(t, off);
      if (std::isfinite(v) && v != 0) vals.push_back(v);
    };
    visit(t, 0, t.storage_offset(), summarize, collect);
    if (vals.empty()) return;
    double lo = INFINITY, hi = 0;
    for (double v : vals) {
      lo = std::min(lo, std::abs(v));
      hi = std::max(hi, std::abs(v));
      if (v != std::ceil(v)) int_mode_ = false;
    }
    sci_ = hi / lo > 1000.0 || hi > 1e8 || (!int_mode_ && lo < 1e-4);
    for (double v : vals) {
      int64_t len = sci_ ? int64_t(fmt::format("{:.4e}", v).size())
                  : int_mode_ ? int64_t(fmt::format("{:.0f}", v).size()) + 1
                              : int64_t(fmt::format("{:.4f}", v).size());
      width_ = std::max(width_, len);
    }
  }

  int64_t width() const { return width_; }

  std::string format(int64_t off) const {
    std::string s = floating_ ? real(read_real(t_, off)) : plain(off);
    if (int64_t(s.size()) < width_) s.insert(0, size_t(width_ - int64_t(s.size())), ' ');
    return s;
  }

 private:
  std::string plain(int64_t off) const {
    if (t_.dtype() == kBool) return static_cast<const bool*>(t_.storage()->data())[off] ? "True" : "False";
    return std::to_string(read_integer(t_, off));
  }
  std::string real(double v) const {
    if (std::isnan(v)) return "nan";
    if (sci_) return fmt::format("{:.4e}", v);
    if (int_mode_) return fmt::format("{:.0f}", v) + (std::isfinite(v) ? "." : "");
    return fmt::format("{:.4f}", v);
  }

  const Tensor& t_;
  bool floating_;
  bool int_mode_ = true;
  bool sci_ = false;
  int64_t width_ = 1;
};

// torch's _tensor_str_with_formatter for dims [d, ndim) at storage offset off.
std::string body(const Tensor& t, int64_t d, int64_t off, int64_t indent, bool summarize, const Formatter& f) {
  const int64_t ndim = t.dim();
  if (ndim == 0) return f.format(off);
  const int64_t size = t.size(d), stride = t.stride(d);
  const bool cut = summarize && size > 2 * kEdgeItems;
  std::vector<std::string> parts;
  for (int64_t i : shown(size, summarize)) {
    if (cut && i == size - kEdgeItems) parts.push_back(d + 1 == ndim ? " ..." : "...");
    parts.push_back(d + 1 == ndim ? f.format(off + i * stride)
                                  : body(t, d + 1, off + i * stride, indent + 1, summarize, f));
  }
  std::string out = "[";
  if (d + 1 == ndim) {
    // A row: as many elements per line as fit in the line width.
    int64_t per_line = std::max<int64_t>(1, (kLineWidth - indent) / (f.width() + 2));
    for (size_t i = 0; i < parts.size(); ++i) {
      if (i > 0 && int64_t(i) % per_line == 0) out.append(",\n").append(size_t(indent + 1), ' ');
      else if (i > 0) out.append(", ");
      out.append(parts[i]);
    }
  } else {
    for (size_t i = 0; i < parts.size(); ++i) {
      if (i > 0) out.append(",").append(size_t(ndim - d - 1), '\n').append(size_t(indent + 1), ' ');
      out.append(parts[i]);
    }
  }
  return out + "]";
}

}  // namespace

std::string describe(const Tensor& t) {
  return t.defined() ? to_string(t.shape()) + " " + std::string(name(t.dtype())) : "an undefined tensor";
}

std::string Tensor::str() const {
  if (!defined()) return "tensor(undefined)";
  const std::string prefix = "tensor(";
  const int64_t indent = int64_t(prefix.size());
  std::vector<std::string> suffixes;
  if (device() != kCPU) suffixes.push_back("device='" + device().str() + "'");
  std::string contents;
  if (numel() == 0) {
    contents = "[]";
    if (dim() != 1) {
      std::string dims;
      for (int64_t i = 0; i < dim(); ++i) dims += (i ? ", " : "") + std::to_string(size(i));
      suffixes.push_back("size=(" + dims + ")");
    }
    if (dtype() != kF32) suffixes.push_back("dtype=" + std::string(name(dtype())));
  } else {
    if (dtype() != kF32 && dtype() != kI64 && dtype() != kBool)
      suffixes.push_back("dtype=" + std::string(name(dtype())));
    bool summarize = numel() > kThreshold;
    Formatter f(*this, summarize);
    contents = body(*this, 0, storage_offset(), indent, summarize, f);
  }
  if (grad_fn()) suffixes.push_back(std::string("grad_fn=<") + grad_fn()->name() + ">");
  else if (requires_grad()) suffixes.push_back("requires_grad=True");

  // torch's _add_suffixes: a suffix that would pass the line width goes on a
  // new line.
  std::string out = prefix + contents;
  size_t nl = out.rfind('\n');
  int64_t last_line = int64_t(out.size()) - (nl == std::string::npos ? -1 : int64_t(nl)) + 1;
  for (const std::string& s : suffixes) {
    if (last_line + int64_t(s.size()) + 2 > kLineWidth) {
      out += ",\n" + std::string(size_t(indent), ' ') + s;
      last_line = indent + int64_t(s.size());
    } else {
      out += ", " + s;
      last_line += int64_t(s.size()) + 2;
    }
  }
  return out + ")";
}

}  // namespace kiln
