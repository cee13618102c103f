// Q8_0 / Q4_0 quantized weights (SPECS I5) for inference: ggml's 32-value
// block formats in kiln's layout (packed codes + a separate f32 scale plane),
// QuantizedLinear, and quantize(module). Formats, error and speed:
// docs/model_files.md.
#pragma once

#include <cstdint>
#include <map>
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

/// A module outside nn whose forward can multiply by a quantized copy of one
/// weight matrix [out, in] (models::TiedLinear, the GPT's lm_head):
/// quantize(module, ...) and attach_quantized reach it like a Linear.
class QuantizableWeight {
 public:
  virtual ~QuantizableWeight() = default;
  /// The weight's name in the module's state dict ("weight") and the weight.
  virtual std::string quantizable_name() const { return "weight"; }
  virtual const Parameter& quantizable_weight() const = 0;
  /// Where the quantized copy goes (null: none; forward uses the f32 weight).
  virtual std::shared_ptr<const QuantizedTensor>& quantized_weight() = 0;
};

struct QuantizeOptions {
  /// Inference only: free every f32 weight that got a quantized copy and that
  /// no other layer reads (a tied embedding table stays). Each becomes a
  /// [rows, cols] view of a single zero (stride 0, 4 bytes), so the model's
  /// memory is the codes' and its state dict has zeros there; a forward with
  /// grad mode on through such a layer is an Error. Not undone by
  /// `quantized = nullptr`.
  bool release_float_weights = false;
};

/// Quantizes every weight matrix in `module` (itself included) whose rows are
/// whole blocks (in_features a multiple of 32): each Linear's weight,
/// MultiheadAttention's packed in_proj_weight [3D, D], and every
/// QuantizableWeight (a GPT's lm_head, tied or not). Each keeps its f32
/// parameters (the state dict, and training, are unchanged; see
/// release_float_weights) and computes its forward from the quantized copy
/// while grad mode is off (`linear.quantized = nullptr`,
/// `mha.in_proj_quantized = nullptr` undo it). Returns the number of matrices
/// quantized. Call it again after changing the weights.
int64_t quantize(Module& module, QuantType type, const QuantizeOptions& options = {});

/// The matrices quantize() would reach, by state-dict name: sets each one
/// whose name is in `weights` (e.g. read from a GGUF file) to multiply by that
/// quantized matrix (shape checked against the f32 weight first; all or
/// nothing). Returns the number attached.
int64_t attach_quantized(Module& module,
                         const std::map<std::string, std::shared_ptr<const QuantizedTensor>>& weights,
                         const QuantizeOptions& options = {});

/// Whether `weight` was freed by release_float_weights (a stride-0 view).
bool is_released(const Tensor& weight);

}  // namespace kiln::nn
