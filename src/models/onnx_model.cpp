// models::OnnxModel (include/kiln/models/onnx_model.h): an ONNX graph run by
// kiln's ops, node by node in the file's topological order.
//
// Each operator is one entry of kOps: a `check` run at load on the node alone
// (attributes kiln cannot honour make the node unsupported, so every problem
// is reported before anything runs) and a `run` on the node's input tensors.
// Semantics are ONNX's (onnx.ai/onnx/operators), including the opset changes
// between 11 and 17 that PyTorch 1.13's exporter and the backend node tests
// use: Softmax/LogSoftmax (2-D coercion before 13), Unsqueeze/Squeeze/Split/
// ReduceSum axes (attribute before 13, input from 13), Slice (attributes
// before 10), Shape's start/end (15). docs/model_files.md, "ONNX".
#include "kiln/models/onnx_model.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>
#include <set>
#include <unordered_map>

#include <fmt/ranges.h>

#include "kiln/core/error.h"
#include "kiln/ops/binary.h"
#include "kiln/ops/conv.h"
#include "kiln/ops/creation.h"
#include "kiln/ops/index.h"
#include "kiln/ops/linalg.h"
#include "kiln/ops/norm.h"
#include "kiln/ops/pool.h"
#include "kiln/ops/reduce.h"
#include "kiln/ops/shape.h"
#include "kiln/ops/unary.h"

