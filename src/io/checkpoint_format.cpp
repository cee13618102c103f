// Checkpoint metadata <-> CheckpointMeta. Every value is checked on the way
// in: a checkpoint edited by hand or damaged on disk fails here with the key
// that is wrong, before any object is touched.
#include "src/io/checkpoint_format.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <optional>
#include <set>
#include <nlohmann/json.hpp>

#include "kiln/core/crc32c.h"
#include "kiln/core/error.h"
#include "kiln/io/json_util.h"

namespace kiln::io::detail {
namespace {

using Json = nlohmann::json;

constexpr const char* kVersion = "kiln.format_version";
constexpr const char* kConfig = "kiln.config";
constexpr const char* kProgress = "kiln.progress";
constexpr const char* kModels = "kiln.models";
constexpr const char* kOptimizers = "kiln.optimizers";
constexpr const char* kSchedulers = "kiln.schedulers";
constexpr const char* kRngs = "kiln.rngs";
constexpr const char* kGenerators = "kiln.generators";
constexpr const char* kStates = "kiln.states";
constexpr const char* kCrc = "kiln.crc32c";
constexpr const char* kHeaderCrc = "kiln.header_crc32c";

// NOTE [Header checksum]: "kiln.crc32c" covers each tensor's bytes, but not
// the JSON around them: one edited digit ("epoch":0 -> 1) was accepted and
// silently changed a resumed run (issue 23). Since version 2,
// "kiln.header_crc32c" is the CRC32C of everything else the header says, in a
// canonical form that does not depend on how the JSON was spaced or ordered:
//   for each metadata entry but this one, in key order:  key \0 value \0
//   then \1, then for each tensor, in name order:       name \0 dtype \0 d0,d1,.. \0
// (dtype as kiln names it: f32, i64, ...). Offsets are left out: the per-tensor
// checksums catch data moved between tensors. Version 1 files have no such
// entry and are read as before; a version 1 file that has one was edited.
uint32_t header_checksum(const std::map<std::string, std::string>& metadata, std::vector<TensorSignature> tensors) {
  std::string text;
  for (const auto& [k, v] : metadata) {
    if (k == kHeaderCrc) continue;
    text.append(k).push_back('\0');
    text.append(v).push_back('\0');
  }
  text.push_back('\1');
  std::sort(tensors.begin(), tensors.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  for (const TensorSignature& t : tensors) {
    text.append(t.name).push_back('\0');
    text.append(name(t.dtype)).push_back('\0');
    for (size_t i = 0; i < t.shape.size(); ++i) text.append(i ? "," : "").append(std::to_string(t.shape[i]));
    text.push_back('\0');
  }
  return crc32c(text.data(), text.size());
}

/// 8 hex digits as written by fmt "{:08x}", else none.
std::optional<uint32_t> parse_hex32(const std::string& s) {
  if (s.size() != 8) return std::nullopt;
  char* end = nullptr;
  unsigned long v = std::strtoul(s.c_str(), &end, 16);
  if (end != s.c_str() + 8 || !std::isxdigit(static_cast<unsigned char>(s[0]))) return std::nullopt;
  return uint32_t(v);
}

/// Errors name the file and the metadata key: "[op] path: metadata 'kiln.rngs': ...".
struct Reader {
  const char* op;
  const std::string& path;
  std::string key;

  template <class... Args>
  [[noreturn]] void fail(fmt::format_string<Args...> f, Args&&... args) const {
    throw Error(op, fmt::format("{}: metadata '{}': {}", path, key, fmt::format(f, std::forward<Args>(args)...)));
  }

  Json parse(const std::string& text) const {
    Json j = Json::parse(text, nullptr, false);
    if (j.is_discarded()) fail("not valid JSON");
    return j;
  }
  const Json& object(const Json& j, const std::string& what) const {
    if (!j.is_object()) fail("{} is {}, expected a JSON object", what, j.type_name());
    return j;
  }
  uint64_t u64(const Json& j, const std::string& what) const {
    if (!j.is_number_unsigned()) fail("{} is {}, expected a non-negative integer", what, brief(j));
    return j.get<uint64_t>();
  }
  int64_t i64(const Json& j, const std::string& what) const {
    uint64_t v = u64(j, what);
    if (v > uint64_t(INT64_MAX)) fail("{} is {}, too large", what, v);
    return int64_t(v);
  }
  double f64(const Json& j, const std::string& what) const {
    std::optional<double> v = double_from_json(j);
    if (!v) fail("{} is {}, expected a number (or \"inf\", \"-inf\", \"nan\")", what, brief(j));
    return *v;
  }
  const Json& field(const Json& j, const char* name, const std::string& what) const {
    auto it = j.find(name);
    if (it == j.end()) fail("{} has no \"{}\"", what, name);
    return *it;
  }
};

}  // namespace

std::map<std::string, std::string> to_metadata(const CheckpointMeta& meta,
                                               const std::vector<TensorSignature>& tensors) {
  std::map<std::string, std::string> out;
  out["format"] = "pt";  // what Hugging Face tools expect of a PyTorch-layout file
  out[kVersion] = std::to_string(kFormatVersion);
  if (!meta.config.empty()) out[kConfig] = meta.config;
  if (meta.has_progress)
    out[kProgress] = Json{{"epoch", meta.progress.epoch},
                          {"global_step", meta.progress.global_step},
                          {"step_in_epoch", meta.progress.step_in_epoch}}
                         .dump();
  out[kModels] = Json(meta.models).dump();
  out[kOptimizers] = Json(meta.optimizers).dump();
  Json schedulers = Json::object();
  for (const auto& [name, state] : meta.schedulers) {
    Json s = Json::object();
    for (const auto& [k, v] : state) s[k] = double_to_json(v);
    schedulers[name] = std::move(s);
  }
  out[kSchedulers] = schedulers.dump();
  Json rngs = Json::object();
  for (const auto& [name, streams] : meta.rngs) {
    Json r = Json::object();
    for (const auto& [stream, st] : streams) r[stream] = {{"seed", st.seed}, {"count", st.count}};
    rngs[name] = std::move(r);
  }
  out[kRngs] = rngs.dump();
  Json gens = Json::object();
  for (const auto& [name, st] : meta.generators) gens[name] = {{"seed", st.seed}, {"offset", st.offset}};
  out[kGenerators] = gens.dump();
  out[kStates] = Json(meta.states).dump();
  Json crc = Json::object();
  for (const auto& [name, c] : meta.crc32c) crc[name] = fmt::format("{:08x}", c);
  out[kCrc] = crc.dump();
  out[kHeaderCrc] = fmt::format("{:08x}", header_checksum(out, tensors));
  return out;
}

CheckpointMeta parse_metadata(const char* op, const std::string& path, const Header& header) {
  CheckpointMeta meta;
  const auto& md = header.metadata;
  auto version = md.find(kVersion);
  if (version == md.end()) {
    // Not written by kiln: any kiln key in it means a damaged kiln file, not a plain one.
    for (const auto& [k, v] : md)
      if (k.rfind("kiln.", 0) == 0)
        throw Error(op, fmt::format("{}: metadata has '{}' but no '{}': not a valid kiln checkpoint", path, k, kVersion));
    return meta;
  }
  Reader r{op, path, kVersion};
  // Every other key must be there: a kiln writer always writes all of them.
  auto text = [&](const char* key) -> const std::string& {
    r.key = key;
    auto it = md.find(key);
    if (it == md.end()) r.fail("missing");
    return it->second;
  };
  if (version->second == "1") {
    if (md.count(kHeaderCrc)) r.fail("version 1 has no '{}', yet the file has one: it was edited", kHeaderCrc);
    meta.format_version = 1;
  } else if (version->second == std::to_string(kFormatVersion)) {
    meta.format_version = kFormatVersion;
    text(kHeaderCrc);  // present: checked last, once every entry is known to be well formed
  } else {
    r.fail("'{}' is not a format this kiln reads (it reads versions 1 and {})", version->second, kFormatVersion);
  }

  if (md.count(kConfig)) {
    r.key = kConfig;
    r.parse(md.at(kConfig));
    meta.config = md.at(kConfig);
  }
  if (md.count(kProgress)) {
    Json j = r.parse(text(kProgress));
    r.object(j, "progress");
    meta.has_progress = true;
    meta.progress.epoch = r.i64(r.field(j, "epoch", "progress"), "epoch");
    meta.progress.global_step = r.i64(r.field(j, "global_step", "progress"), "global_step");
    meta.progress.step_in_epoch = r.i64(r.field(j, "step_in_epoch", "progress"), "step_in_epoch");
    if (j.size() != 3) r.fail("progress has keys other than epoch, global_step, step_in_epoch: {}", brief(j));
  }
  {
    Json j = r.parse(text(kModels));
    if (!j.is_array()) r.fail("expected a JSON array of prefixes, got {}", j.type_name());
    for (const Json& p : j) {
      if (!p.is_string()) r.fail("prefix {} is not a string", brief(p));
      meta.models.push_back(p.get<std::string>());
    }
  }
  {
    Json j = r.object(r.parse(text(kOptimizers)), "the value");
    for (const auto& [prefix, name] : j.items()) {
      if (!name.is_string()) r.fail("optimizer '{}' is {}, expected its name as a string", prefix, brief(name));
      meta.optimizers[prefix] = name.get<std::string>();
    }
  }
  {
    Json j = r.object(r.parse(text(kSchedulers)), "the value");
    for (const auto& [name, s] : j.items()) {
      r.object(s, "scheduler '" + name + "'");
      for (const auto& [k, v] : s.items()) meta.schedulers[name][k] = r.f64(v, "scheduler '" + name + "' '" + k + "'");
    }
  }
  {
    Json j = r.object(r.parse(text(kRngs)), "the value");
    for (const auto& [name, streams] : j.items()) {
      r.object(streams, "rngs '" + name + "'");
      auto& out = meta.rngs[name];
      for (const auto& [stream, st] : streams.items()) {
        std::string what = "rngs '" + name + "' stream '" + stream + "'";
        r.object(st, what);
        out[stream] = {r.u64(r.field(st, "seed", what), what + " seed"), r.u64(r.field(st, "count", what), what + " count")};
      }
    }
  }
  {
    Json j = r.object(r.parse(text(kGenerators)), "the value");
    for (const auto& [name, st] : j.items()) {
      std::string what = "generator '" + name + "'";
      r.object(st, what);
      meta.generators[name] = {r.u64(r.field(st, "seed", what), what + " seed"),
                               r.u64(r.field(st, "offset", what), what + " offset")};
    }
  }
  {
    Json j = r.object(r.parse(text(kStates)), "the value");
    for (const auto& [name, st] : j.items()) {
      r.object(st, "state '" + name + "'");
      for (const auto& [k, v] : st.items()) {
        if (!v.is_string()) r.fail("state '{}' key '{}' is {}, expected a string", name, k, brief(v));
        meta.states[name][k] = v.get<std::string>();
      }
    }
  }
  {
    Json j = r.object(r.parse(text(kCrc)), "the value");
    for (const auto& [name, c] : j.items()) {
      std::optional<uint32_t> v = c.is_string() ? parse_hex32(c.get<std::string>()) : std::nullopt;
      if (!v) r.fail("tensor '{}': checksum {} is not 8 hex digits", name, brief(c));
      meta.crc32c[name] = *v;
    }
    std::set<std::string> names;
    for (const Entry& e : header.entries) {
      if (!meta.crc32c.count(e.name)) r.fail("tensor '{}' has no checksum", e.name);
      names.insert(e.name);
    }
    for (const auto& [name, c] : meta.crc32c)
      if (!names.count(name)) r.fail("checksum for tensor '{}', which the file does not have", name);
  }
  if (meta.format_version >= 2) {
    r.key = kHeaderCrc;
    std::optional<uint32_t> expected = parse_hex32(md.at(kHeaderCrc));
    if (!expected) r.fail("{} is not 8 hex digits", brief(Json(md.at(kHeaderCrc))));
    std::vector<TensorSignature> tensors;
    for (const Entry& e : header.entries) tensors.push_back({e.name, e.dtype->dtype, e.shape});
    const uint32_t actual = header_checksum(md, std::move(tensors));
    if (actual != *expected)
      throw Error(op, fmt::format("{}: header checksum mismatch (CRC32C {:08x}, the header says {:08x}): its "
                                  "metadata or tensor list was edited or damaged",
                                  path, actual, *expected));
  }
  return meta;
}

void verify_checksums(const char* op, const std::string& path, const FileBytes& file, const Header& header,
                      const CheckpointMeta& meta) {
  if (meta.format_version == 0) return;
  for (const Entry& e : header.entries) {
    uint32_t expected = meta.crc32c.at(e.name);
    uint32_t actual = crc32c(entry_bytes(file, header, e), size_t(e.end - e.begin));
    if (actual != expected)
      throw Error(op, fmt::format("{}: tensor '{}': checksum mismatch (CRC32C {:08x}, the header says {:08x}): the "
                                  "file is damaged",
                                  path, e.name, actual, expected));
  }
}

CheckpointInfo checkpoint_info(const char* op, const std::string& path, const FileBytes& file) {
  Header h = read_header(op, path, file);
  CheckpointMeta meta = parse_metadata(op, path, h);
  verify_checksums(op, path, file, h, meta);
  CheckpointInfo info;
  info.format_version = meta.format_version;
  info.config = meta.config;
  info.progress = meta.progress;
  info.models = meta.models;
  for (const auto& [prefix, name] : meta.optimizers) info.optimizers.push_back(prefix);
  info.metadata = h.metadata;
  for (const Entry& e : h.entries) info.tensors.push_back({e.name, e.dtype->name, e.shape});
  return info;
}

}  // namespace kiln::io::detail

namespace kiln::io {
CheckpointInfo read_checkpoint_info(const std::string& path) {
  constexpr const char* op = "read_checkpoint_info";
  return detail::checkpoint_info(op, path, detail::FileBytes::open(op, path));
}
}  // namespace kiln::io
