// The reading half of src/io/gguf.cpp, shared with io::WeightSource and the
// fuzz target (not installed, not in kiln.h).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "kiln/io/gguf.h"
#include "src/io/safetensors_internal.h"

namespace kiln::io::detail {

/// A validated header: after parse_gguf returns, every tensor's type is one
/// kiln reads, its dims multiply without overflow, and its bytes lie inside
/// the data section without overlapping another's.
struct GgufMeta {
  uint32_t version = 3;
  uint64_t alignment = 32;
  GgufMetadata metadata;
  std::vector<GgufTensorInfo> tensors;  // in file order
  uint64_t data_start = 0;              // file offset of the data section
};

GgufMeta parse_gguf(const char* op, const std::string& path, const FileBytes& file);

struct GgufData {
  std::string path;
  FileBytes bytes;
  GgufMeta meta;
  std::map<std::string, size_t> index;  // name -> position in meta.tensors
};

/// Maps the file (lazily: no page is read until a tensor is) and parses it.
GgufData open_gguf(const char* op, const std::string& path);
/// The same over bytes in memory (fuzzing, tests).
GgufData gguf_from_memory(const char* op, const void* data, size_t size);

/// Whether tensor i would load without a copy.
bool gguf_aliases(const GgufData& d, size_t i);
/// Tensor i, dense (F32, BF16 aliased when aligned; F16 widened); throws for quantized types.
Tensor gguf_load_dense(const char* op, const std::shared_ptr<const GgufData>& d, size_t i);
/// Tensor i, Q8_0 / Q4_0, in kiln's layout; throws for other types.
nn::QuantizedTensor gguf_load_quantized(const char* op, const GgufData& d, size_t i);

}  // namespace kiln::io::detail
