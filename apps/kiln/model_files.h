// `kiln inspect FILE` and `kiln convert IN OUT [--quantize q8_0|q4_0]`, and
// loading a GGUF file that `kiln convert` made from a `kiln train lm`
// checkpoint for `kiln generate` (docs/model_files.md).
//
//   kiln inspect model.gguf              format, metadata, every tensor's dtype, shape, bytes
//   kiln convert runs/lm model.gguf --quantize q8_0
//   kiln generate --checkpoint model.gguf --prompt "ROMEO:"
#pragma once

#include <iosfwd>
#include <string>

#include "apps/kiln/lm.h"

namespace kiln::app {

struct InspectOptions {
  std::string path;
  int64_t max_items = 8;        // array metadata shows this many items
  std::ostream* out = nullptr;  // nullptr: std::cout
};

/// Prints what the file holds: its format (safetensors, sharded safetensors,
/// GGUF, a kiln checkpoint's config), the metadata, and one line per tensor
/// (name, file dtype, shape, bytes). Any supported format; others are an error
/// naming the formats.
void inspect_file(const InspectOptions& options);

struct ConvertOptions {
  std::string input;   // a `kiln train lm` checkpoint or run folder, a safetensors file or manifest, a GGUF file
  std::string output;  // .gguf or .safetensors
  std::string quantize = "";  // "", "q8_0" or "q4_0" (needs a .gguf output)
  std::ostream* out = nullptr;
};

/// Converts between kiln's model files. From a `kiln train lm` checkpoint the
/// output is a GGUF file carrying the model config and tokenizer (metadata
/// "kiln.model_config", "kiln.tokenizer") that `kiln generate` runs; every
/// matrix of the blocks (and an untied head) is quantized with --quantize,
/// the embeddings and norms stay f32. From other files the tensors are copied
/// (GGUF quantized ones stay quantized into GGUF, dequantized into
/// safetensors), quantizing 2-D ".weight" tensors with --quantize.
void convert_file(const ConvertOptions& options);

/// Whether `path` starts with GGUF's magic.
bool is_gguf_file(const std::string& path);

/// A language model from a GGUF file of convert_file: the config and the
/// tokenizer from its metadata; quantized matrices are loaded as they are
/// (their Linear layers multiply by the file's codes; the f32 parameters hold
/// the dequantized values). kiln::Error "[load_lm] <path>: ...".
LanguageModel load_lm_gguf(const std::string& path);

}  // namespace kiln::app
