// Q8_0 / Q4_0 quantized weights for inference (include/kiln/nn/quantized.h).
#include "kiln/nn/quantized.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cstring>

#include "kiln/core/error.h"
#include "kiln/core/grad_mode.h"
#include "kiln/core/parallel.h"
#include "src/backend/cpu/quant/quant.h"

namespace kiln::nn {
namespace cpu = backend::cpu;
static_assert(kQuantBlock == cpu::kQuantBlock);

const char* quant_type_name(QuantType type) { return type == QuantType::q8_0 ? "q8_0" : "q4_0"; }

QuantType parse_quant_type(const std::string& name) {
  std::string n = name;
  std::transform(n.begin(), n.end(), n.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  if (n == "q8_0" || n == "q8") return QuantType::q8_0;
  if (n == "q4_0" || n == "q4") return QuantType::q4_0;
  throw Error("quantize", fmt::format("unknown quantization '{}' (kiln has q8_0 and q4_0)", name));
}

int64_t QuantizedTensor::nbytes() const {
  return (codes.defined() ? codes.nbytes() : 0) + (scales.defined() ? scales.nbytes() : 0);
}

void check_quantized(const char* op, const std::string& what, const QuantizedTensor& q) {
  auto bad = [&](const std::string& m) { throw Error(op, what + ": " + m); };
  if (q.shape.size() != 2 || q.shape[0] < 0 || q.shape[1] < 0 || q.shape[1] % kQuantBlock != 0)
    bad(fmt::format("a quantized matrix is [rows, cols] with cols a multiple of {}, got {}", kQuantBlock,
                    to_string(q.shape)));
  int64_t rows = q.shape[0], cols = q.shape[1];
  Shape codes{rows, q.type == QuantType::q8_0 ? cols : cols / 2}, scales{rows, cols / kQuantBlock};
  if (!q.codes.defined() || q.codes.dtype() != kU8 || q.codes.shape() != codes || !q.codes.is_contiguous() ||
      q.codes.device() != kCPU)
    bad(fmt::format("{} codes must be contiguous u8 {} on the CPU, got {}", quant_type_name(q.type), to_string(codes),
                    q.codes.defined() ? fmt::format("{} {}", kiln::name(q.codes.dtype()), to_string(q.codes.shape()))
                                      : std::string("undefined")));
  if (!q.scales.defined() || q.scales.dtype() != kF32 || q.scales.shape() != scales || !q.scales.is_contiguous() ||
      q.scales.device() != kCPU)
    bad(fmt::format("scales must be contiguous f32 {} on the CPU, got {}", to_string(scales),
                    q.scales.defined()
                        ? fmt::format("{} {}", kiln::name(q.scales.dtype()), to_string(q.scales.shape()))
                        : std::string("undefined")));
}

QuantizedTensor quantize(const Tensor& w, QuantType type) {
  KILN_CHECK(w.defined() && w.dim() == 2 && w.size(1) % kQuantBlock == 0, "quantize",
             "weight must be a matrix [rows, cols] with cols a multiple of {}, got {}", kQuantBlock,
             w.defined() ? to_string(w.shape()) : std::string("undefined"));
  KILN_CHECK(w.dtype() == kF32 || w.dtype() == kBF16 || w.dtype() == kF64, "quantize",
             "weight must be floating (f32, bf16 or f64), got {}", kiln::name(w.dtype()));
  KILN_CHECK(w.device() == kCPU, "quantize", "weight must be on the CPU, got {}", w.device().str());
  Tensor x = w.detach().to(kF32).contiguous();
  int64_t rows = w.size(0), cols = w.size(1);
  QuantizedTensor q;
  q.type = type;
  q.shape = {rows, cols};
  q.codes = Tensor::empty({rows, type == QuantType::q8_0 ? cols : cols / 2}, kU8);
  q.scales = Tensor::empty({rows, cols / kQuantBlock}, kF32);
  const float* src = x.data<float>();
  auto* codes = static_cast<uint8_t*>(q.codes.data_ptr());
  float* scales = q.scales.data<float>();
  parallel_for(0, rows, 16, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      if (type == QuantType::q8_0)
        cpu::quantize_row_q8_0(src + r * cols, cols, reinterpret_cast<int8_t*>(codes + r * cols),
                               scales + r * (cols / kQuantBlock));
      else
        cpu::quantize_row_q4_0(src + r * cols, cols, codes + r * (cols / 2), scales + r * (cols / kQuantBlock));
    }
  });
  return q;
}