namespace kiln::models {
namespace {

using io::OnnxAttribute;
using io::OnnxAttrType;
using io::OnnxNode;

// A child module that only holds parameters: "fc1.weight" lives in scope "fc1".
struct OnnxScope : nn::Module {};

// ---- attributes ----

int64_t attr_i(const OnnxNode& n, const char* name, int64_t def) {
  const OnnxAttribute* a = n.attribute(name);
  if (!a) return def;
  KILN_CHECK(a->type == OnnxAttrType::i, "onnx", "attribute '{}' is not an INT", name);
  return a->i;
}
double attr_f(const OnnxNode& n, const char* name, double def) {
  const OnnxAttribute* a = n.attribute(name);
  if (!a) return def;
  KILN_CHECK(a->type == OnnxAttrType::f, "onnx", "attribute '{}' is not a FLOAT", name);
  return a->f;
}
std::string attr_s(const OnnxNode& n, const char* name, const std::string& def) {
  const OnnxAttribute* a = n.attribute(name);
  if (!a) return def;
  KILN_CHECK(a->type == OnnxAttrType::s, "onnx", "attribute '{}' is not a STRING", name);
  return a->s;
}
std::optional<std::vector<int64_t>> attr_ints(const OnnxNode& n, const char* name) {
  const OnnxAttribute* a = n.attribute(name);
  if (!a) return std::nullopt;
  KILN_CHECK(a->type == OnnxAttrType::ints, "onnx", "attribute '{}' is not INTS", name);
  return a->ints;
}

// ---- tensors as values ----

std::vector<int64_t> ints_of(const Tensor& t, const char* what) {
  KILN_CHECK(t.defined(), "onnx", "{} is missing", what);
  KILN_CHECK(t.dtype() == kI64 || t.dtype() == kI32, "onnx", "{} must be INT64 (or INT32), got {}", what,
             name(t.dtype()));
  KILN_CHECK(t.dim() <= 1, "onnx", "{} must be a 1-D tensor, got shape {}", what, to_string(t.sizes()));
  Tensor c = to(t, kI64).contiguous();
  const int64_t* p = c.numel() ? c.data<int64_t>() : nullptr;
  return std::vector<int64_t>(p, p + c.numel());
}
double scalar_of(const Tensor& t, const char* what) {
  KILN_CHECK(t.defined() && t.numel() == 1, "onnx", "{} must hold one value, got shape {}", what,
             t.defined() ? to_string(t.sizes()) : std::string("(missing)"));
  return to(t, kF64).contiguous().data<double>()[0];
}
Tensor i64_tensor(const std::vector<int64_t>& v) { return tensor(v, Shape{int64_t(v.size())}); }

int64_t norm_axis(int64_t axis, int64_t rank, const char* what) {
  KILN_CHECK(axis >= -rank && axis < rank, "onnx", "{} {} is out of range for rank {}", what, axis, rank);
  return axis < 0 ? axis + rank : axis;
}

Shape broadcast_shapes(const Shape& a, const Shape& b) {
  const size_t r = std::max(a.size(), b.size());
  std::vector<int64_t> out(r);
  for (size_t i = 0; i < r; ++i) {
    int64_t x = i < r - a.size() ? 1 : a[i - (r - a.size())];
    int64_t y = i < r - b.size() ? 1 : b[i - (r - b.size())];
    KILN_CHECK(x == y || x == 1 || y == 1, "onnx", "shapes {} and {} do not broadcast", to_string(a), to_string(b));
    out[i] = x == 1 ? y : x;
  }
  return Shape(out);
}

// ---- the operators ----

struct Ctx {
  const OnnxNode& node;
  const std::vector<Tensor>& in;  // "" inputs are undefined tensors
  int64_t opset;
  const Tensor& input(size_t i) const {
    static const Tensor none;
    return i < in.size() ? in[i] : none;
  }
  bool has(size_t i) const { return i < in.size() && in[i].defined(); }
  size_t n_out() const { return node.outputs.size(); }
  bool wants(size_t i) const { return i < node.outputs.size() && !node.outputs[i].empty(); }
};
using Outs = std::vector<Tensor>;

// The unsupported part of a node, or "" when kiln runs it.
using CheckFn = std::string (*)(const OnnxNode&, int64_t opset);
using RunFn = Outs (*)(const Ctx&);
struct OpDef {
  RunFn run;
  CheckFn check = nullptr;
};

std::string no_check(const OnnxNode&, int64_t) { return {}; }

// Binary elementwise ops with ONNX's (numpy) broadcasting; both inputs have
// the same type in ONNX.
Outs run_add(const Ctx& c) { return {add(c.input(0), c.input(1))}; }
Outs run_sub(const Ctx& c) { return {sub(c.input(0), c.input(1))}; }
Outs run_mul(const Ctx& c) { return {mul(c.input(0), c.input(1))}; }
Outs run_div(const Ctx& c) {
  const Tensor &a = c.input(0), &b = c.input(1);
  if (is_floating(a.dtype())) return {div(a, b)};
  // Integer Div truncates toward zero (C's division), e.g. shape arithmetic
  // dim / n_head in exported attention. Exact in f64 for |values| < 2^53.
  Tensor q = div(to(a, kF64), to(b, kF64));
  Tensor t = mul(sign(q), floor(abs(q)));
  return {to(t, a.dtype())};
}
Outs run_pow(const Ctx& c) {
  const Tensor &a = c.input(0), &b = c.input(1);
  // The result has the base's type (opset 12+ allows a different exponent type).
  if (is_floating(a.dtype())) return {pow(a, to(b, a.dtype()))};
  return {to(round(pow(to(a, kF64), to(b, kF64))), a.dtype())};
}
Outs run_max(const Ctx& c) {
  Tensor r = c.input(0);
  for (size_t i = 1; i < c.in.size(); ++i) r = maximum(r, c.input(i));
  return {r};
}
Outs run_min(const Ctx& c) {
  Tensor r = c.input(0);
  for (size_t i = 1; i < c.in.size(); ++i) r = minimum(r, c.input(i));
  return {r};
}
Outs run_equal(const Ctx& c) { return {eq(c.input(0), c.input(1))}; }
Outs run_less(const Ctx& c) { return {lt(c.input(0), c.input(1))}; }
Outs run_less_equal(const Ctx& c) { return {le(c.input(0), c.input(1))}; }
Outs run_greater(const Ctx& c) { return {gt(c.input(0), c.input(1))}; }
Outs run_greater_equal(const Ctx& c) { return {ge(c.input(0), c.input(1))}; }
Outs run_and(const Ctx& c) { return {logical_and(c.input(0), c.input(1))}; }
Outs run_or(const Ctx& c) { return {logical_or(c.input(0), c.input(1))}; }
Outs run_xor(const Ctx& c) { return {logical_xor(c.input(0), c.input(1))}; }
Outs run_not(const Ctx& c) { return {logical_not(c.input(0))}; }
Outs run_where(const Ctx& c) { return {where(c.input(0), c.input(1), c.input(2))}; }

Outs run_sqrt(const Ctx& c) { return {sqrt(c.input(0))}; }
Outs run_erf(const Ctx& c) { return {erf(c.input(0))}; }
Outs run_relu(const Ctx& c) { return {relu(c.input(0))}; }
Outs run_tanh(const Ctx& c) { return {tanh(c.input(0))}; }
Outs run_sigmoid(const Ctx& c) { return {sigmoid(c.input(0))}; }
Outs run_exp(const Ctx& c) { return {exp(c.input(0))}; }
Outs run_log(const Ctx& c) { return {log(c.input(0))}; }
Outs run_neg(const Ctx& c) { return {neg(c.input(0))}; }
Outs run_abs(const Ctx& c) { return {abs(c.input(0))}; }
Outs run_reciprocal(const Ctx& c) { return {reciprocal(c.input(0))}; }
Outs run_floor(const Ctx& c) { return {floor(c.input(0))}; }
Outs run_ceil(const Ctx& c) { return {ceil(c.input(0))}; }
Outs run_sin(const Ctx& c) { return {sin(c.input(0))}; }
Outs run_cos(const Ctx& c) { return {cos(c.input(0))}; }
Outs run_leaky_relu(const Ctx& c) { return {leaky_relu(c.input(0), attr_f(c.node, "alpha", 0.01))}; }
Outs run_identity(const Ctx& c) { return {c.input(0)}; }

Outs run_dropout(const Ctx& c) {
  // Inference: the identity, and a mask of all true (the check refuses training_mode).
  Outs o{c.input(0)};
  if (c.wants(1)) o.push_back(ones(c.input(0).sizes(), {.dtype = kBool}));
  return o;
}
std::string check_dropout(const OnnxNode& n, int64_t) {
  if (n.inputs.size() >= 3 && !n.inputs[2].empty()) return "Dropout with a training_mode input (kiln runs inference)";
  return {};
}

Outs run_matmul(const Ctx& c) { return {matmul(c.input(0), c.input(1))}; }

Outs run_gemm(const Ctx& c) {
  Tensor a = c.input(0), b = c.input(1);
  KILN_CHECK(a.dim() == 2 && b.dim() == 2, "onnx", "Gemm wants 2-D A and B, got {} and {}", to_string(a.sizes()),
             to_string(b.sizes()));
  if (attr_i(c.node, "transA", 0)) a = a.t();
  if (attr_i(c.node, "transB", 0)) b = b.t();
  const double alpha = attr_f(c.node, "alpha", 1.0), beta = attr_f(c.node, "beta", 1.0);
  Tensor y = matmul(a, b);
  if (alpha != 1.0) y = mul(y, alpha);
  if (c.has(2) && beta != 0.0) {
    Tensor cc = c.input(2);
    y = add(y, beta == 1.0 ? cc : mul(cc, beta));
  }
  return {y};
}

// Softmax / LogSoftmax: before opset 13 the input is coerced to 2-D
// [prod(dims < axis), prod(dims >= axis)] (default axis 1) and normalised over
// the second; from 13 over the one axis (default -1).
Outs softmax_like(const Ctx& c, bool logarithm) {
  const Tensor& x = c.input(0);
  const int64_t r = std::max<int64_t>(x.dim(), 1);
  if (c.opset >= 13) {
    int64_t axis = norm_axis(attr_i(c.node, "axis", -1), r, "axis");
    return {logarithm ? log_softmax(x, axis) : softmax(x, axis)};
  }
  int64_t axis = norm_axis(attr_i(c.node, "axis", 1), r, "axis");
  int64_t outer = 1;
  for (int64_t i = 0; i < axis; ++i) outer *= x.sizes()[i];
  Tensor flat = reshape(x, Shape{outer, x.numel() / std::max<int64_t>(outer, 1)});
  Tensor y = logarithm ? log_softmax(flat, 1) : softmax(flat, 1);
  return {reshape(y, x.sizes())};
}
Outs run_softmax(const Ctx& c) { return softmax_like(c, false); }
Outs run_log_softmax(const Ctx& c) { return softmax_like(c, true); }

// LayerNormalization (opset 17): normalise over dims >= axis; Scale and B
// broadcast to those dims. Optional outputs Mean and InvStdDev have the
// input's shape with 1 for the normalised dims.
Outs run_layer_norm(const Ctx& c) {
  const Tensor& x = c.input(0);
  const int64_t r = x.dim();
  const int64_t axis = norm_axis(attr_i(c.node, "axis", -1), r, "axis");
  const double eps = attr_f(c.node, "epsilon", 1e-5);
  std::vector<int64_t> norm_shape(x.sizes().begin() + axis, x.sizes().end());
  Tensor scale = c.input(1), bias = c.input(2);
  Tensor y;
  const bool exact = scale.sizes() == Shape(norm_shape) && (!bias.defined() || bias.sizes() == Shape(norm_shape));
  if (exact) {
    y = layer_norm(x, Shape(norm_shape), scale, bias, eps);
  } else {
    y = mul(layer_norm(x, Shape(norm_shape), {}, {}, eps), scale);
    if (bias.defined()) y = add(y, bias);
  }
  Outs o{y};
  if (c.wants(1) || c.wants(2)) {
    std::vector<int64_t> dims;
    for (int64_t d = axis; d < r; ++d) dims.push_back(d);
    Tensor m = mean(x, Shape(dims), true);
    Tensor v = var(x, Shape(dims), /*unbiased=*/false, true);
    o.push_back(m);
    o.push_back(rsqrt(add(v, eps)));
  }
  return o;
}

// BatchNormalization in inference: y = (x - mean) / sqrt(var + eps) * scale + B,
// the per-channel values on dim 1.
Outs run_batch_norm(const Ctx& c) {
  const Tensor& x = c.input(0);
  KILN_CHECK(x.dim() >= 2, "onnx", "BatchNormalization wants an input of rank >= 2, got {}", to_string(x.sizes()));
  std::vector<int64_t> s(size_t(x.dim()), 1);
  s[1] = x.sizes()[1];
  auto chan = [&](const Tensor& t) { return reshape(t, Shape(s)); };
  const double eps = attr_f(c.node, "epsilon", 1e-5);
  Tensor inv = rsqrt(add(chan(c.input(4)), eps));
  Tensor y = add(mul(mul(sub(x, chan(c.input(3))), inv), chan(c.input(1))), chan(c.input(2)));
  return {y};
}
std::string check_batch_norm(const OnnxNode& n, int64_t) {
  if (attr_i(n, "training_mode", 0)) return "BatchNormalization with training_mode=1 (kiln runs inference)";
  for (size_t i = 1; i < n.outputs.size(); ++i)
    if (!n.outputs[i].empty()) return "BatchNormalization with running-statistics outputs (training)";
  return {};
}

// ---- convolution and pooling (1-D and 2-D) ----

// Spatial geometry of a Conv / pool node for an input of `spatial` dims.
struct Window {
  std::vector<int64_t> kernel, stride, dilation, pad_begin, pad_end;
};

Window window_of(const OnnxNode& n, const Shape& in, const std::vector<int64_t>& kernel) {
  const size_t k = kernel.size();
  Window w;
  w.kernel = kernel;
  w.stride = attr_ints(n, "strides").value_or(std::vector<int64_t>(k, 1));
  w.dilation = attr_ints(n, "dilations").value_or(std::vector<int64_t>(k, 1));
  KILN_CHECK(w.stride.size() == k && w.dilation.size() == k, "onnx", "strides / dilations do not have {} values", k);
  std::string auto_pad = attr_s(n, "auto_pad", "NOTSET");
  w.pad_begin.assign(k, 0);
  w.pad_end.assign(k, 0);
  if (auto_pad == "NOTSET") {
    if (auto pads = attr_ints(n, "pads")) {
      KILN_CHECK(pads->size() == 2 * k, "onnx", "pads has {} values, expected {}", pads->size(), 2 * k);
      for (size_t i = 0; i < k; ++i) {
        w.pad_begin[i] = (*pads)[i];
        w.pad_end[i] = (*pads)[i + k];
      }
    }
  } else if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
    // Output ceil(in / stride); the odd pad goes at the end (UPPER) or start (LOWER).
    for (size_t i = 0; i < k; ++i) {
      const int64_t len = in[in.size() - k + i];
      const int64_t out = (len + w.stride[i] - 1) / w.stride[i];
      const int64_t extent = (kernel[i] - 1) * w.dilation[i] + 1;
      const int64_t total = std::max<int64_t>((out - 1) * w.stride[i] + extent - len, 0);
      const int64_t small = total / 2, big = total - small;
      w.pad_begin[i] = auto_pad == "SAME_UPPER" ? small : big;
      w.pad_end[i] = auto_pad == "SAME_UPPER" ? big : small;
    }
  } else {
    KILN_CHECK(auto_pad == "VALID", "onnx", "auto_pad '{}' is not NOTSET, SAME_UPPER, SAME_LOWER or VALID", auto_pad);
  }
  for (size_t i = 0; i < k; ++i)
    KILN_CHECK(w.pad_begin[i] >= 0 && w.pad_end[i] >= 0, "onnx", "negative pads are not supported");
  return w;
}

// The pad list of kiln::pad (last dim first) for a window.
std::vector<int64_t> pad_list(const Window& w) {
  std::vector<int64_t> p;
  for (size_t i = w.kernel.size(); i-- > 0;) {
    p.push_back(w.pad_begin[i]);
    p.push_back(w.pad_end[i]);
  }
  return p;
}
bool any_pad(const Window& w) {
  for (size_t i = 0; i < w.kernel.size(); ++i)
    if (w.pad_begin[i] || w.pad_end[i]) return true;
  return false;
}

std::string check_spatial(const OnnxNode& n, const char* op) {
  if (auto ks = attr_ints(n, "kernel_shape"))
    if (ks->size() != 1 && ks->size() != 2)
      return fmt::format("{} over {} spatial dims (kiln runs 1-D and 2-D)", op, ks->size());
  return {};
}

Outs run_conv(const Ctx& c) {
  Tensor x = c.input(0);
  const Tensor& wt = c.input(1);
  const int64_t k = wt.dim() - 2;
  KILN_CHECK(k == 1 || k == 2, "onnx", "Conv over {} spatial dims (kiln runs 1-D and 2-D)", k);
  KILN_CHECK(x.dim() == k + 2, "onnx", "Conv input {} does not match weight {}", to_string(x.sizes()),
             to_string(wt.sizes()));
  std::vector<int64_t> kernel(wt.sizes().begin() + 2, wt.sizes().end());
  if (auto ks = attr_ints(c.node, "kernel_shape"))
    KILN_CHECK(*ks == kernel, "onnx", "kernel_shape does not match the weight {}", to_string(wt.sizes()));
  Window w = window_of(c.node, x.sizes(), kernel);
  const int64_t groups = attr_i(c.node, "group", 1);
  bool symmetric = true;
  for (int64_t i = 0; i < k; ++i) symmetric = symmetric && w.pad_begin[size_t(i)] == w.pad_end[size_t(i)];
  if (!symmetric) x = pad(x, pad_list(w));
  const Tensor& b = c.input(2);
  if (k == 1) {
    int64_t p = symmetric ? w.pad_begin[0] : 0;
    return {conv1d(x, wt, b, w.stride[0], p, w.dilation[0], groups)};
  }
  ConvPadding p = symmetric ? ConvPadding(w.pad_begin[0], w.pad_begin[1]) : ConvPadding(0);
  return {conv2d(x, wt, b, Size2(w.stride[0], w.stride[1]), p, Size2(w.dilation[0], w.dilation[1]), groups)};
}
std::string check_conv(const OnnxNode& n, int64_t) { return check_spatial(n, "Conv"); }

// x [N, C, L] -> [N, C, 1, L], so that pools run as 2-D.
Tensor as_2d(const Tensor& x, int64_t k) { return k == 1 ? unsqueeze(x, 2) : x; }
Tensor from_2d(const Tensor& y, int64_t k) { return k == 1 ? squeeze(y, 2) : y; }
Window window_2d(Window w) {
  if (w.kernel.size() == 2) return w;
  for (auto* v : {&w.kernel, &w.stride, &w.dilation}) v->insert(v->begin(), 1);
  w.pad_begin.insert(w.pad_begin.begin(), 0);
  w.pad_end.insert(w.pad_end.begin(), 0);
  return w;
}

Outs run_max_pool(const Ctx& c) {
  const Tensor& x0 = c.input(0);
  auto ks = attr_ints(c.node, "kernel_shape");
  KILN_CHECK(ks.has_value(), "onnx", "MaxPool needs kernel_shape");
  const int64_t k = int64_t(ks->size());
  KILN_CHECK(x0.dim() == k + 2, "onnx", "MaxPool input {} for a {}-D kernel", to_string(x0.sizes()), k);
  Window w = window_2d(window_of(c.node, x0.sizes(), *ks));
  // kiln's pools run on floating types: integers (UINT8 images) go through f64, exactly.
  Tensor x = as_2d(is_floating(x0.dtype()) ? x0 : to(x0, kF64), k);
  // Padding with the lowest value is exactly ONNX's (pads never win a max).
  if (any_pad(w)) x = pad(x, pad_list(w), is_floating(x.dtype()) ? Scalar(-INFINITY) : Scalar(0));
  const bool ceil_mode = attr_i(c.node, "ceil_mode", 0);
  Tensor y = max_pool2d(x, Size2(w.kernel[0], w.kernel[1]), Size2(w.stride[0], w.stride[1]), 0,
                        Size2(w.dilation[0], w.dilation[1]), ceil_mode);
  return {to(from_2d(y, k), x0.dtype())};
}
std::string check_max_pool(const OnnxNode& n, int64_t) {
  if (n.outputs.size() > 1 && !n.outputs[1].empty()) return "MaxPool with an Indices output";
  if (attr_i(n, "storage_order", 0)) return "MaxPool with storage_order=1";
  return check_spatial(n, "MaxPool");
}

Outs run_avg_pool(const Ctx& c) {
  const Tensor& x0 = c.input(0);
  auto ks = attr_ints(c.node, "kernel_shape");
  KILN_CHECK(ks.has_value(), "onnx", "AveragePool needs kernel_shape");
  const int64_t k = int64_t(ks->size());
  KILN_CHECK(x0.dim() == k + 2, "onnx", "AveragePool input {} for a {}-D kernel", to_string(x0.sizes()), k);
  Window w = window_2d(window_of(c.node, x0.sizes(), *ks));
  const bool ceil_mode = attr_i(c.node, "ceil_mode", 0);
  const bool include_pad = attr_i(c.node, "count_include_pad", 0);
  Tensor x = as_2d(x0, k);
  auto pool = [&](const Tensor& t) {
    return avg_pool2d(t, Size2(w.kernel[0], w.kernel[1]), Size2(w.stride[0], w.stride[1]), 0, ceil_mode, true);
  };
  if (!any_pad(w)) return {from_2d(pool(x), k)};
  Tensor padded = pad(x, pad_list(w));
  if (include_pad) return {from_2d(pool(padded), k)};
  // Without the pads in the count: the mean over the padded input divided by
  // the mean of a mask that is 1 inside (the same divisor cancels).
  std::vector<int64_t> ms{1, 1, x.sizes()[2], x.sizes()[3]};
  Tensor mask = pad(ones(Shape(ms), {.dtype = x.dtype()}), pad_list(w));
  return {from_2d(div(pool(padded), pool(mask)), k)};
}
std::string check_avg_pool(const OnnxNode& n, int64_t) { return check_spatial(n, "AveragePool"); }

Outs run_global_avg_pool(const Ctx& c) {
  const Tensor& x = c.input(0);
  std::vector<int64_t> dims;
  for (int64_t d = 2; d < x.dim(); ++d) dims.push_back(d);
  return {mean(x, Shape(dims), true)};
}
Outs run_global_max_pool(const Ctx& c) {
  const Tensor& x = c.input(0);
  std::vector<int64_t> dims;
  for (int64_t d = 2; d < x.dim(); ++d) dims.push_back(d);
  return {amax(x, Shape(dims), true)};
}

// ---- shapes ----

Outs run_reshape(const Ctx& c) {
  const Tensor& x = c.input(0);
  std::vector<int64_t> s = c.opset >= 5 ? ints_of(c.input(1), "Reshape's shape")
                                        : attr_ints(c.node, "shape").value_or(std::vector<int64_t>{});
  const bool allowzero = attr_i(c.node, "allowzero", 0);
  int64_t infer = -1, known = 1;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == 0 && !allowzero) {
      KILN_CHECK(int64_t(i) < x.dim(), "onnx", "Reshape: 0 at position {} copies a dim the input {} lacks", i,
                 to_string(x.sizes()));
      s[i] = x.sizes()[i];
    }
    if (s[i] == -1) {
      KILN_CHECK(infer < 0, "onnx", "Reshape: more than one -1 in the shape");
      infer = int64_t(i);
    } else {
      KILN_CHECK(s[i] >= 0, "onnx", "Reshape: invalid size {}", s[i]);
      known *= s[i];
    }
  }
  if (infer >= 0) {
    KILN_CHECK(known > 0 && x.numel() % known == 0, "onnx", "Reshape: cannot infer -1 for {} from {}", to_string(x.sizes()),
               fmt::format("{}", fmt::join(s, ", ")));
    s[size_t(infer)] = x.numel() / known;
  }
  return {reshape(x, Shape(s))};
}

