// ONNX ModelProto reader (include/kiln/io/onnx.h, docs/model_files.md "ONNX").
//
// The protobuf is parsed by libonnx's generated classes (onnx/onnx_pb.h, Debian's
// libonnx-dev); this file turns the message into kiln's plain structs and
// checks what the protobuf parser cannot: tensor payload lengths against their
// dims, supported element types, no external data, a graph whose every node
// input is defined before use (a file cut at a field boundary still parses,
// but loses nodes or initializers that later nodes name).
#include "kiln/io/onnx.h"

#include <cstring>
#include <set>

#include "kiln/core/error.h"
#include "kiln/core/size_check.h"
#include "kiln/io/read_file.h"

#ifdef KILN_HAVE_ONNX
#include <onnx/onnx_pb.h>
#endif

namespace kiln::io {
namespace {

constexpr int64_t kMaxOnnxBytes = (int64_t(1) << 31) - 1;  // protobuf's limit for one message
constexpr const char* kSupportedTypes = "FLOAT, DOUBLE, BFLOAT16, INT64, INT32, UINT8, BOOL";

template <class... Args>
[[noreturn]] void fail(const std::string& path, fmt::format_string<Args...> f, Args&&... args) {
  throw Error("onnx", path + ": " + fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace

std::string onnx_type_name(int32_t t) {
  static const char* names[] = {"UNDEFINED", "FLOAT",  "UINT8",  "INT8",      "UINT16",     "INT16",
                                "INT32",     "INT64",  "STRING", "BOOL",      "FLOAT16",    "DOUBLE",
                                "UINT32",    "UINT64", "COMPLEX64", "COMPLEX128", "BFLOAT16"};
  if (t >= 0 && t < int32_t(std::size(names))) return names[t];
  return fmt::format("type {}", t);
}

DType onnx_dtype(int32_t t, const std::string& what) {
  switch (t) {
    case 1: return kF32;
    case 2: return kU8;
    case 6: return kI32;
    case 7: return kI64;
    case 9: return kBool;
    case 11: return kF64;
    case 16: return kBF16;
    default: break;
  }
  throw Error("onnx", fmt::format("{}: type {} is not supported (kiln reads {})", what, onnx_type_name(t),
                                  kSupportedTypes));
}

int32_t onnx_type_of(DType d) {
  switch (d) {
    case DType::f32: return 1;
    case DType::u8: return 2;
    case DType::i32: return 6;
    case DType::i64: return 7;
    case DType::boolean: return 9;
    case DType::f64: return 11;
    case DType::bf16: return 16;
  }
  return 0;
}

const OnnxAttribute* OnnxNode::attribute(const std::string& n) const {
  for (const OnnxAttribute& a : attributes)
    if (a.name == n) return &a;
  return nullptr;
}

std::string OnnxNode::describe(size_t index) const {
  if (name.empty()) return fmt::format("{} #{}", op_type, index);
  return fmt::format("{} '{}'", op_type, name);
}

std::string OnnxValueInfo::describe() const {
  std::string s = elem_type ? onnx_type_name(elem_type) : std::string("?");
  if (!has_shape) return s + " [?]";
  s += " [";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    if (shape[i].value >= 0)
      s += std::to_string(shape[i].value);
    else
      s += shape[i].param.empty() ? std::string("?") : shape[i].param;
  }
  return s + "]";
}

int64_t OnnxModelFile::opset() const {
  for (const char* d : {"", "ai.onnx"}) {
    auto it = opsets.find(d);
    if (it != opsets.end()) return it->second;
  }
  return 0;
}

std::map<std::string, int64_t> OnnxModelFile::op_histogram() const {
  std::map<std::string, int64_t> h;
  for (const OnnxNode& n : nodes) ++h[n.domain.empty() || n.domain == "ai.onnx" ? n.op_type : n.domain + "." + n.op_type];
  return h;
}

#ifndef KILN_HAVE_ONNX

bool onnx_supported() { return false; }
OnnxModelFile parse_onnx(const std::string&, const std::string& path) {
  fail(path, "this kiln was built without ONNX support (install libonnx-dev and libprotobuf-dev, then reconfigure)");
}
OnnxModelFile read_onnx(const std::string& path) { return parse_onnx({}, path); }
std::pair<std::string, Tensor> read_onnx_tensor(const std::string& path) {
  fail(path, "this kiln was built without ONNX support (install libonnx-dev and libprotobuf-dev, then reconfigure)");
}

#else

bool onnx_supported() { return true; }

namespace {

// The little-endian payload of `raw` as `n` values of T.
Tensor to_tensor(const onnx::TensorProto& p, const std::string& path, const std::string& what) {
  if (p.data_location() == onnx::TensorProto::EXTERNAL || p.external_data_size() > 0) {
    std::string loc;
    for (const auto& kv : p.external_data())
      if (kv.key() == "location") loc = kv.value();
    fail(path, "{} is stored as external data{}; kiln reads tensors stored inside the .onnx file only", what,
         loc.empty() ? std::string() : " ('" + loc + "')");
  }
  if (p.has_segment()) fail(path, "{} is a segmented tensor, which kiln does not read", what);
  static const std::set<int32_t> kTypes = {1, 2, 6, 7, 9, 11, 16};
  if (!kTypes.count(p.data_type()))
    fail(path, "{}: type {} is not supported (kiln reads {})", what, onnx_type_name(p.data_type()), kSupportedTypes);
  const DType dtype = onnx_dtype(p.data_type(), what);
  std::vector<int64_t> dims(p.dims().begin(), p.dims().end());
  for (int64_t d : dims)
    if (d < 0) fail(path, "{} has a negative dimension {}", what, d);
  Shape shape(dims);
  int64_t n = 0;
  try {
    n = checked_numel("onnx", dims);
  } catch (const Error&) {
    fail(path, "{} has shape {}, more elements than fit in 2^63", what, to_string(shape));
  }
  const int64_t item = itemsize(dtype);
  // Every payload length is checked before anything is allocated: a header that
  // claims huge dims over a few bytes is refused, not attempted.
  auto check_count = [&](int64_t have, const char* field) {
    if (have != n)
      fail(path, "{} ({} {}) has {} values in {}, expected {}", what, onnx_type_name(p.data_type()),
           to_string(shape), have, field, n);
  };
  if (p.has_raw_data()) {
    const std::string& raw = p.raw_data();
    if (n > int64_t(raw.size()) || int64_t(raw.size()) != n * item)
      fail(path, "{} ({} {}) has {} bytes of raw data, expected {} values of {} bytes", what,
           onnx_type_name(p.data_type()), to_string(shape), raw.size(), n, item);
  } else {
    switch (dtype) {
      case DType::f32: check_count(p.float_data_size(), "float_data"); break;
      case DType::f64: check_count(p.double_data_size(), "double_data"); break;
      case DType::i64: check_count(p.int64_data_size(), "int64_data"); break;
      default: check_count(p.int32_data_size(), "int32_data"); break;
    }
  }
  Tensor t = empty_for("onnx", shape, dtype);
  void* dst = n ? t.data_ptr() : nullptr;
  if (p.has_raw_data()) {
    if (n) std::memcpy(dst, p.raw_data().data(), size_t(n * item));
    if (dtype == kBool) {
      const auto* b = static_cast<const uint8_t*>(dst);
      for (int64_t i = 0; i < n; ++i)
        if (b[i] > 1) fail(path, "{} (BOOL) has byte {} at element {}; booleans are 0 or 1", what, int(b[i]), i);
    }
    return t;
  }
  switch (dtype) {
    case DType::f32:
      if (n) std::memcpy(dst, p.float_data().data(), size_t(n) * 4);
      break;
    case DType::f64:
      if (n) std::memcpy(dst, p.double_data().data(), size_t(n) * 8);
      break;
    case DType::i64:
      if (n) std::memcpy(dst, p.int64_data().data(), size_t(n) * 8);
      break;
    case DType::i32:
      if (n) std::memcpy(dst, p.int32_data().data(), size_t(n) * 4);
      break;
    case DType::u8:
    case DType::boolean:
    case DType::bf16: {
      // ONNX keeps these widened to int32 in int32_data (bf16 as its bit pattern).
      for (int64_t i = 0; i < n; ++i) {
        int32_t v = p.int32_data(int(i));
        if (dtype == kBool && (v < 0 || v > 1))
          fail(path, "{} (BOOL) has value {} at element {}; booleans are 0 or 1", what, v, i);
        if (dtype == kU8 && (v < 0 || v > 255)) fail(path, "{} (UINT8) has value {} at element {}", what, v, i);
        if (dtype == kBF16) {
          uint16_t bits = uint16_t(v);
          std::memcpy(static_cast<uint8_t*>(dst) + 2 * i, &bits, 2);
        } else {
          static_cast<uint8_t*>(dst)[i] = uint8_t(v);
        }
      }
      break;
    }
  }
  return t;
}

OnnxValueInfo to_value_info(const onnx::ValueInfoProto& v) {
  OnnxValueInfo info;
  info.name = v.name();
  if (!v.has_type())
    info.kind = "";
  else if (v.type().has_sequence_type())
    info.kind = "sequence";
  else if (v.type().has_map_type())
    info.kind = "map";
  else if (v.type().has_optional_type())
    info.kind = "optional";
  else if (v.type().has_sparse_tensor_type())
    info.kind = "sparse_tensor";
  if (v.has_type() && v.type().has_tensor_type()) {
    const auto& tt = v.type().tensor_type();
    info.elem_type = tt.elem_type();
    if (tt.has_shape()) {
      info.has_shape = true;
      for (const auto& d : tt.shape().dim()) {
        OnnxDim dim;
        if (d.has_dim_value()) dim.value = d.dim_value();
        if (d.has_dim_param()) dim.param = d.dim_param();
        info.shape.push_back(dim);
      }
    }
  }
  return info;
}

OnnxAttribute to_attribute(const onnx::AttributeProto& a, const std::string& path, const std::string& node) {
  OnnxAttribute r;
  r.name = a.name();
  switch (a.type()) {
    case onnx::AttributeProto::FLOAT: r.type = OnnxAttrType::f; r.f = a.f(); break;
    case onnx::AttributeProto::INT: r.type = OnnxAttrType::i; r.i = a.i(); break;
    case onnx::AttributeProto::STRING: r.type = OnnxAttrType::s; r.s = a.s(); break;
    case onnx::AttributeProto::TENSOR:
      r.type = OnnxAttrType::t;
      r.t = to_tensor(a.t(), path, fmt::format("node {} attribute '{}'", node, a.name()));
      break;
    case onnx::AttributeProto::GRAPH: r.type = OnnxAttrType::g; break;
    case onnx::AttributeProto::FLOATS:
      r.type = OnnxAttrType::floats;
      r.floats.assign(a.floats().begin(), a.floats().end());
      break;
    case onnx::AttributeProto::INTS:
      r.type = OnnxAttrType::ints;
      r.ints.assign(a.ints().begin(), a.ints().end());
      break;
    case onnx::AttributeProto::STRINGS:
      r.type = OnnxAttrType::strings;
      r.strings.assign(a.strings().begin(), a.strings().end());
      break;
    default: r.type = OnnxAttrType::other; break;
  }
  return r;
}

}  // namespace

OnnxModelFile parse_onnx(const std::string& bytes, const std::string& path) {
  onnx::ModelProto m;
  if (bytes.empty()) fail(path, "the file is empty, not an ONNX model");
  if (!m.ParseFromString(bytes))
    fail(path, "not an ONNX model: the protobuf does not parse as a ModelProto (truncated or malformed; {} bytes)",
         bytes.size());
  if (!m.has_graph()) fail(path, "the ModelProto has no graph (truncated, or not an ONNX model)");
  if (m.ir_version() <= 0) fail(path, "the ModelProto has no ir_version (truncated, or not an ONNX model)");
  OnnxModelFile f;
  f.path = path;
  f.ir_version = m.ir_version();
  f.producer_name = m.producer_name();
  f.producer_version = m.producer_version();
  for (const auto& o : m.opset_import()) f.opsets[o.domain()] = o.version();
  if (f.opsets.empty()) fail(path, "the ModelProto imports no operator set (opset_import; truncated file?)");
  const onnx::GraphProto& g = m.graph();
  f.graph_name = g.name();

  std::set<std::string> defined;  // every value name available so far
  for (const auto& init : g.initializer()) {
    if (init.name().empty()) fail(path, "an initializer has no name");
    if (!defined.insert(init.name()).second) fail(path, "initializer '{}' appears twice", init.name());
    f.initializers.emplace_back(init.name(), to_tensor(init, path, fmt::format("initializer '{}'", init.name())));
  }
  if (g.sparse_initializer_size() > 0) fail(path, "the graph has sparse initializers, which kiln does not read");
  for (const auto& in : g.input()) {
    if (defined.count(in.name())) continue;  // an initializer listed as an input (IR < 4 exporters)
    f.inputs.push_back(to_value_info(in));
    defined.insert(in.name());
  }
  for (int i = 0; i < g.node_size(); ++i) {
    const auto& np = g.node(i);
    OnnxNode n;
    n.name = np.name();
    n.op_type = np.op_type();
    n.domain = np.domain();
    if (n.op_type.empty()) fail(path, "node #{} has no op_type", i);
    n.inputs.assign(np.input().begin(), np.input().end());
    n.outputs.assign(np.output().begin(), np.output().end());
    for (const auto& a : np.attribute()) n.attributes.push_back(to_attribute(a, path, n.describe(size_t(i))));
    for (const std::string& in : n.inputs)
      if (!in.empty() && !defined.count(in))
        fail(path, "node {} reads '{}', which no initializer, graph input or earlier node defines "
                   "(truncated file, or nodes not in topological order)",
             n.describe(size_t(i)), in);
    for (const std::string& out : n.outputs)
      if (!out.empty() && !defined.insert(out).second)
        fail(path, "node {} writes '{}', which is already defined (ONNX graphs assign each name once)",
             n.describe(size_t(i)), out);
    f.nodes.push_back(std::move(n));
  }
  for (const auto& out : g.output()) {
    if (!defined.count(out.name()))
      fail(path, "graph output '{}' is not produced by any node, initializer or input", out.name());
    f.outputs.push_back(to_value_info(out));
  }
  if (f.outputs.empty()) fail(path, "the graph has no outputs");
  return f;
}

OnnxModelFile read_onnx(const std::string& path) {
  return parse_onnx(read_file("onnx", path, kMaxOnnxBytes, "an ONNX model"), path);
}

std::pair<std::string, Tensor> read_onnx_tensor(const std::string& path) {
  std::string bytes = read_file("onnx", path, kMaxOnnxBytes, "an ONNX tensor");
  onnx::TensorProto p;
  if (bytes.empty() || !p.ParseFromString(bytes))
    fail(path, "not an ONNX TensorProto (truncated or malformed protobuf)");
  return {p.name(), to_tensor(p, path, p.name().empty() ? std::string("the tensor") : "tensor '" + p.name() + "'")};
}

#endif  // KILN_HAVE_ONNX

}  // namespace kiln::io
