// io::WeightSource: lazily loaded tensors of a mapped file or a sharded
// manifest (include/kiln/io/weight_source.h, docs/model_files.md).
#include "kiln/io/weight_source.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <functional>
#include <set>
#include <nlohmann/json.hpp>
#include <utility>

#include "kiln/core/error.h"
#include "kiln/io/json_util.h"
#include "kiln/io/onnx.h"
#include "kiln/io/read_file.h"
#include "src/io/gguf_internal.h"
#include "src/io/safetensors_internal.h"

namespace kiln::io {

struct WeightSource::Impl {
  struct Item {
    WeightInfo info;
    bool aliases = false;
    std::function<Tensor()> load;
  };
  std::string path;
  std::string format;
  std::map<std::string, Item> items;
  std::map<std::string, std::string> metadata;
};

namespace {
using detail::brief;
constexpr const char* kOp = "WeightSource";
namespace fs = std::filesystem;

template <class... Args>
[[noreturn]] void fail(const std::string& path, fmt::format_string<Args...> f, Args&&... args) {
  throw Error(kOp, path + ": " + fmt::format(f, std::forward<Args>(args)...));
}

/// Reads the first bytes of `path` (at most n) to tell formats apart.
std::string head(const std::string& path, size_t n) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return {};
  std::string out(n, '\0');
  size_t got = std::fread(out.data(), 1, n, f);
  std::fclose(f);
  out.resize(got);
  return out;
}

/// Adds every tensor of the safetensors file `path` to `impl`; with `only`,
/// just the names it maps to this file (a shard), each of which must exist.
void add_safetensors(WeightSource::Impl& impl, const std::string& path,
                     const std::vector<std::string>* only = nullptr) {
  auto bytes = std::make_shared<const detail::FileBytes>(detail::FileBytes::map_lazily(kOp, path));
  auto header = std::make_shared<const detail::Header>(detail::read_header(kOp, path, *bytes));
  std::map<std::string, const detail::Entry*> by_name;
  for (const detail::Entry& e : header->entries) by_name.emplace(e.name, &e);
  if (only) {
    for (const std::string& name : *only)
      if (!by_name.count(name))
        fail(path, "tensor '{}': the manifest maps it to this shard, which does not hold it", name);
    std::set<std::string> mapped(only->begin(), only->end());
    for (const auto& [name, e] : by_name)
      if (!mapped.count(name))
        fail(path, "tensor '{}': in this shard but not in the manifest's weight_map (or mapped to another shard)",
             name);
  } else {
    for (const auto& [k, v] : header->metadata) impl.metadata[k] = v;
  }
  for (const auto& [name, e] : by_name) {
    WeightSource::Impl::Item item;
    item.info = {name, e->dtype->name, e->shape, path, e->end - e->begin};
    const uint8_t* src = detail::entry_bytes(*bytes, *header, *e);
    std::string_view dt = e->dtype->name;
    item.aliases = dt != "F16" && dt != "BOOL" && e->end > e->begin &&
                   reinterpret_cast<uintptr_t>(src) % uintptr_t(e->dtype->file_itemsize) == 0;
    const detail::Entry* entry = e;
    item.load = [bytes, header, entry, path] { return detail::alias_tensor(kOp, path, bytes, *header, *entry); };
    if (!impl.items.emplace(name, std::move(item)).second) fail(path, "tensor '{}' appears twice", name);
  }
}

void add_gguf(WeightSource::Impl& impl, const std::string& path) {
  auto file = std::make_shared<const detail::GgufData>(detail::open_gguf(kOp, path));
  for (const auto& [k, v] : file->meta.metadata) impl.metadata[k] = v.to_string();
  for (size_t i = 0; i < file->meta.tensors.size(); ++i) {
    const GgufTensorInfo& t = file->meta.tensors[i];
    WeightSource::Impl::Item item;
    item.info = {t.name, gguf_type_name(t.type), t.shape, path, t.nbytes};
    item.aliases = detail::gguf_aliases(*file, i);
    item.load = [file, i] { return detail::gguf_load_dense(kOp, file, i); };
    impl.items.emplace(t.name, std::move(item));  // names are unique: the reader checks
  }
}

/// The file dtype names of safetensors ("F32", ...), for an ONNX initializer.
const char* file_dtype(DType d) {
  switch (d) {
    case DType::f32: return "F32";
    case DType::f64: return "F64";
    case DType::bf16: return "BF16";
    case DType::i64: return "I64";
    case DType::i32: return "I32";
    case DType::u8: return "U8";
    case DType::boolean: return "BOOL";
  }
  return "?";
}

/// An ONNX model's initializers. protobuf offers no mapping: the file is parsed
/// whole here (io::read_onnx validates it) and each load returns a copy.
void add_onnx(WeightSource::Impl& impl, const std::string& path) {
  auto file = std::make_shared<const OnnxModelFile>(read_onnx(path));
  impl.metadata["onnx.ir_version"] = std::to_string(file->ir_version);
  impl.metadata["onnx.opset"] = std::to_string(file->opset());
  impl.metadata["onnx.producer"] = file->producer_name + " " + file->producer_version;
  impl.metadata["onnx.graph"] = file->graph_name;
  for (size_t i = 0; i < file->initializers.size(); ++i) {
    const auto& [name, t] = file->initializers[i];
    WeightSource::Impl::Item item;
    item.info = {name, file_dtype(t.dtype()), t.sizes(), path, uint64_t(t.nbytes())};
    item.load = [file, i] { return file->initializers[i].second.clone(); };
    impl.items.emplace(name, std::move(item));  // names are unique: the reader checks
  }
}

/// A shard's path from the manifest: relative, inside the manifest's folder.
std::string shard_path(const std::string& manifest, const std::string& shard) {
  fs::path p(shard);
  if (shard.empty() || p.is_absolute()) fail(manifest, "shard '{}' must be a relative file name", shard);
  for (const auto& part : p)
    if (part == "..") fail(manifest, "shard '{}' may not leave the manifest's folder ('..')", shard);
  return (fs::path(manifest).parent_path() / p).string();
}

void add_manifest(WeightSource::Impl& impl, const std::string& path) {
  std::string text = read_file(kOp, path, kMaxJsonBytes, "manifest");
  nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) fail(path, "not a JSON object (expected a safetensors index manifest)");
  auto wm = j.find("weight_map");
  if (wm == j.end() || !wm->is_object() || wm->empty())
    fail(path, "missing \"weight_map\" object of tensor name -> shard file");
  std::map<std::string, std::vector<std::string>> by_shard;
  for (const auto& [name, shard] : wm->items()) {
    if (!shard.is_string()) fail(path, "weight_map '{}' is {}, not a shard file name", name, brief(shard));
    by_shard[shard.get<std::string>()].push_back(name);
  }
  // Every shard's header is checked before the source is returned.
  for (const auto& [shard, names] : by_shard) add_safetensors(impl, shard_path(path, shard), &names);
  if (auto md = j.find("metadata"); md != j.end() && md->is_object())
    for (const auto& [k, v] : md->items()) impl.metadata[k] = v.is_string() ? v.get<std::string>() : v.dump();
}

}  // namespace