Outs run_flatten(const Ctx& c) {
  const Tensor& x = c.input(0);
  const int64_t r = x.dim();
  int64_t axis = attr_i(c.node, "axis", 1);
  KILN_CHECK(axis >= -r && axis <= r, "onnx", "Flatten axis {} out of range for rank {}", axis, r);
  if (axis < 0) axis += r;
  int64_t outer = 1;
  for (int64_t i = 0; i < axis; ++i) outer *= x.sizes()[i];
  int64_t inner = 1;
  for (int64_t i = axis; i < r; ++i) inner *= x.sizes()[i];
  return {reshape(x, Shape{outer, inner})};
}

Outs run_transpose(const Ctx& c) {
  const Tensor& x = c.input(0);
  std::vector<int64_t> perm;
  if (auto p = attr_ints(c.node, "perm"))
    perm = *p;
  else
    for (int64_t i = x.dim(); i-- > 0;) perm.push_back(i);
  return {permute(x, Shape(perm))};
}

Outs run_concat(const Ctx& c) {
  KILN_CHECK(!c.in.empty(), "onnx", "Concat has no inputs");
  const int64_t axis = norm_axis(attr_i(c.node, "axis", 0), c.input(0).dim(), "axis");
  return {cat(c.in, axis)};
}

Outs run_split(const Ctx& c) {
  const Tensor& x = c.input(0);
  const int64_t axis = norm_axis(attr_i(c.node, "axis", 0), x.dim(), "axis");
  std::vector<int64_t> sizes;
  if (c.opset >= 13) {
    if (c.has(1)) sizes = ints_of(c.input(1), "Split's split");
  } else if (auto s = attr_ints(c.node, "split")) {
    sizes = *s;
  }
  const int64_t n = int64_t(c.n_out()), len = x.sizes()[axis];
  if (sizes.empty()) {
    // Equal parts, the last smaller when the length does not divide (opset 18's rule; exact before).
    const int64_t part = (len + n - 1) / n;
    for (int64_t i = 0; i < n; ++i) sizes.push_back(std::min(part, len - i * part));
  }
  KILN_CHECK(int64_t(sizes.size()) == n, "onnx", "Split into {} sizes for {} outputs", sizes.size(), n);
  return split(x, sizes, axis);
}

