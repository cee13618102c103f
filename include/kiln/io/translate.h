// Model translators (SPECS I4, spec 002 ModelTranslator): a declarative map
// from a foreign file's tensor names onto a built kiln model's state-dict
// names, with the transforms Identity, Transpose2D, Concat and Slice. Every
// name, shape and dtype is checked before anything is copied; the report
// lists what was loaded, the source tensors no rule used, and the model's
// tensors no rule produced. Shipped maps and examples: docs/model_files.md.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kiln/io/weight_source.h"
#include "kiln/nn/module.h"

namespace kiln::io {

enum class TransformKind {
  identity,     // target = source
  transpose2d,  // target = source^T (a 2-D source)
  concat,       // target = cat(sources, dim): e.g. q, k, v -> one in-projection
  slice,        // target = source[begin:end] along dim: the reverse of concat
};

/// One rule. Names are patterns: "{i}" (any "{name}") matches one dotted
/// component of the target name, and the same text is put in the sources':
///   {"transformer.h.{i}.norm1.weight", {"h.{i}.ln_1.weight"}}
struct TranslateRule {
  std::string target{};
  std::vector<std::string> sources{};
  TransformKind kind = TransformKind::identity;
  int64_t dim = 0;                 // concat and slice
  int64_t begin = 0, end = 0;      // slice: [begin, end) along dim
};

struct TranslateMap {
  std::string name{};
  std::vector<TranslateRule> rules{};  // the first rule whose target matches is used
  /// Source-name patterns that are expected and not loaded (e.g. nanoGPT's
  /// causal-mask buffers "transformer.h.{i}.attn.bias"): not reported as unmapped.
  std::vector<std::string> ignore{};
};

struct TranslateReport {
  std::string source_format;             // WeightSource::format()
  std::vector<std::string> loaded;       // target names, in the model's order
  std::vector<std::string> unmapped;     // source tensors no rule used (nor ignored)
  std::vector<std::string> missing;      // model tensors no rule produced
  /// One line per fact: "loaded 27 tensors from safetensors; unmapped: a, b; missing: -".
  std::string summary() const;
};

struct TranslateOptions {
  /// Refuse (before copying anything) when a source tensor is unmapped; a
  /// missing target is always an error unless allow_missing.
  bool allow_unmapped = false;
  bool allow_missing = false;
};

/// Loads `source` into `model` through `map`: plans every target (source
/// names exist, shapes after the transform equal the model's, dtypes are
/// floating and not quantized), and only when the whole plan holds reads the
/// tensors, transforms them, casts them to the model's dtypes and loads them
/// with load_state_dict. Throws kiln::Error("[translate] <map>: ...") listing
/// every problem; the model is unchanged on any error.
TranslateReport translate(const WeightSource& source, nn::Module& model, const TranslateMap& map,
                          const TranslateOptions& options = {});
/// The plan and its checks alone (what translate would load or throw).
TranslateReport check_translate(const WeightSource& source, const nn::Module& model, const TranslateMap& map,
                                const TranslateOptions& options = {});

/// Shipped maps onto kiln's GPT (models::GPT / CausalLM with its default
/// config; bias either way):
///   nanogpt_to_gpt(): karpathy/nanoGPT's state_dict (transformer.h.<i>.ln_1,
///     attn.c_attn, attn.c_proj, ln_2, mlp.c_fc, mlp.c_proj; lm_head tied)
///   gpt2_to_gpt(): the Hugging Face GPT-2 checkpoint (h.<i>.*, Conv1D weights
///     [in, out] transposed; lm_head from wte)
///   identity_map(): kiln's own names (a kiln safetensors file, a kiln-written GGUF)
TranslateMap nanogpt_to_gpt();
TranslateMap gpt2_to_gpt();
TranslateMap identity_map();
}  // namespace kiln::io