Tensor dequantize(const QuantizedTensor& q) {
  check_quantized("dequantize", "weight", q);
  int64_t rows = q.rows(), cols = q.cols();
  Tensor out = Tensor::empty({rows, cols}, kF32);
  const auto* codes = static_cast<const uint8_t*>(q.codes.data_ptr());
  const float* scales = q.scales.data<float>();
  for (int64_t r = 0; r < rows; ++r) {
    if (q.type == QuantType::q8_0)
      cpu::dequantize_row_q8_0(reinterpret_cast<const int8_t*>(codes + r * cols), scales + r * (cols / kQuantBlock),
                               cols, out.data<float>() + r * cols);
    else
      cpu::dequantize_row_q4_0(codes + r * (cols / 2), scales + r * (cols / kQuantBlock), cols,
                               out.data<float>() + r * cols);
  }
  return out;
}

Tensor quantized_linear(const Tensor& x, const QuantizedTensor& w, const Tensor& bias) {
  constexpr const char* op = "quantized_linear";
  check_quantized(op, "weight", w);
  KILN_CHECK(x.defined() && x.dim() >= 1 && x.size(-1) == w.cols(), op,
             "input {} must end in in_features {} (weight {} {})", x.defined() ? to_string(x.shape()) : "undefined",
             w.cols(), quant_type_name(w.type), to_string(w.shape));
  KILN_CHECK(x.device() == kCPU, op, "input must be on the CPU, got {}", x.device().str());
  KILN_CHECK(is_floating(x.dtype()), op, "input must be floating, got {}", kiln::name(x.dtype()));
  KILN_CHECK(!bias.defined() || (bias.dim() == 1 && bias.size(0) == w.rows()), op,
             "bias {} must be [{}]", bias.defined() ? to_string(bias.shape()) : "", w.rows());
  Tensor xc = x.detach().to(kF32).contiguous();
  int64_t batch = xc.numel() / w.cols();
  Shape out_shape = x.shape();
  out_shape[out_shape.size() - 1] = w.rows();
  Tensor y = Tensor::empty(out_shape, kF32);
  const auto* codes = static_cast<const uint8_t*>(w.codes.data_ptr());
  if (w.type == QuantType::q8_0)
    cpu::q8_0_matmul(reinterpret_cast<const int8_t*>(codes), w.scales.data<float>(), w.rows(), w.cols(),
                     xc.data<float>(), batch, y.data<float>());
  else
    cpu::q4_0_matmul(codes, w.scales.data<float>(), w.rows(), w.cols(), xc.data<float>(), batch, y.data<float>());
  if (bias.defined()) {
    Tensor b = bias.detach().to(kF32).contiguous();
    float* yp = y.data<float>();
    const float* bp = b.data<float>();
    for (int64_t i = 0; i < batch; ++i)
      for (int64_t r = 0; r < w.rows(); ++r) yp[i * w.rows() + r] += bp[r];
  }
  return y;
}

QuantizedLinear::QuantizedLinear(QuantizedTensor w, Tensor b)
    : weight(std::move(w)), bias(std::move(b)), in_features(0), out_features(0) {
  check_quantized("QuantizedLinear", "weight", weight);
  in_features = weight.cols();
  out_features = weight.rows();
  KILN_CHECK(!bias.defined() || (bias.dim() == 1 && bias.size(0) == out_features), "QuantizedLinear",
             "bias {} must be [{}]", bias.defined() ? to_string(bias.shape()) : "", out_features);
  // Buffers, so the state dict and load_state_dict see them (no gradients: inference only).
  weight.codes = register_buffer("weight_codes", weight.codes);
  weight.scales = register_buffer("weight_scales", weight.scales);
  if (bias.defined()) bias = register_buffer("bias", bias.detach().to(kF32).contiguous());
}

QuantizedLinear QuantizedLinear::from_linear(const Linear& linear, QuantType type) {
  return QuantizedLinear(quantize(linear.weight.value(), type),
                         linear.bias.defined() ? linear.bias.value().detach().to(kF32).contiguous() : Tensor());
}

Tensor QuantizedLinear::forward(const Tensor& x) const { return quantized_linear(x, weight, bias); }

std::string QuantizedLinear::extra_repr() const {
  return fmt::format("in_features={}, out_features={}, bias={}, type={}", in_features, out_features, bias.defined(),
                     quant_type_name(weight.type));
}

int64_t quantize(Module& module, QuantType type) {
  int64_t n = 0;
  for (auto& [name, m] : module.named_modules()) {
    auto* linear = dynamic_cast<Linear*>(m);
    if (!linear || linear->in_features % kQuantBlock != 0) continue;
    linear->quantized = std::make_shared<const QuantizedTensor>(quantize(linear->weight.value(), type));
    ++n;
  }
  return n;
}

}  // namespace kiln::nn