// Slice: starts/ends/axes/steps are inputs from opset 10, attributes before.
// Indices clamp as numpy's: [0, dim] for a positive step, [-1, dim-1] for a negative one.
Outs run_slice(const Ctx& c) {
  Tensor x = c.input(0);
  const int64_t r = x.dim();
  std::vector<int64_t> starts, ends, axes, steps;
  if (c.opset >= 10) {
    starts = ints_of(c.input(1), "Slice's starts");
    ends = ints_of(c.input(2), "Slice's ends");
    if (c.has(3)) axes = ints_of(c.input(3), "Slice's axes");
    if (c.has(4)) steps = ints_of(c.input(4), "Slice's steps");
  } else {
    starts = attr_ints(c.node, "starts").value_or(std::vector<int64_t>{});
    ends = attr_ints(c.node, "ends").value_or(std::vector<int64_t>{});
    axes = attr_ints(c.node, "axes").value_or(std::vector<int64_t>{});
  }
  KILN_CHECK(starts.size() == ends.size(), "onnx", "Slice: {} starts but {} ends", starts.size(), ends.size());
  if (axes.empty())
    for (size_t i = 0; i < starts.size(); ++i) axes.push_back(int64_t(i));
  if (steps.empty()) steps.assign(starts.size(), 1);
  KILN_CHECK(axes.size() == starts.size() && steps.size() == starts.size(), "onnx",
             "Slice: starts, ends, axes and steps differ in length");
  for (size_t i = 0; i < starts.size(); ++i) {
    const int64_t axis = norm_axis(axes[i], r, "Slice axis");
    const int64_t dim = x.sizes()[axis], step = steps[i];
    KILN_CHECK(step != 0, "onnx", "Slice: step 0");
    int64_t s = starts[i], e = ends[i];
    if (s < 0) s += dim;
    if (e < 0) e += dim;
    if (step > 0) {
      s = std::clamp<int64_t>(s, 0, dim);
      e = std::clamp<int64_t>(e, 0, dim);
      x = slice(x, axis, s, std::max(s, e), step);
    } else {
      s = std::clamp<int64_t>(s, -1, dim - 1);
      e = std::clamp<int64_t>(e, -1, dim - 1);
      std::vector<int64_t> idx;
      for (int64_t j = s; j > e; j += step) idx.push_back(j);
      x = index_select(x, axis, i64_tensor(idx));
    }
  }
  return {x};
}

