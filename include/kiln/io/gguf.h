// GGUF (version 3, llama.cpp's model file): reader and writer. Metadata of
// every GGUF value type (nested arrays and strings included), tensor infos,
// general.alignment; tensors of types F32, F16, BF16, Q8_0 and Q4_0 (ggml's
// 32-value blocks), other types refused by name. Layout and validation:
// docs/model_files.md.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "kiln/core/tensor.h"
#include "kiln/nn/quantized.h"

namespace kiln::io {

/// GGUF metadata value types, with the file's numbers.
enum class GgufValueType : uint32_t {
  u8 = 0, i8 = 1, u16 = 2, i16 = 3, u32 = 4, i32 = 5, f32 = 6, boolean = 7,
  string = 8, array = 9, u64 = 10, i64 = 11, f64 = 12,
};
/// "UINT8", ..., "FLOAT64" (gguf's names).
const char* gguf_value_type_name(GgufValueType type);

/// One metadata value. Unsigned types hold uint64_t, signed int64_t, floats
/// double, BOOL bool, STRING std::string, ARRAY a vector of values that all
/// have type `elem_type` (arrays nest).
struct GgufValue {
  GgufValueType type = GgufValueType::u32;
  GgufValueType elem_type = GgufValueType::u8;  // arrays only
  std::variant<uint64_t, int64_t, double, bool, std::string, std::vector<GgufValue>> value = uint64_t(0);

  static GgufValue uint(GgufValueType type, uint64_t v) { return {type, GgufValueType::u8, v}; }
  static GgufValue sint(GgufValueType type, int64_t v) { return {type, GgufValueType::u8, v}; }
  static GgufValue real(GgufValueType type, double v) { return {type, GgufValueType::u8, v}; }
  static GgufValue boolean(bool v) { return {GgufValueType::boolean, GgufValueType::u8, v}; }
  static GgufValue string(std::string v) { return {GgufValueType::string, GgufValueType::u8, std::move(v)}; }
  static GgufValue array(GgufValueType elem_type, std::vector<GgufValue> items) {
    return {GgufValueType::array, elem_type, std::move(items)};
  }

  /// The value as the C++ type it holds; throws "[GgufValue] ..." for another.
  uint64_t as_uint() const;
  int64_t as_int() const;
  double as_double() const;
  bool as_bool() const;
  const std::string& as_string() const;
  const std::vector<GgufValue>& as_array() const;

  /// JSON-like text; arrays longer than max_items show their first max_items
  /// and the count.
  std::string to_string(size_t max_items = 8) const;
  bool operator==(const GgufValue&) const = default;
};

using GgufMetadata = std::vector<std::pair<std::string, GgufValue>>;

/// ggml's tensor type numbers that kiln reads and writes.
enum class GgmlType : uint32_t { f32 = 0, f16 = 1, q4_0 = 2, q8_0 = 8, bf16 = 30 };
/// "F32", "Q4_K", "IQ2_XXS", ... for any ggml type number; "type N" for unknown ones.
std::string gguf_type_name(uint32_t type);

struct GgufTensorInfo {
  std::string name;
  Shape shape;        // row-major, outermost first: GGUF's ne[] reversed
  uint32_t type = 0;  // a GgmlType
  uint64_t offset = 0;  // in the data section
  uint64_t nbytes = 0;
};

namespace detail {
struct GgufData;
}

class GgufFile {
 public:
  /// Maps `path` and validates the whole header (magic, version 2 or 3,
  /// metadata, alignment, every tensor's type, dims and byte range) before
  /// returning. Throws kiln::Error("[load_gguf] <path>: ...").
  static GgufFile open(const std::string& path);

  uint32_t version() const;
  uint64_t alignment() const;
  const GgufMetadata& metadata() const;
  /// The value of `key`, or nullptr.
  const GgufValue* find(const std::string& key) const;
  const std::vector<GgufTensorInfo>& tensors() const;
  /// Throws naming the tensor when absent.
  const GgufTensorInfo& tensor(const std::string& name) const;

  /// A dense tensor (F32, BF16; F16 widened to f32): aliases the mapping when
  /// aligned (read-only), else a copy. Q8_0/Q4_0 are refused: load_quantized.
  Tensor load(const std::string& name) const;
  /// A Q8_0 / Q4_0 tensor in kiln's layout, [rows, cols] with the outer dims
  /// folded into rows; scales are the file's halves as f32.
  nn::QuantizedTensor load_quantized(const std::string& name) const;
  /// Any tensor as f32 values (quantized ones dequantized), in its shape.
  Tensor load_f32(const std::string& name) const;

 private:
  explicit GgufFile(std::shared_ptr<const detail::GgufData> d) : d_(std::move(d)) {}
  std::shared_ptr<const detail::GgufData> d_;
};

/// One tensor to write: dense (f32, bf16 written as is, f64 as F32; with
/// as_f16, f32 written as F16), or quantized (Q8_0 / Q4_0; shape [rows, cols]
/// unless `shape` gives the original dims, whose product matches).
struct GgufWriteTensor {
  std::string name{};
  Tensor dense{};
  std::optional<nn::QuantizedTensor> quantized{};
  bool as_f16 = false;
  Shape shape{};  // optional, for quantized tensors of rank other than 2
};

/// Writes a GGUF v3 file atomically (as save_safetensors). The data section is
/// aligned to "general.alignment" when `metadata` has it (a power-of-two
/// UINT32), else 32. Every name and value is checked before the file is
/// created. Throws kiln::Error("[save_gguf] <path>: ...").
void save_gguf(const std::string& path, const GgufMetadata& metadata, const std::vector<GgufWriteTensor>& tensors);

}  // namespace kiln::io
