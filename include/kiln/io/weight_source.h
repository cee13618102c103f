// io::WeightSource: the tensors of a model file, opened without reading them.
// One memory-mapped file (safetensors or GGUF) or a sharded Hugging Face
// manifest (model.safetensors.index.json: {"weight_map": {name: shard file}});
// tensors load lazily by name. Formats and alignment: docs/model_files.md.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "kiln/core/tensor.h"

namespace kiln::io {

/// What a file says about one tensor, before it is read.
struct WeightInfo {
  std::string name;
  std::string dtype;  // the file's name for it: "F32", "BF16", "F16", "Q8_0", ...
  Shape shape;        // row-major, outermost first (GGUF's dims are reversed to this order)
  std::string file;   // the file (shard) holding it
  uint64_t nbytes = 0;  // its bytes in the file
};

class WeightSource {
 public:
  /// Opens `path`: a safetensors file, a GGUF file (by its magic), an ONNX
  /// model (its initializers, by the ModelProto's first byte), or a
  /// manifest (a JSON file with a "weight_map"; shard paths are relative to the
  /// manifest's folder). Every file's header is validated here, and for a
  /// manifest every name must be in the shard it names and each shard's
  /// tensors in the map; no tensor data is read.
  /// Throws kiln::Error("[WeightSource] <path>: ...").
  ///   auto src = io::WeightSource::open("model.safetensors.index.json");
  ///   Tensor w = src.load("transformer.h.0.attn.c_attn.weight");
  static WeightSource open(const std::string& path);

  /// "safetensors", "kiln-checkpoint" (a safetensors file of io::Checkpoint,
  /// its tensors under their objects' prefixes), "gguf", "safetensors-sharded"
  /// or "onnx" (a ModelProto's initializers; parsed whole, loads are copies).
  const std::string& format() const;
  /// Every tensor's name, sorted.
  std::vector<std::string> names() const;
  bool contains(const std::string& name) const;
  /// Throws naming the tensor when there is none of that name.
  const WeightInfo& info(const std::string& name) const;
  /// The file's metadata (safetensors "__metadata__", the manifest's "metadata"
  /// strings, or GGUF key/values rendered as text).
  const std::map<std::string, std::string>& metadata() const;

  /// The tensor `name`. Where its bytes in the mapping are aligned to its
  /// element size and need no conversion, the tensor aliases the mapping (no
  /// copy; it keeps the mapping alive and must only be read: the pages are
  /// read-only). Otherwise (F16 widened to f32, BOOL checked, unaligned) a copy.
  /// Quantized GGUF tensors (Q8_0, Q4_0) are refused here: read them with
  /// io::GgufFile. Throws naming the tensor.
  Tensor load(const std::string& name) const;
  /// True when load(name) would alias the mapping.
  bool aliases(const std::string& name) const;

  struct Impl;

 private:
  explicit WeightSource(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const Impl> impl_;
};

}  // namespace kiln::io