// Gather: data.shape[:axis] + indices.shape + data.shape[axis+1:]; negative
// indices count from the end.
Outs run_gather(const Ctx& c) {
  const Tensor& x = c.input(0);
  const int64_t axis = norm_axis(attr_i(c.node, "axis", 0), x.dim(), "axis");
  Tensor idx = to(c.input(1), kI64);
  const int64_t dim = x.sizes()[axis];
  idx = where(lt(idx, 0), add(idx, dim), idx);
  Tensor flat = index_select(x, axis, reshape(idx, Shape{idx.numel()}));
  std::vector<int64_t> s(x.sizes().begin(), x.sizes().begin() + axis);
  s.insert(s.end(), idx.sizes().begin(), idx.sizes().end());
  s.insert(s.end(), x.sizes().begin() + axis + 1, x.sizes().end());
  return {reshape(flat, Shape(s))};
}

std::vector<int64_t> axes_of(const Ctx& c, size_t input, int64_t attr_until) {
  if (c.opset < attr_until) return attr_ints(c.node, "axes").value_or(std::vector<int64_t>{});
  return c.has(input) ? ints_of(c.input(input), "axes") : std::vector<int64_t>{};
}

Outs run_unsqueeze(const Ctx& c) {
  Tensor x = c.input(0);
  std::vector<int64_t> axes = axes_of(c, 1, 13);
  const int64_t r = x.dim() + int64_t(axes.size());
  for (int64_t& a : axes) a = norm_axis(a, r, "Unsqueeze axis");
  std::sort(axes.begin(), axes.end());
  KILN_CHECK(std::adjacent_find(axes.begin(), axes.end()) == axes.end(), "onnx", "Unsqueeze: repeated axis");
  for (int64_t a : axes) x = unsqueeze(x, a);
  return {x};
}