WeightSource WeightSource::open(const std::string& path) {
  auto impl = std::make_shared<Impl>();
  impl->path = path;
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) fail(path, "no such file (or not a regular file)");
  std::string magic = head(path, 9);
  // safetensors: a u64 header length that fits the file, then the header's '{'.
  // (A length's low byte may itself be '{', so that comes first.)
  uint64_t n = 0;
  for (size_t i = std::min<size_t>(magic.size(), 8); i-- > 0;) n = (n << 8) | uint8_t(magic[i]);
  bool safetensors = magic.size() == 9 && magic[8] == '{' && n <= fs::file_size(path, ec);
  if (magic.size() >= 4 && magic.compare(0, 4, "GGUF") == 0) {
    impl->format = "gguf";
    add_gguf(*impl, path);
  } else if (!safetensors && !magic.empty() && (magic[0] == '{' || magic[0] == ' ' || magic[0] == '\n')) {
    impl->format = "safetensors-sharded";
    add_manifest(*impl, path);
  } else if (!safetensors && !magic.empty() && magic[0] == '\x08') {
    // An ONNX ModelProto starts with field 1 (ir_version) as a varint: byte 0x08.
    impl->format = "onnx";
    add_onnx(*impl, path);
  } else {
    add_safetensors(*impl, path);
    // A kiln checkpoint is a safetensors file whose metadata carries kiln's format
    // version; its model tensors are under their prefixes ("model." ...).
    impl->format = impl->metadata.count("kiln.format_version") ? "kiln-checkpoint" : "safetensors";
  }
  return WeightSource(std::move(impl));
}

const std::string& WeightSource::format() const { return impl_->format; }

std::vector<std::string> WeightSource::names() const {
  std::vector<std::string> out;
  out.reserve(impl_->items.size());
  for (const auto& [name, item] : impl_->items) out.push_back(name);
  return out;
}

bool WeightSource::contains(const std::string& name) const { return impl_->items.count(name) > 0; }

const WeightInfo& WeightSource::info(const std::string& name) const {
  auto it = impl_->items.find(name);
  if (it == impl_->items.end()) fail(impl_->path, "no tensor named '{}' ({} tensors)", name, impl_->items.size());
  return it->second.info;
}

const std::map<std::string, std::string>& WeightSource::metadata() const { return impl_->metadata; }

Tensor WeightSource::load(const std::string& name) const {
  info(name);
  return impl_->items.at(name).load();
}

bool WeightSource::aliases(const std::string& name) const {
  info(name);
  return impl_->items.at(name).aliases;
}

}  // namespace kiln::io
