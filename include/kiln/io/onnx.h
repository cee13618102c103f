// ONNX model files (onnx.ModelProto, protobuf) read into plain kiln data: the
// graph's nodes with their attributes, initializers as Tensors, the graph's
// inputs and outputs with their shapes, the operator-set versions. Parsed with
// Debian's ONNX library (libonnx-dev's generated protobuf classes); nothing of
// protobuf reaches this header. Running a graph is models::OnnxModel
// (kiln/models/onnx_model.h). Formats and supported operators:
// docs/model_files.md, "ONNX".
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "kiln/core/tensor.h"

namespace kiln::io {

/// False when kiln was built without libonnx-dev (read_onnx then throws).
bool onnx_supported();

/// ONNX's TensorProto.DataType numbers for the types kiln reads; the others
/// (FLOAT16, INT8, STRING, ...) are refused by name.
///   FLOAT 1 -> f32, UINT8 2 -> u8, INT32 6 -> i32, INT64 7 -> i64, BOOL 9 -> bool,
///   DOUBLE 11 -> f64, BFLOAT16 16 -> bf16
/// "FLOAT", "INT64", ... for a DataType number ("type 42" when unknown).
std::string onnx_type_name(int32_t elem_type);
/// The kiln dtype of an ONNX DataType; throws "[onnx] <what>: type FLOAT16 is
/// not supported (kiln reads ...)" for the others.
DType onnx_dtype(int32_t elem_type, const std::string& what);
/// The ONNX DataType number of a kiln dtype.
int32_t onnx_type_of(DType dtype);

enum class OnnxAttrType { f, i, s, t, g, floats, ints, strings, other };

/// One node attribute. Only the member of its type is set; graph-valued
/// attributes (If, Loop) keep only their type (no kiln operator uses them).
struct OnnxAttribute {
  std::string name;
  OnnxAttrType type = OnnxAttrType::other;
  double f = 0;
  int64_t i = 0;
  std::string s;
  Tensor t;
  std::vector<double> floats;
  std::vector<int64_t> ints;
  std::vector<std::string> strings;
};

struct OnnxNode {
  std::string name;     // may be empty in hand-made files
  std::string op_type;  // "Gemm"
  std::string domain;   // "" (= "ai.onnx") for the standard operators
  std::vector<std::string> inputs;   // "" marks an omitted optional input
  std::vector<std::string> outputs;
  std::vector<OnnxAttribute> attributes;

  /// The attribute `name`, or null.
  const OnnxAttribute* attribute(const std::string& name) const;
  /// "Gemm 'fc1/Gemm'" (or "Gemm #3" for a node without a name), for messages.
  std::string describe(size_t index) const;
};

/// One dimension of a declared shape: a number, a symbol ("batch") or unknown.
struct OnnxDim {
  int64_t value = -1;  // -1 when symbolic or unknown
  std::string param;   // the symbol, when symbolic
};

/// A graph input or output as declared.
struct OnnxValueInfo {
  std::string name;
  std::string kind = "tensor";  // "tensor", or "sequence", "map", "optional", "sparse_tensor", "" (undeclared)
  int32_t elem_type = 0;  // ONNX DataType; 0 when not declared (or not a tensor)
  bool has_shape = false;
  std::vector<OnnxDim> shape;
  /// "FLOAT [batch, 3, 32, 32]".
  std::string describe() const;
};

/// A parsed ModelProto.
struct OnnxModelFile {
  std::string path;
  int64_t ir_version = 0;
  std::string producer_name, producer_version;
  std::string graph_name;
  /// Operator-set versions by domain ("" for the standard ai.onnx set).
  std::map<std::string, int64_t> opsets;
  /// In the file's (topological) order.
  std::vector<OnnxNode> nodes;
  /// Initializers in the file's order, with their ONNX names.
  std::vector<std::pair<std::string, Tensor>> initializers;
  /// The graph's inputs that are not initializers (older exporters list the
  /// initializers among the inputs too), and its outputs.
  std::vector<OnnxValueInfo> inputs, outputs;

  /// The standard operator set's version (opset_import of domain "" or
  /// "ai.onnx"); 0 when the file imports none.
  int64_t opset() const;
  /// How often each op_type occurs, by name.
  std::map<std::string, int64_t> op_histogram() const;
};

/// Reads and validates an ONNX model. Errors are kiln::Error("[onnx] <path>: ...")
/// naming what is wrong: not a ModelProto (truncated or malformed protobuf), no
/// graph, a tensor of an unsupported type, one stored as external data, data of
/// the wrong length, a negative or overflowing dimension, duplicate initializer
/// names, a node output produced twice. Nothing is run; operators are checked
/// by models::load_onnx.
///   io::OnnxModelFile f = io::read_onnx("mlp.onnx");
OnnxModelFile read_onnx(const std::string& path);
/// The same from the bytes of a file (`path` names it in messages).
OnnxModelFile parse_onnx(const std::string& bytes, const std::string& path);

/// One serialized TensorProto (the backend tests' input_0.pb files): its name
/// (may be empty) and value.
std::pair<std::string, Tensor> read_onnx_tensor(const std::string& path);

}  // namespace kiln::io