Outs run_squeeze(const Ctx& c) {
  const Tensor& x = c.input(0);
  std::vector<int64_t> axes = axes_of(c, 1, 13);
  if (axes.empty()) return {squeeze(x)};
  for (int64_t& a : axes) a = norm_axis(a, x.dim(), "Squeeze axis");
  std::vector<int64_t> s;
  for (int64_t d = 0; d < x.dim(); ++d) {
    if (std::find(axes.begin(), axes.end(), d) != axes.end()) {
      KILN_CHECK(x.sizes()[d] == 1, "onnx", "Squeeze: dim {} of {} is not 1", d, to_string(x.sizes()));
      continue;
    }
    s.push_back(x.sizes()[d]);
  }
  return {reshape(x, Shape(s))};
}

// Pad, constant mode: pads [x1_begin, x2_begin, ..., x1_end, x2_end, ...]
// (input from opset 11, attribute before); negative pads crop.
Outs run_pad(const Ctx& c) {
  const Tensor& x = c.input(0);
  const int64_t r = x.dim();
  std::vector<int64_t> pads;
  double value = 0;
  if (c.opset >= 11) {
    pads = ints_of(c.input(1), "Pad's pads");
    if (c.has(2)) value = scalar_of(c.input(2), "Pad's constant_value");
  } else {
    pads = attr_ints(c.node, "pads").value_or(std::vector<int64_t>{});
    value = attr_f(c.node, "value", 0.0);
  }
  KILN_CHECK(int64_t(pads.size()) == 2 * r, "onnx", "Pad: {} pads for rank {}", pads.size(), r);
  std::vector<int64_t> p;
  for (int64_t d = r; d-- > 0;) {
    p.push_back(pads[size_t(d)]);
    p.push_back(pads[size_t(d + r)]);
  }
  return {pad(x, p, is_floating(x.dtype()) ? Scalar(value) : Scalar(int64_t(value)))};
}
std::string check_pad(const OnnxNode& n, int64_t) {
  const std::string mode = attr_s(n, "mode", "constant");
  if (mode != "constant") return "Pad in mode '" + mode + "' (kiln pads with a constant)";
  return {};
}

Outs run_expand(const Ctx& c) {
  const Tensor& x = c.input(0);
  Shape target = broadcast_shapes(x.sizes(), Shape(ints_of(c.input(1), "Expand's shape")));
  return {expand(x, target)};
}

Outs run_shape(const Ctx& c) {
  const Tensor& x = c.input(0);
  const int64_t r = x.dim();
  int64_t start = attr_i(c.node, "start", 0), end = attr_i(c.node, "end", r);
  if (start < 0) start += r;
  if (end < 0) end += r;
  start = std::clamp<int64_t>(start, 0, r);
  end = std::clamp<int64_t>(end, 0, r);
  std::vector<int64_t> s;
  for (int64_t i = start; i < end; ++i) s.push_back(x.sizes()[i]);
  return {i64_tensor(s)};
}

Outs run_constant(const Ctx& c) {
  const OnnxNode& n = c.node;
  if (const OnnxAttribute* a = n.attribute("value")) return {a->t.clone()};
  if (const OnnxAttribute* a = n.attribute("value_float")) return {scalar_tensor(float(a->f), {.dtype = kF32})};
  if (const OnnxAttribute* a = n.attribute("value_int")) return {scalar_tensor(a->i, {.dtype = kI64})};
  if (const OnnxAttribute* a = n.attribute("value_floats")) {
    std::vector<float> v(a->floats.begin(), a->floats.end());
    return {tensor(v, Shape{int64_t(v.size())})};
  }
  if (const OnnxAttribute* a = n.attribute("value_ints")) return {i64_tensor(a->ints)};
  KILN_FAIL("onnx", "Constant has no value");
}
std::string check_constant(const OnnxNode& n, int64_t) {
  for (const char* a : {"value", "value_float", "value_int", "value_floats", "value_ints"})
    if (n.attribute(a)) {
      if (std::string(a) == "value" && n.attribute(a)->type != OnnxAttrType::t) return "Constant whose value is not a tensor";
      return {};
    }
  return "Constant with a sparse or string value";
}

Outs run_constant_of_shape(const Ctx& c) {
  std::vector<int64_t> s = ints_of(c.input(0), "ConstantOfShape's shape");
  const OnnxAttribute* a = c.node.attribute("value");
  if (!a) return {zeros(Shape(s), {.dtype = kF32})};
  KILN_CHECK(a->t.numel() == 1, "onnx", "ConstantOfShape's value must hold one element");
  return {expand(reshape(a->t, Shape(std::vector<int64_t>(s.size(), 1))), Shape(s)).contiguous()};
}

Outs run_range(const Ctx& c) {
  const Tensor& st = c.input(0);
  const double start = scalar_of(st, "Range's start"), limit = scalar_of(c.input(1), "Range's limit"),
               delta = scalar_of(c.input(2), "Range's delta");
  KILN_CHECK(delta != 0, "onnx", "Range: delta 0");
  const int64_t n = std::max<int64_t>(int64_t(std::ceil((limit - start) / delta)), 0);
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = start + double(i) * delta;
  return {to(tensor(v, Shape{n}), st.dtype())};
}

Outs run_cast(const Ctx& c) {
  const DType d = io::onnx_dtype(int32_t(attr_i(c.node, "to", 1)), "Cast's 'to'");
  const Tensor& x = c.input(0);
  if (d == kBool && x.dtype() != kBool) return {ne(x, 0)};
  return {to(x, d)};
}
std::string check_cast(const OnnxNode& n, int64_t) {
  try {
    io::onnx_dtype(int32_t(attr_i(n, "to", 1)), "Cast");
  } catch (const Error&) {
    return "Cast to " + io::onnx_type_name(int32_t(attr_i(n, "to", 1)));
  }
  return {};
}

