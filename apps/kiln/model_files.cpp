// `kiln inspect`, `kiln convert` and GGUF language models (apps/kiln/model_files.h).
#include "apps/kiln/model_files.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <nlohmann/json.hpp>

#include "kiln/core/error.h"
#include "kiln/data/tokenizer.h"
#include "kiln/io/checkpoint.h"
#include "kiln/io/gguf.h"
#include "kiln/io/onnx.h"
#include "kiln/io/safetensors.h"
#include "kiln/io/weight_source.h"
#include "kiln/models/onnx_model.h"
#include "kiln/nn/quantized.h"

namespace kiln::app {
namespace {

std::string head_bytes(const std::string& path, size_t n) {
  std::ifstream f(path, std::ios::binary);
  std::string s(n, '\0');
  f.read(s.data(), std::streamsize(n));
  s.resize(size_t(f.gcount()));
  return s;
}

std::string human_bytes(uint64_t n) {
  if (n < 10 * 1024) return fmt::format("{} B", n);
  if (n < 10 * 1024 * 1024) return fmt::format("{:.1f} KiB", double(n) / 1024);
  if (n < uint64_t(10) * 1024 * 1024 * 1024) return fmt::format("{:.1f} MiB", double(n) / (1024 * 1024));
  return fmt::format("{:.2f} GiB", double(n) / (1024.0 * 1024 * 1024));
}

/// A kiln checkpoint's config (empty when the file is not one).
std::string checkpoint_config(const std::string& path) {
  try {
    return io::read_checkpoint_info(path).config;
  } catch (const Error&) {
    return {};
  }
}

/// Whether `name` is a matrix of a GPT block that convert quantizes.
bool is_block_matrix(const std::string& name) {
  for (const char* end : {"self_attn.in_proj_weight", "out_proj.weight", "linear1.weight", "linear2.weight"})
    if (name.size() >= std::string_view(end).size() && name.ends_with(end)) return true;
  return false;
}

bool ends_with(const std::string& s, const std::string& e) { return s.size() >= e.size() && s.ends_with(e); }

}  // namespace

bool is_gguf_file(const std::string& path) { return head_bytes(path, 4) == "GGUF"; }

namespace {
// An ONNX model: header, graph inputs and outputs, operator histogram (and
// which operators kiln does not run), initializers.
void inspect_onnx(const InspectOptions& o, std::ostream& out) {
  io::OnnxModelFile f = io::read_onnx(o.path);
  std::string opsets;
  for (const auto& [domain, version] : f.opsets)
    opsets += fmt::format("{}{} {}", opsets.empty() ? "" : ", ", domain.empty() ? "ai.onnx" : domain, version);
  out << fmt::format("{}: ONNX, ir_version {}, opset {}, producer {} {}, graph '{}', {} nodes, {} initializers\n",
                     o.path, f.ir_version, opsets, f.producer_name, f.producer_version, f.graph_name, f.nodes.size(),
                     f.initializers.size());
  for (const auto& v : f.inputs) out << fmt::format("  input {} {}\n", v.name, v.describe());
  for (const auto& v : f.outputs) out << fmt::format("  output {} {}\n", v.name, v.describe());
  std::vector<std::string> known = models::onnx_supported_ops();
  std::vector<std::string> missing;
  for (const auto& [op, n] : f.op_histogram()) {
    bool runs = std::find(known.begin(), known.end(), op) != known.end();
    if (!runs) missing.push_back(op);
    out << fmt::format("  op {} x{}{}\n", op, n, runs ? "" : " (not supported by kiln)");
  }
  out << (missing.empty() ? std::string("  kiln runs every operator of this graph\n")
                          : fmt::format("  kiln does not run: {}\n", fmt::join(missing, ", ")));
  uint64_t total = 0;
  for (const auto& [name, t] : f.initializers) {
    out << fmt::format("  tensor {} {} {} {}\n", name, io::onnx_type_name(io::onnx_type_of(t.dtype())),
                       to_string(t.sizes()), human_bytes(uint64_t(t.nbytes())));
    total += uint64_t(t.nbytes());
  }
  out << fmt::format("  total {}\n", human_bytes(total));
}
}  // namespace

void inspect_file(const InspectOptions& o) {
  std::ostream& out = o.out ? *o.out : std::cout;
  std::string magic = head_bytes(o.path, 8);
  KILN_CHECK(!magic.empty(), "kiln inspect", "{}: cannot read it (missing or empty)", o.path);
  if (magic.compare(0, 4, "GGUF") == 0) {
    io::GgufFile g = io::GgufFile::open(o.path);
    out << fmt::format("{}: GGUF version {}, alignment {}, {} metadata keys, {} tensors\n", o.path, g.version(),
                       g.alignment(), g.metadata().size(), g.tensors().size());
    for (const auto& [k, v] : g.metadata()) {
      std::string type = v.type == io::GgufValueType::array
                             ? fmt::format("ARRAY[{}]", io::gguf_value_type_name(v.elem_type))
                             : io::gguf_value_type_name(v.type);
      out << fmt::format("  {} ({}) = {}\n", k, type, v.to_string(size_t(o.max_items)));
    }
    uint64_t total = 0;
    for (const auto& t : g.tensors()) {
      out << fmt::format("  tensor {} {} {} {}\n", t.name, io::gguf_type_name(t.type), to_string(t.shape),
                         human_bytes(t.nbytes));
      total += t.nbytes;
    }
    out << fmt::format("  total {}\n", human_bytes(total));
    return;
  }
  // An ONNX ModelProto starts with field 1 (ir_version): byte 0x08.
  if (magic[0] == '\x08') return inspect_onnx(o, out);
  io::WeightSource src = io::WeightSource::open(o.path);
  std::string config = src.format() == "kiln-checkpoint" ? checkpoint_config(o.path) : std::string();
  out << fmt::format("{}: {}, {} tensors\n", o.path, src.format(), src.names().size());
  if (!config.empty()) out << "  config = " << config << "\n";
  for (const auto& [k, v] : src.metadata())
    if (config.empty() || k.rfind("kiln.", 0) != 0) out << fmt::format("  {} = {}\n", k, v.size() > 200 ? v.substr(0, 200) + "..." : v);
  uint64_t total = 0;
  for (const std::string& name : src.names()) {
    const io::WeightInfo& i = src.info(name);
    out << fmt::format("  tensor {} {} {} {}\n", name, i.dtype, to_string(i.shape), human_bytes(i.nbytes));
    total += i.nbytes;
  }
  out << fmt::format("  total {}\n", human_bytes(total));
}

void convert_file(const ConvertOptions& o) {
  constexpr const char* op = "kiln convert";
  std::ostream& out = o.out ? *o.out : std::cout;
  std::optional<nn::QuantType> q;
  if (!o.quantize.empty()) q = nn::parse_quant_type(o.quantize);
  bool to_gguf = ends_with(o.output, ".gguf"), to_st = ends_with(o.output, ".safetensors");
  KILN_CHECK(to_gguf || to_st, op, "OUT {} must end in .gguf or .safetensors", o.output);
  KILN_CHECK(!q || to_gguf, op, "--quantize {} needs a .gguf output (safetensors has no quantized types)", o.quantize);
  KILN_CHECK(std::filesystem::absolute(o.input) != std::filesystem::absolute(o.output), op,
             "IN and OUT are the same file");

  // A `kiln train lm` checkpoint (or its run folder): a runnable GGUF model.
  bool folder = std::filesystem::is_directory(o.input);
  bool lm_checkpoint = folder;
  if (!folder && !is_gguf_file(o.input)) {
    auto config = nlohmann::json::parse(checkpoint_config(o.input), nullptr, /*allow_exceptions=*/false);
    lm_checkpoint = config.is_object() && config.value("job", "") == "lm";
  }
  if (lm_checkpoint) {
    KILN_CHECK(to_gguf, op, "a `kiln train lm` checkpoint converts to a .gguf model file, not {}", o.output);
    LanguageModel lm = load_lm(o.input);
    io::GgufMetadata md{{"general.architecture", io::GgufValue::string("kiln-gpt")},
                        {"general.name", io::GgufValue::string("kiln train lm")},
                        {"kiln.model_config", io::GgufValue::string(lm.config.to_json())},
                        {"kiln.tokenizer", io::GgufValue::string(lm.tokenizer->to_json())},
                        {"kiln.iters", io::GgufValue::uint(io::GgufValueType::u64, uint64_t(lm.iters))},
                        {"kiln.quantization", io::GgufValue::string(q ? nn::quant_type_name(*q) : "f32")}};
    std::vector<io::GgufWriteTensor> ts;
    int64_t nq = 0;
    for (const auto& [name, t] : lm.model->state_dict()) {
      bool untied_head = name == "lm_head.weight" && !lm.config.tie_weights;
      if (q && (is_block_matrix(name) || untied_head) && t.dim() == 2 && t.size(1) % nn::kQuantBlock == 0) {
        ts.push_back({.name = name, .quantized = nn::quantize(t, *q)});
        ++nq;
      } else {
        ts.push_back({.name = name, .dense = t.to(kF32)});
      }
    }
    io::save_gguf(o.output, md, ts);
    out << fmt::format("{}: {} tensors ({} quantized {}) -> {}\n", o.input, ts.size(), nq,
                       q ? nn::quant_type_name(*q) : "-", o.output);
    return;
  }

  // Any other file: tensors by name.
  std::vector<io::GgufWriteTensor> ts;
  nn::StateDict sd;
  io::GgufMetadata md;
  int64_t nq = 0;
  auto add = [&](const std::string& name, const Tensor& t) {
    bool matrix = t.dim() == 2 && t.size(1) % nn::kQuantBlock == 0 && ends_with(name, "weight") &&
                  name.find("wte") == std::string::npos && name.find("wpe") == std::string::npos &&
                  name.find("embed") == std::string::npos && is_floating(t.dtype());
    if (to_gguf && q && matrix) {
      ts.push_back({.name = name, .quantized = nn::quantize(t, *q)});
      ++nq;
    } else if (to_gguf) {
      ts.push_back({.name = name, .dense = is_floating(t.dtype()) && t.dtype() != kBF16 ? t.to(kF32) : t});
    } else {
      sd.insert(name, t);
    }
  };
  if (is_gguf_file(o.input)) {
    io::GgufFile g = io::GgufFile::open(o.input);
    md = g.metadata();
    for (const auto& t : g.tensors()) {
      bool quantized = t.type == uint32_t(io::GgmlType::q8_0) || t.type == uint32_t(io::GgmlType::q4_0);
      if (quantized && to_gguf && !q) {
        ts.push_back({.name = t.name, .quantized = g.load_quantized(t.name), .shape = t.shape});
        continue;
      }
      add(t.name, quantized ? g.load_f32(t.name) : g.load(t.name));
    }
  } else {
    io::WeightSource src = io::WeightSource::open(o.input);
    for (const auto& [k, v] : src.metadata()) md.emplace_back(k, io::GgufValue::string(v));
    for (const std::string& name : src.names()) add(name, src.load(name));
  }
  if (to_gguf) {
    io::save_gguf(o.output, md, ts);
  } else {
    std::map<std::string, std::string> meta;
    for (const auto& [k, v] : md) meta[k] = v.type == io::GgufValueType::string ? v.as_string() : v.to_string(1u << 20);
    io::save_safetensors(o.output, sd, meta);
  }
  out << fmt::format("{}: {} tensors ({} quantized) -> {}\n", o.input, to_gguf ? ts.size() : sd.size(), nq,
                     o.output);
}

LanguageModel load_lm_gguf(const std::string& path) {
  constexpr const char* op = "load_lm";
  io::GgufFile g = io::GgufFile::open(path);
  const io::GgufValue* config = g.find("kiln.model_config");
  const io::GgufValue* tok = g.find("kiln.tokenizer");
  KILN_CHECK(config && tok && config->type == io::GgufValueType::string && tok->type == io::GgufValueType::string, op,
             "{}: not a language model of `kiln convert` (no kiln.model_config and kiln.tokenizer strings)", path);
  LanguageModel lm;
  try {
    lm.config = models::GPTConfig::from_json(config->as_string());
  } catch (const Error& e) {
    KILN_FAIL(op, "{}: its model config: {}", path, e.what());
  }
  check_lm_size(op, path + ": its model config", lm.config);
  try {
    lm.tokenizer = data::tokenizer_from_json(tok->as_string());
  } catch (const Error& e) {
    KILN_FAIL(op, "{}: its tokenizer: {}", path, e.what());
  }
  KILN_CHECK(lm.tokenizer->vocab_size() == lm.config.vocab_size, op,
             "{}: the tokenizer has {} tokens but the model's vocab_size is {}", path, lm.tokenizer->vocab_size(),
             lm.config.vocab_size);
  if (const io::GgufValue* it = g.find("kiln.iters"); it && it->type == io::GgufValueType::u64)
    lm.iters = int64_t(it->as_uint());
  Rngs rngs(0);
  lm.model = std::make_shared<models::GPT>(lm.config, rngs);
  // Plan: every tensor present with the model's shape, before anything is copied.
  nn::StateDict want = lm.model->state_dict();
  nn::StateDict load;
  std::map<std::string, std::shared_ptr<const nn::QuantizedTensor>> quantized;
  std::vector<std::string> quantized_names;
  std::optional<nn::QuantType> qtype;
  for (const auto& [name, t] : want) {
    const io::GgufTensorInfo& info = g.tensor(name);  // throws naming a missing one
    KILN_CHECK(info.shape == t.shape(), op, "{}: tensor '{}' is {} in the file, {} in the model", path, name,
               to_string(info.shape), to_string(t.shape()));
    if (info.type == uint32_t(io::GgmlType::q8_0) || info.type == uint32_t(io::GgmlType::q4_0)) {
      // Kept as codes only: no f32 copy is made (the model's f32 weight is released below).
      auto qt = std::make_shared<const nn::QuantizedTensor>(g.load_quantized(name));
      quantized[name] = qt;
      quantized_names.push_back(name);
      qtype = qt->type;
    } else {
      load.insert(name, g.load(name).to(t.dtype()));
    }
  }
  KILN_CHECK(g.tensors().size() == want.size(), op, "{}: {} tensors in the file, {} in the model", path,
             g.tensors().size(), want.size());
  lm.model->load_state_dict(load, {.optional_keys = quantized_names});
  // The layers whose weights the file quantized multiply by its codes, and
  // their f32 weights (random until now) are freed: the model's memory is the
  // codes', plus the f32 embeddings and norms.
  nn::attach_quantized(*lm.model, quantized, {.release_float_weights = true});
  // A tied head's table is the embedding's (f32 in the file); the head itself
  // multiplies by a copy quantized like the blocks.
  if (qtype && !lm.model->lm_head->quantized) nn::quantize(*lm.model->lm_head, *qtype);
  lm.model->eval();
  return lm;
}

}  // namespace kiln::app
