// Q8_0 / Q4_0 quantized weights (SPECS I5) for inference: ggml's 32-value
// block formats in kiln's layout (packed codes + a separate f32 scale plane),
// QuantizedLinear, and quantize(module). Formats, error and speed:
// docs/model_files.md.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "kiln/nn/linear.h"
#include "kiln/nn/module.h"

namespace kiln::nn {

enum class QuantType { q8_0, q4_0 };

/// "q8_0" / "q4_0".
const char* quant_type_name(QuantType type);
/// Parses "q8_0" / "q4_0" (also "Q8_0", "q8", "q4"); throws naming the choices.
QuantType parse_quant_type(const std::string& name);

/// Values per block: each block of 32 consecutive values along the last dim
/// shares one scale.
inline constexpr int64_t kQuantBlock = 32;

/// A quantized matrix [rows, cols] (cols a multiple of 32), kiln's layout:
///   codes   kU8; q8_0: [rows, cols], each an int8 two's-complement byte,
///           value = code * scale; q4_0: [rows, cols / 2], byte j of block b
///           holds value 32b + j in its low nibble and 32b + 16 + j in its high
///           nibble (ggml's order), value = (nibble - 8) * scale
///   scales  kF32 [rows, cols / 32]; each exactly representable in f16 (GGUF
///           stores it as one, so conversions to and from GGUF are lossless)
struct QuantizedTensor {
  QuantType type = QuantType::q8_0;
  Shape shape;  // [rows, cols]
  Tensor codes;
  Tensor scales;

  int64_t rows() const { return shape[0]; }
  int64_t cols() const { return shape[1]; }
  /// Bytes of codes and scales together.
  int64_t nbytes() const;
};

/// `w` (f32/bf16/f64, [rows, cols], cols % 32 == 0) quantized with ggml's
/// reference rounding: q8_0 scale = max|x| / 127, code = round(x / scale);
/// q4_0 scale = (the value of largest magnitude) / -8, code = min(15,
/// trunc(x / scale + 8.5)). Codes equal ggml's byte for byte.
QuantizedTensor quantize(const Tensor& w, QuantType type);
/// The f32 values the codes stand for, [rows, cols].
Tensor dequantize(const QuantizedTensor& q);
/// Checks the planes' dtypes and shapes against `type` and `shape`; throws
/// "[op] <what>: ..." otherwise.
void check_quantized(const char* op, const std::string& what, const QuantizedTensor& q);

/// y = x W^T (+ bias) with W quantized: x [..., cols] f32 -> [..., rows] f32.
/// Inference only (no gradient). Uses the AVX-512 or AVX2 kernel.
Tensor quantized_linear(const Tensor& x, const QuantizedTensor& w, const Tensor& bias = {});

/// A Linear layer whose weight is quantized: inference only. Its state dict
/// holds "weight_codes" (u8), "weight_scales" (f32) and "bias" as buffers.
class QuantizedLinear : public Module {
 public:
  QuantizedLinear(QuantizedTensor weight, Tensor bias = {});
  /// From a trained Linear (its weight quantized, its bias copied).
  static QuantizedLinear from_linear(const Linear& linear, QuantType type);

  Tensor forward(const Tensor& x) const;
  std::string extra_repr() const override;
  std::string type_name() const override { return "QuantizedLinear"; }

  QuantizedTensor weight;
  Tensor bias;
  int64_t in_features;
  int64_t out_features;
};

/// Quantizes every Linear in `module` (itself included) whose in_features is a
/// multiple of 32: each keeps its f32 parameters (the state dict, and training,
/// are unchanged) and computes its forward from the quantized copy while grad
/// mode is off (`linear.quantized = nullptr` undoes it). Returns the number
/// of layers quantized. Call it again after changing the weights.
int64_t quantize(Module& module, QuantType type);

}  // namespace kiln::nn