// Reductions: axes attribute (ReduceSum: input from opset 13), keepdims
// default 1, no axes = every dim.
Outs reduce(const Ctx& c, int64_t axes_input_from, const char* kind) {
  const Tensor& x = c.input(0);
  std::vector<int64_t> axes = axes_of(c, 1, axes_input_from);
  const bool keep = attr_i(c.node, "keepdims", 1);
  if (axes.empty()) {
    if (attr_i(c.node, "noop_with_empty_axes", 0)) return {x};
    for (int64_t d = 0; d < x.dim(); ++d) axes.push_back(d);
  }
  for (int64_t& a : axes) a = norm_axis(a, x.dim(), "axis");
  Shape dims(axes);
  std::string k = kind;
  if (k == "mean") return {mean(x, dims, keep)};
  if (k == "sum") return {sum(x, dims, keep)};
  if (k == "max") return {amax(x, dims, keep)};
  return {amin(x, dims, keep)};
}
Outs run_reduce_mean(const Ctx& c) { return reduce(c, 18, "mean"); }
Outs run_reduce_sum(const Ctx& c) { return reduce(c, 13, "sum"); }
Outs run_reduce_max(const Ctx& c) { return reduce(c, 18, "max"); }
Outs run_reduce_min(const Ctx& c) { return reduce(c, 18, "min"); }

const std::map<std::string, OpDef>& ops() {
  static const std::map<std::string, OpDef> table = {
      {"Abs", {run_abs}},
      {"Add", {run_add}},
      {"And", {run_and}},
      {"AveragePool", {run_avg_pool, check_avg_pool}},
      {"BatchNormalization", {run_batch_norm, check_batch_norm}},
      {"Cast", {run_cast, check_cast}},
      {"Ceil", {run_ceil}},
      {"Concat", {run_concat}},
      {"Constant", {run_constant, check_constant}},
      {"ConstantOfShape", {run_constant_of_shape}},
      {"Conv", {run_conv, check_conv}},
      {"Cos", {run_cos}},
      {"Div", {run_div}},
      {"Dropout", {run_dropout, check_dropout}},
      {"Equal", {run_equal}},
      {"Erf", {run_erf}},
      {"Exp", {run_exp}},
      {"Expand", {run_expand}},
      {"Flatten", {run_flatten}},
      {"Floor", {run_floor}},
      {"Gather", {run_gather}},
      {"Gemm", {run_gemm}},
      {"GlobalAveragePool", {run_global_avg_pool}},
      {"GlobalMaxPool", {run_global_max_pool}},
      {"Greater", {run_greater}},
      {"GreaterOrEqual", {run_greater_equal}},
      {"Identity", {run_identity}},
      {"LayerNormalization", {run_layer_norm}},
      {"LeakyRelu", {run_leaky_relu}},
      {"Less", {run_less}},
      {"LessOrEqual", {run_less_equal}},
      {"Log", {run_log}},
      {"LogSoftmax", {run_log_softmax}},
      {"MatMul", {run_matmul}},
      {"Max", {run_max}},
      {"MaxPool", {run_max_pool, check_max_pool}},
      {"Min", {run_min}},
      {"Mul", {run_mul}},
      {"Neg", {run_neg}},
      {"Not", {run_not}},
      {"Or", {run_or}},
      {"Pad", {run_pad, check_pad}},
      {"Pow", {run_pow}},
      {"Range", {run_range}},
      {"Reciprocal", {run_reciprocal}},
      {"ReduceMax", {run_reduce_max}},
      {"ReduceMean", {run_reduce_mean}},
      {"ReduceMin", {run_reduce_min}},
      {"ReduceSum", {run_reduce_sum}},
      {"Relu", {run_relu}},
      {"Reshape", {run_reshape}},
      {"Shape", {run_shape}},
      {"Sigmoid", {run_sigmoid}},
      {"Sin", {run_sin}},
      {"Slice", {run_slice}},
      {"Softmax", {run_softmax}},
      {"Split", {run_split}},
      {"Sqrt", {run_sqrt}},
      {"Squeeze", {run_squeeze}},
      {"Sub", {run_sub}},
      {"Tanh", {run_tanh}},
      {"Transpose", {run_transpose}},
      {"Unsqueeze", {run_unsqueeze}},
      {"Where", {run_where}},
      {"Xor", {run_xor}},
  };
  return table;
}

bool standard_domain(const std::string& d) { return d.empty() || d == "ai.onnx"; }

// "Loop (node 'loop0')", "NonZero (nodes 'a', 'b')": the unsupported ops of a graph.
void check_supported(const io::OnnxModelFile& f, int64_t opset) {
  std::map<std::string, std::vector<std::string>> bad;  // reason -> node names
  for (size_t i = 0; i < f.nodes.size(); ++i) {
    const OnnxNode& n = f.nodes[i];
    std::string reason;
    if (!standard_domain(n.domain)) {
      reason = n.domain + "." + n.op_type;
    } else {
      auto it = ops().find(n.op_type);
      if (it == ops().end()) {
        reason = n.op_type;
      } else if (it->second.check) {
        try {
          reason = it->second.check(n, opset);
        } catch (const Error& e) {
          reason = n.op_type + ": " + e.what();
        }
      }
    }
    if (!reason.empty()) bad[reason].push_back(n.name.empty() ? "#" + std::to_string(i) : "'" + n.name + "'");
  }
  for (const auto* list : {&f.inputs, &f.outputs})
    for (const io::OnnxValueInfo& v : *list)
      if (v.kind != "tensor" && !v.kind.empty())
        bad[fmt::format("graph {} '{}' of {} type (kiln runs tensors)", list == &f.inputs ? "input" : "output",
                        v.name, v.kind)];
  if (bad.empty()) return;
  std::string msg;
  for (const auto& [reason, names] : bad) {
    msg += msg.empty() ? "" : ", ";
    if (names.empty()) {
      msg += reason;
      continue;
    }
    std::string list;
    for (size_t i = 0; i < names.size() && i < 5; ++i) list += (i ? ", " : "") + names[i];
    if (names.size() > 5) list += fmt::format(", ... {} in all", names.size());
    msg += fmt::format("{} (node{} {})", reason, names.size() > 1 ? "s" : "", list);
  }
  bool values = false;  // a non-tensor graph input or output among the problems
  for (const auto& [reason, names] : bad) values = values || names.empty();
  throw Error("onnx", fmt::format("{}: {} unsupported operator{}{} (nothing was run): {}. kiln runs: {}", f.path,
                                  bad.size(), bad.size() > 1 ? "s" : "", values ? " or graph values" : "", msg,
                                  fmt::format("{}", fmt::join(onnx_supported_ops(), ", "))));
}

}  // namespace

std::vector<std::string> onnx_supported_ops() {
  std::vector<std::string> v;
  for (const auto& kv : ops()) v.push_back(kv.first);
  return v;
}

OnnxModel::OnnxModel(io::OnnxModelFile file) : file_(std::move(file)) {
  opset_ = file_.opset();
  KILN_CHECK(opset_ > 0, "onnx", "{}: the model imports no standard operator set (opset_import)", file_.path);
  check_supported(file_, opset_);

  // Initializers: a dotted name becomes a path of scopes ("fc1.weight" ->
  // scope fc1, parameter weight); names that cannot be paths get '_' for '.'.
  std::map<std::string, nn::Shared<OnnxScope>> scopes;
  std::set<std::string> leaves;  // full paths registered as tensors
  auto usable = [&](const std::string& name) {
    if (name.empty() || name.front() == '.' || name.back() == '.' || name.find("..") != std::string::npos) return false;
    if (leaves.count(name) || scopes.count(name)) return false;
    for (size_t p = name.find('.'); p != std::string::npos; p = name.find('.', p + 1))
      if (leaves.count(name.substr(0, p))) return false;
    return true;
  };
  for (auto& [name, value] : file_.initializers) {
    std::string key = usable(name) ? name : std::string();
    if (key.empty()) {
      std::string flat = name;
      std::replace(flat.begin(), flat.end(), '.', '_');
      if (flat.empty()) flat = "_";
      key = flat;
      for (int k = 1; leaves.count(key) || scopes.count(key); ++k) key = flat + "_" + std::to_string(k);
    }
    nn::Module* owner = this;
    std::string prefix;
    size_t start = 0;
    for (size_t p = key.find('.'); p != std::string::npos; p = key.find('.', start)) {
      std::string path = key.substr(0, p);
      auto it = scopes.find(path);
      if (it == scopes.end()) {
        auto child = owner->register_module(key.substr(start, p - start), OnnxScope{});
        it = scopes.emplace(path, child).first;
      }
      owner = it->second.get();
      start = p + 1;
    }
    const std::string leaf = key.substr(start);
    if (is_floating(value.dtype()))
      params_[name] = owner->register_parameter(leaf, value, value.dim() >= 2);
    else
      buffers_[name] = owner->register_buffer(leaf, value);
    leaves.insert(key);
    state_names_[name] = key;
  }
  file_.initializers.clear();

  // Which values each node is the last to read (graph outputs and weights stay).
  std::set<std::string> keep;
  for (const auto& o : file_.outputs) keep.insert(o.name);
  std::map<std::string, size_t> last;
  for (size_t i = 0; i < file_.nodes.size(); ++i)
    for (const std::string& in : file_.nodes[i].inputs)
      if (!in.empty()) last[in] = i;
  release_after_.assign(file_.nodes.size(), {});
  for (const auto& [name, i] : last)
    if (!keep.count(name) && !params_.count(name) && !buffers_.count(name)) release_after_[i].push_back(name);
}

const std::string& OnnxModel::state_name(const std::string& onnx_name) const {
  auto it = state_names_.find(onnx_name);
  KILN_CHECK(it != state_names_.end(), "onnx", "no initializer named '{}'", onnx_name);
  return it->second;
}

std::vector<Tensor> OnnxModel::forward(const std::vector<Tensor>& inputs) const {
  const auto& decl = file_.inputs;
  KILN_CHECK(inputs.size() == decl.size(), "onnx", "{}: the graph takes {} input{} ({}), got {}", file_.path,
             decl.size(), decl.size() == 1 ? "" : "s",
             fmt::format("{}", fmt::join([&] {
                           std::vector<std::string> v;
                           for (const auto& d : decl) v.push_back(d.name + ": " + d.describe());
                           return v;
                         }(), ", ")),
             inputs.size());
  std::unordered_map<std::string, Tensor> env;
  for (const auto& [name, p] : params_) env[name] = p.value();
  for (const auto& [name, t] : buffers_) env[name] = t;
  for (size_t i = 0; i < decl.size(); ++i) {
    const Tensor& x = inputs[i];
    const io::OnnxValueInfo& d = decl[i];
    KILN_CHECK(x.defined(), "onnx", "input '{}' is undefined", d.name);
    if (d.elem_type)
      KILN_CHECK(io::onnx_type_of(x.dtype()) == d.elem_type, "onnx", "input '{}' is {}, the graph declares {}", d.name,
                 name(x.dtype()), d.describe());
    if (d.has_shape) {
      bool ok = int64_t(d.shape.size()) == x.dim();
      for (size_t k = 0; ok && k < d.shape.size(); ++k) ok = d.shape[k].value < 0 || d.shape[k].value == x.sizes()[k];
      KILN_CHECK(ok, "onnx", "input '{}' has shape {}, the graph declares {}", d.name, to_string(x.sizes()),
                 d.describe());
    }
    env[d.name] = x;
  }
  for (size_t i = 0; i < file_.nodes.size(); ++i) {
    const OnnxNode& n = file_.nodes[i];
    std::vector<Tensor> args;
    args.reserve(n.inputs.size());
    for (const std::string& name : n.inputs) args.push_back(name.empty() ? Tensor() : env.at(name));
    Outs outs;
    try {
      outs = ops().at(n.op_type).run(Ctx{n, args, opset_});
    } catch (const Error& e) {
      throw Error("onnx", fmt::format("node {}: {}", n.describe(i), e.what()));
    }
    for (size_t k = 0; k < n.outputs.size(); ++k) {
      if (n.outputs[k].empty()) continue;
      KILN_CHECK(k < outs.size(), "onnx", "node {} gives {} outputs, the graph reads output {}", n.describe(i),
                 outs.size(), k);
      env[n.outputs[k]] = outs[k];
    }
    for (const std::string& name : release_after_[i]) env.erase(name);
  }
  std::vector<Tensor> result;
  for (const auto& o : file_.outputs) result.push_back(env.at(o.name));
  return result;
}

OnnxModel load_onnx(const std::string& path) { return OnnxModel(io::read_onnx(path)); }

}  // namespace kiln::models
