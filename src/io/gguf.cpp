// GGUF reader and writer (include/kiln/io/gguf.h, docs/model_files.md).
//
// File layout (version 3; all integers little-endian):
//   u32 magic "GGUF", u32 version, u64 tensor_count, u64 metadata_kv_count
//   metadata_kv_count x { string key, u32 value_type, value }
//       string = u64 length + UTF-8 bytes (no terminator)
//       array  = u32 element type, u64 count, count values (arrays nest)
//   tensor_count x { string name, u32 n_dims, u64 ne[n_dims] (ne[0] innermost),
//                    u32 ggml_type, u64 offset (in the data section) }
//   padding to `alignment` (general.alignment, UINT32, default 32)
//   the data section; each tensor's offset is a multiple of `alignment`.
// Block types store rows of ne[0] values in blocks of 32:
//   Q8_0: { f16 d; int8 qs[32] }        34 bytes, x = qs[j] * d
//   Q4_0: { f16 d; uint8 qs[16] }       18 bytes, x[j] = ((qs[j] & 15) - 8) * d,
//                                                 x[j + 16] = ((qs[j] >> 4) - 8) * d
#include "kiln/io/gguf.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <set>

#include "kiln/core/atomic_file.h"
#include "kiln/core/error.h"
#include "src/backend/cpu/quant/quant.h"
#include "src/io/gguf_internal.h"

static_assert(std::endian::native == std::endian::little, "GGUF is read and written as little-endian memory");

namespace kiln::io {
namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as a little-endian u32
constexpr uint64_t kDefaultAlignment = 32;
constexpr int kMaxDims = 4;         // GGML_MAX_DIMS
constexpr int kMaxNesting = 8;      // arrays of arrays: deeper is refused (bounds recursion)
constexpr const char* kSupported = "F32, F16, BF16, Q8_0, Q4_0";

template <class... Args>
[[noreturn]] void fail(const char* op, const std::string& path, fmt::format_string<Args...> f, Args&&... args) {
  throw Error(op, path + ": " + fmt::format(f, std::forward<Args>(args)...));
}

/// Bytes per element-block and elements per block of the types kiln handles.
struct TypeLayout {
  uint64_t block_bytes;
  uint64_t block_elems;
};
std::optional<TypeLayout> layout_of(uint32_t type) {
  switch (GgmlType(type)) {
    case GgmlType::f32:
      return TypeLayout{4, 1};
    case GgmlType::f16:
    case GgmlType::bf16:
      return TypeLayout{2, 1};
    case GgmlType::q8_0:
      return TypeLayout{34, 32};
    case GgmlType::q4_0:
      return TypeLayout{18, 32};
  }
  return std::nullopt;
}

/// Bytes of each scalar value type (0: not a scalar).
uint64_t scalar_size(GgufValueType t) {
  switch (t) {
    case GgufValueType::u8:
    case GgufValueType::i8:
    case GgufValueType::boolean:
      return 1;
    case GgufValueType::u16:
    case GgufValueType::i16:
      return 2;
    case GgufValueType::u32:
    case GgufValueType::i32:
    case GgufValueType::f32:
      return 4;
    case GgufValueType::u64:
    case GgufValueType::i64:
    case GgufValueType::f64:
      return 8;
    default:
      return 0;
  }
}

bool valid_value_type(uint32_t t) { return t <= uint32_t(GgufValueType::f64); }

/// A bounds-checked reader over the file's bytes.
class Cursor {
 public:
  Cursor(const char* op, const std::string& path, const uint8_t* data, uint64_t size)
      : op_(op), path_(path), data_(data), size_(size) {}
  uint64_t pos() const { return pos_; }
  uint64_t left() const { return size_ - pos_; }

  template <class T>
  T read(const char* what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  std::string string(const char* what) {
    uint64_t n = read<uint64_t>(what);
    if (n > left())
      fail(op_, path_, "{} at byte {}: string length {} runs past the end of the file ({} bytes left)", what,
           pos_ - 8, n, left());
    std::string s(reinterpret_cast<const char*>(data_ + pos_), size_t(n));
    pos_ += n;
    return s;
  }
  void need(uint64_t n, const char* what) const {
    if (n > left())
      fail(op_, path_, "truncated: {} at byte {} needs {} bytes, {} left in the file", what, pos_, n, left());
  }

 private:
  const char* op_;
  const std::string& path_;
  const uint8_t* data_;
  uint64_t size_;
  uint64_t pos_ = 0;
};

GgufValue read_value(Cursor& c, const char* op, const std::string& path, const std::string& key, GgufValueType type,
                     int depth) {
  switch (type) {
    case GgufValueType::u8:
      return GgufValue::uint(type, c.read<uint8_t>("value"));
    case GgufValueType::u16:
      return GgufValue::uint(type, c.read<uint16_t>("value"));
    case GgufValueType::u32:
      return GgufValue::uint(type, c.read<uint32_t>("value"));
    case GgufValueType::u64:
      return GgufValue::uint(type, c.read<uint64_t>("value"));
    case GgufValueType::i8:
      return GgufValue::sint(type, c.read<int8_t>("value"));
    case GgufValueType::i16:
      return GgufValue::sint(type, c.read<int16_t>("value"));
    case GgufValueType::i32:
      return GgufValue::sint(type, c.read<int32_t>("value"));
    case GgufValueType::i64:
      return GgufValue::sint(type, c.read<int64_t>("value"));
    case GgufValueType::f32:
      return GgufValue::real(type, c.read<float>("value"));
    case GgufValueType::f64:
      return GgufValue::real(type, c.read<double>("value"));
    case GgufValueType::boolean: {
      uint8_t b = c.read<uint8_t>("value");
      if (b > 1) fail(op, path, "metadata '{}': BOOL value is {}, not 0 or 1", key, b);
      return GgufValue::boolean(b != 0);
    }
    case GgufValueType::string:
      return GgufValue::string(c.string("string value"));
    case GgufValueType::array: {
      if (depth >= kMaxNesting) fail(op, path, "metadata '{}': arrays nest more than {} deep", key, kMaxNesting);
      uint32_t et = c.read<uint32_t>("array element type");
      if (!valid_value_type(et)) fail(op, path, "metadata '{}': array element type {} is not a GGUF type", key, et);
      uint64_t n = c.read<uint64_t>("array length");
      // Each element takes at least its scalar size (a string its length, an
      // array its type and count): a count the rest of the file cannot hold is
      // refused before anything is allocated.
      auto elem = GgufValueType(et);
      uint64_t min = elem == GgufValueType::string ? 8 : elem == GgufValueType::array ? 12 : scalar_size(elem);
      if (n > c.left() / min)
        fail(op, path, "metadata '{}': array of {} {} values cannot fit in the {} bytes left", key, n,
             gguf_value_type_name(elem), c.left());
      std::vector<GgufValue> items;
      items.reserve(size_t(n));
      for (uint64_t i = 0; i < n; ++i) items.push_back(read_value(c, op, path, key, elem, depth + 1));
      return GgufValue::array(elem, std::move(items));
    }
  }
  fail(op, path, "metadata '{}': value type {} is not a GGUF type", key, uint32_t(type));
}

// ---------------------------------------------------------------- writing

class Writer {
 public:
  void u32(uint32_t v) { raw(&v, 4); }
  void u64(uint64_t v) { raw(&v, 8); }
  void str(const std::string& s) {
    u64(s.size());
    raw(s.data(), s.size());
  }
  void raw(const void* p, size_t n) { out.append(static_cast<const char*>(p), n); }
  void value(const GgufValue& v) {
    switch (v.type) {
      case GgufValueType::u8: {
        uint8_t x = uint8_t(v.as_uint());
        raw(&x, 1);
        break;
      }
      case GgufValueType::u16: {
        uint16_t x = uint16_t(v.as_uint());
        raw(&x, 2);
        break;
      }
      case GgufValueType::u32:
        u32(uint32_t(v.as_uint()));
        break;
      case GgufValueType::u64:
        u64(v.as_uint());
        break;
      case GgufValueType::i8: {
        int8_t x = int8_t(v.as_int());
        raw(&x, 1);
        break;
      }
      case GgufValueType::i16: {
        int16_t x = int16_t(v.as_int());
        raw(&x, 2);
        break;
      }
      case GgufValueType::i32: {
        int32_t x = int32_t(v.as_int());
        raw(&x, 4);
        break;
      }
      case GgufValueType::i64: {
        int64_t x = v.as_int();
        raw(&x, 8);
        break;
      }
      case GgufValueType::f32: {
        float x = float(v.as_double());
        raw(&x, 4);
        break;
      }
      case GgufValueType::f64: {
        double x = v.as_double();
        raw(&x, 8);
        break;
      }
      case GgufValueType::boolean: {
        uint8_t x = v.as_bool() ? 1 : 0;
        raw(&x, 1);
        break;
      }
      case GgufValueType::string:
        str(v.as_string());
        break;
      case GgufValueType::array:
        u32(uint32_t(v.elem_type));
        u64(v.as_array().size());
        for (const GgufValue& item : v.as_array()) value(item);
        break;
    }
  }
  std::string out;
};

/// Checks that `v` holds what its type says (and arrays' items their element
/// type), so that the writer never writes a value it would read back differently.
void check_value(const char* op, const std::string& path, const std::string& key, const GgufValue& v, int depth) {
  auto bad = [&](const char* what) {
    fail(op, path, "metadata '{}': a {} value must hold {}", key, gguf_value_type_name(v.type), what);
  };
  auto in_range = [&](auto lo, auto hi, auto x) {
    if (x < lo || x > hi) fail(op, path, "metadata '{}': {} does not fit in {}", key, x, gguf_value_type_name(v.type));
  };
  switch (v.type) {
    case GgufValueType::u8:
    case GgufValueType::u16:
    case GgufValueType::u32:
    case GgufValueType::u64: {
      if (!std::holds_alternative<uint64_t>(v.value)) bad("an unsigned integer (GgufValue::uint)");
      uint64_t x = std::get<uint64_t>(v.value);
      uint64_t hi = v.type == GgufValueType::u8    ? 0xffu
                    : v.type == GgufValueType::u16 ? 0xffffu
                    : v.type == GgufValueType::u32 ? 0xffffffffu
                                                   : std::numeric_limits<uint64_t>::max();
      in_range(uint64_t(0), hi, x);
      break;
    }
    case GgufValueType::i8:
    case GgufValueType::i16:
    case GgufValueType::i32:
    case GgufValueType::i64: {
      if (!std::holds_alternative<int64_t>(v.value)) bad("a signed integer (GgufValue::sint)");
      int64_t x = std::get<int64_t>(v.value);
      int bits = v.type == GgufValueType::i8 ? 8 : v.type == GgufValueType::i16 ? 16 : v.type == GgufValueType::i32 ? 32 : 64;
      if (bits < 64) in_range(-(int64_t(1) << (bits - 1)), (int64_t(1) << (bits - 1)) - 1, x);
      break;
    }
    case GgufValueType::f32:
    case GgufValueType::f64:
      if (!std::holds_alternative<double>(v.value)) bad("a floating-point number (GgufValue::real)");
      break;
    case GgufValueType::boolean:
      if (!std::holds_alternative<bool>(v.value)) bad("a bool");
      break;
    case GgufValueType::string:
      if (!std::holds_alternative<std::string>(v.value)) bad("a string");
      break;
    case GgufValueType::array:
      if (!std::holds_alternative<std::vector<GgufValue>>(v.value)) bad("a vector of values");
      if (depth >= kMaxNesting) fail(op, path, "metadata '{}': arrays nest more than {} deep", key, kMaxNesting);
      if (!valid_value_type(uint32_t(v.elem_type)))
        fail(op, path, "metadata '{}': array element type {} is not a GGUF type", key, uint32_t(v.elem_type));
      for (const GgufValue& item : v.as_array()) {
        if (item.type != v.elem_type)
          fail(op, path, "metadata '{}': an array of {} holds a {} value", key, gguf_value_type_name(v.elem_type),
               gguf_value_type_name(item.type));
        check_value(op, path, key, item, depth + 1);
      }
      break;
    default:
      fail(op, path, "metadata '{}': value type {} is not a GGUF type", key, uint32_t(v.type));
  }
}

uint64_t align_up(uint64_t n, uint64_t a) { return (n + a - 1) / a * a; }

}  // namespace

// ---------------------------------------------------------------- values

const char* gguf_value_type_name(GgufValueType type) {
  static constexpr const char* names[] = {"UINT8", "INT8",    "UINT16", "INT16",  "UINT32", "INT32", "FLOAT32",
                                          "BOOL",  "STRING", "ARRAY",  "UINT64", "INT64",  "FLOAT64"};
  return uint32_t(type) <= 12 ? names[uint32_t(type)] : "?";
}

std::string gguf_type_name(uint32_t type) {
  static constexpr const char* names[] = {
      "F32",     "F16",     "Q4_0",    "Q4_1",    "Q4_2 (removed)", "Q4_3 (removed)", "Q5_0",   "Q5_1",
      "Q8_0",    "Q8_1",    "Q2_K",    "Q3_K",    "Q4_K",           "Q5_K",           "Q6_K",   "Q8_K",
      "IQ2_XXS", "IQ2_XS",  "IQ3_XXS", "IQ1_S",   "IQ4_NL",         "IQ3_S",          "IQ2_S",  "IQ4_XS",
      "I8",      "I16",     "I32",     "I64",     "F64",            "IQ1_M",          "BF16",   "Q4_0_4_4 (removed)",
      "Q4_0_4_8 (removed)", "Q4_0_8_8 (removed)", "TQ1_0", "TQ2_0", "IQ4_NL_4_4 (removed)", "IQ4_NL_4_8 (removed)",
      "IQ4_NL_8_8 (removed)", "MXFP4"};
  if (type < std::size(names)) return names[type];
  return fmt::format("type {}", type);
}

namespace {
[[noreturn]] void wrong_kind(const GgufValue& v, const char* wanted) {
  throw Error("GgufValue", fmt::format("a {} value is not {}", gguf_value_type_name(v.type), wanted));
}
}  // namespace

uint64_t GgufValue::as_uint() const {
  if (auto* p = std::get_if<uint64_t>(&value)) return *p;
  if (auto* p = std::get_if<int64_t>(&value); p && *p >= 0) return uint64_t(*p);
  wrong_kind(*this, "a non-negative integer");
}
int64_t GgufValue::as_int() const {
  if (auto* p = std::get_if<int64_t>(&value)) return *p;
  if (auto* p = std::get_if<uint64_t>(&value); p && *p <= uint64_t(std::numeric_limits<int64_t>::max()))
    return int64_t(*p);
  wrong_kind(*this, "an integer that fits in int64");
}
double GgufValue::as_double() const {
  if (auto* p = std::get_if<double>(&value)) return *p;
  if (auto* p = std::get_if<int64_t>(&value)) return double(*p);
  if (auto* p = std::get_if<uint64_t>(&value)) return double(*p);
  wrong_kind(*this, "a number");
}
bool GgufValue::as_bool() const {
  if (auto* p = std::get_if<bool>(&value)) return *p;
  wrong_kind(*this, "a bool");
}
const std::string& GgufValue::as_string() const {
  if (auto* p = std::get_if<std::string>(&value)) return *p;
  wrong_kind(*this, "a string");
}
const std::vector<GgufValue>& GgufValue::as_array() const {
  if (auto* p = std::get_if<std::vector<GgufValue>>(&value)) return *p;
  wrong_kind(*this, "an array");
}

std::string GgufValue::to_string(size_t max_items) const {
  return std::visit(
      [&](const auto& v) -> std::string {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, std::string>) {
          std::string out = "\"";
          for (char ch : v) {
            if (ch == '"' || ch == '\\') out += '\\';
            if (ch == '\n') {
              out += "\\n";
              continue;
            }
            out += ch;
          }
          return out + "\"";
        } else if constexpr (std::is_same_v<T, std::vector<GgufValue>>) {
          std::string out = "[";
          for (size_t i = 0; i < v.size() && i < max_items; ++i) out += (i ? ", " : "") + v[i].to_string(max_items);
          if (v.size() > max_items) out += fmt::format(", ... ({} items)", v.size());
          return out + "]";
        } else if constexpr (std::is_same_v<T, bool>) {
          return v ? "true" : "false";
        } else {
          return fmt::format("{}", v);
        }
      },
      value);
}

// ---------------------------------------------------------------- reading

namespace detail {

GgufMeta parse_gguf(const char* op, const std::string& path, const FileBytes& file) {
  Cursor c(op, path, file.data(), file.size());
  uint32_t magic = c.read<uint32_t>("magic");
  if (magic != kMagic) fail(op, path, "not a GGUF file (the first 4 bytes are not \"GGUF\")");
  GgufMeta m;
  m.version = c.read<uint32_t>("version");
  if (m.version == 1) fail(op, path, "GGUF version 1 (32-bit counts) is not supported; kiln reads versions 2 and 3");
  if (m.version != 2 && m.version != 3) {
    if (m.version >= 0x01000000u)
      fail(op, path, "GGUF version {:#x} looks byte-swapped: big-endian GGUF files are not supported", m.version);
    fail(op, path, "GGUF version {} is not supported (kiln reads versions 2 and 3)", m.version);
  }
  uint64_t n_tensors = c.read<uint64_t>("tensor count");
  uint64_t n_kv = c.read<uint64_t>("metadata count");
  // Bound the counts by what the rest of the file can hold (a key/value is at
  // least 13 bytes, a tensor info at least 24) before reserving anything.
  if (n_kv > c.left() / 13) fail(op, path, "metadata count {} cannot fit in the {} bytes left", n_kv, c.left());
  std::set<std::string> keys;
  for (uint64_t i = 0; i < n_kv; ++i) {
    std::string key = c.string("metadata key");
    if (!keys.insert(key).second) fail(op, path, "metadata key '{}' appears twice", key);
    uint32_t t = c.read<uint32_t>("metadata value type");
    if (!valid_value_type(t)) fail(op, path, "metadata '{}': value type {} is not a GGUF type", key, t);
    m.metadata.emplace_back(key, read_value(c, op, path, key, GgufValueType(t), 0));
  }
  for (const auto& [key, v] : m.metadata)
    if (key == "general.alignment") {
      if (v.type != GgufValueType::u32)
        fail(op, path, "general.alignment is {}, not UINT32", gguf_value_type_name(v.type));
      uint64_t a = v.as_uint();
      if (a == 0 || (a & (a - 1)) != 0) fail(op, path, "general.alignment {} is not a power of two", a);
      m.alignment = a;
    }

  if (n_tensors > c.left() / 24)
    fail(op, path, "tensor count {} cannot fit in the {} bytes left", n_tensors, c.left());
  std::set<std::string> names;
  for (uint64_t i = 0; i < n_tensors; ++i) {
    GgufTensorInfo t;
    t.name = c.string("tensor name");
    if (!names.insert(t.name).second) fail(op, path, "tensor '{}' appears twice", t.name);
    uint32_t n_dims = c.read<uint32_t>("tensor dims");
    if (n_dims > kMaxDims) fail(op, path, "tensor '{}': {} dims, more than GGUF's {}", t.name, n_dims, kMaxDims);
    std::vector<uint64_t> ne(n_dims);
    for (auto& d : ne) d = c.read<uint64_t>("tensor dim");
    t.type = c.read<uint32_t>("tensor type");
    t.offset = c.read<uint64_t>("tensor offset");
    // The element count, and the product of the non-zero dims: an empty
    // tensor's strides are still products of its other dims and must fit in
    // int64 (the fuzzer found [0, 2^37, 2^48] accepted here and refused by
    // Tensor::empty on load).
    int64_t numel = 1, strides_span = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      if (ne[d] > uint64_t(std::numeric_limits<int64_t>::max()) ||
          __builtin_mul_overflow(numel, int64_t(ne[d]), &numel) ||
          __builtin_mul_overflow(strides_span, std::max<int64_t>(int64_t(ne[d]), 1), &strides_span))
        fail(op, path, "tensor '{}': dims overflow the element count (ne[{}] = {})", t.name, d, ne[d]);
    }
    for (int d = int(n_dims) - 1; d >= 0; --d) t.shape.push_back(int64_t(ne[size_t(d)]));
    auto layout = layout_of(t.type);
    if (!layout)
      fail(op, path, "tensor '{}': type {} is not supported (kiln reads {})", t.name, gguf_type_name(t.type),
           kSupported);
    uint64_t ne0 = n_dims ? ne[0] : 1;
    if (ne0 % layout->block_elems != 0)
      fail(op, path, "tensor '{}': {} rows of {} values are not whole blocks of {}", t.name, gguf_type_name(t.type),
           ne0, layout->block_elems);
    if (__builtin_mul_overflow(uint64_t(numel) / layout->block_elems, layout->block_bytes, &t.nbytes))
      fail(op, path, "tensor '{}': dims overflow the byte count", t.name);
    m.tensors.push_back(std::move(t));
  }
  m.data_start = align_up(c.pos(), m.alignment);
  if (m.data_start > file.size() && !m.tensors.empty())
    fail(op, path, "truncated: the data section would start at byte {}, past the end ({} bytes)", m.data_start,
         file.size());
  uint64_t data_size = file.size() > m.data_start ? file.size() - m.data_start : 0;
  std::vector<const GgufTensorInfo*> by_offset;
  for (const auto& t : m.tensors) {
    if (t.offset % m.alignment != 0)
      fail(op, path, "tensor '{}': offset {} is not a multiple of the alignment {}", t.name, t.offset, m.alignment);
    if (t.offset > data_size || t.nbytes > data_size - t.offset)
      fail(op, path, "tensor '{}': bytes [{}, {}) run past the data section of {} bytes (truncated file?)", t.name,
           t.offset, t.offset + std::min(t.nbytes, std::numeric_limits<uint64_t>::max() - t.offset), data_size);
    by_offset.push_back(&t);
  }
  std::sort(by_offset.begin(), by_offset.end(),
            [](const GgufTensorInfo* a, const GgufTensorInfo* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const auto *a = by_offset[i - 1], *b = by_offset[i];
    if (b->offset < a->offset + a->nbytes && b->nbytes > 0 && a->nbytes > 0)
      fail(op, path, "tensor '{}': bytes [{}, {}) overlap tensor '{}' [{}, {})", b->name, b->offset,
           b->offset + b->nbytes, a->name, a->offset, a->offset + a->nbytes);
  }
  return m;
}

namespace {
GgufData finish(const char* op, GgufData d) {
  d.meta = parse_gguf(op, d.path, d.bytes);
  for (size_t i = 0; i < d.meta.tensors.size(); ++i) d.index.emplace(d.meta.tensors[i].name, i);
  return d;
}
}  // namespace

GgufData open_gguf(const char* op, const std::string& path) {
  return finish(op, GgufData{path, FileBytes::map_lazily(op, path), {}, {}});
}

GgufData gguf_from_memory(const char* op, const void* data, size_t size) {
  return finish(op, GgufData{"<memory>", FileBytes::from_memory(data, size), {}, {}});
}

bool gguf_aliases(const GgufData& d, size_t i) {
  const GgufTensorInfo& t = d.meta.tensors[i];
  const uint8_t* src = d.bytes.data() + d.meta.data_start + t.offset;
  uint64_t item = t.type == uint32_t(GgmlType::f32) ? 4 : 2;
  return (t.type == uint32_t(GgmlType::f32) || t.type == uint32_t(GgmlType::bf16)) && t.nbytes > 0 &&
         reinterpret_cast<uintptr_t>(src) % item == 0;
}

Tensor gguf_load_dense(const char* op, const std::shared_ptr<const GgufData>& d, size_t i) {
  const GgufTensorInfo& t = d->meta.tensors[i];
  const uint8_t* src = d->bytes.data() + d->meta.data_start + t.offset;
  switch (GgmlType(t.type)) {
    case GgmlType::f32:
    case GgmlType::bf16: {
      DType dt = t.type == uint32_t(GgmlType::f32) ? kF32 : kBF16;
      if (gguf_aliases(*d, i)) {
        // The tensor's storage keeps the whole file (and its mapping) alive.
        auto* keep = new std::shared_ptr<const GgufData>(d);
        auto storage = std::make_shared<Storage>(
            const_cast<uint8_t*>(src), size_t(t.nbytes), kCPU,
            [](void*, void* ctx) { delete static_cast<std::shared_ptr<const GgufData>*>(ctx); }, keep);
        return Tensor::make_view(std::move(storage), t.shape, contiguous_strides(t.shape), 0, dt);
      }
      Tensor out = Tensor::empty(t.shape, dt);
      if (t.nbytes) std::memcpy(out.data_ptr(), src, size_t(t.nbytes));
      return out;
    }
    case GgmlType::f16: {
      Tensor out = Tensor::empty(t.shape, kF32);
      float* dst = out.data<float>();
      for (int64_t k = 0; k < out.numel(); ++k) {
        uint16_t h;
        std::memcpy(&h, src + 2 * k, 2);
        dst[k] = backend::cpu::fp16_to_fp32(h);
      }
      return out;
    }
    default:
      fail(op, d->path, "tensor '{}' is {}, a quantized type: load it with GgufFile::load_quantized", t.name,
           gguf_type_name(t.type));
  }
}

nn::QuantizedTensor gguf_load_quantized(const char* op, const GgufData& d, size_t i) {
  const GgufTensorInfo& t = d.meta.tensors[i];
  bool q8 = t.type == uint32_t(GgmlType::q8_0);
  if (!q8 && t.type != uint32_t(GgmlType::q4_0))
    fail(op, d.path, "tensor '{}' is {}, not Q8_0 or Q4_0: load it with GgufFile::load", t.name,
         gguf_type_name(t.type));
  int64_t cols = t.shape.empty() ? 1 : t.shape.back();
  int64_t rows = cols ? int64_t(t.nbytes / (q8 ? 34 : 18)) * 32 / cols : 0;
  nn::QuantizedTensor q;
  q.type = q8 ? nn::QuantType::q8_0 : nn::QuantType::q4_0;
  q.shape = {rows, cols};
  int64_t nblocks = cols / 32, code_bytes = q8 ? 32 : 16, block_bytes = 2 + code_bytes;
  q.codes = Tensor::empty({rows, nblocks * code_bytes}, kU8);
  q.scales = Tensor::empty({rows, nblocks}, kF32);
  const uint8_t* src = d.bytes.data() + d.meta.data_start + t.offset;
  auto* codes = static_cast<uint8_t*>(q.codes.data_ptr());
  float* scales = q.scales.data<float>();
  // De-interleave: each block's f16 scale into the scale plane, its codes into the code plane.
  for (int64_t b = 0; b < rows * nblocks; ++b) {
    uint16_t h;
    std::memcpy(&h, src + b * block_bytes, 2);
    scales[b] = backend::cpu::fp16_to_fp32(h);
    std::memcpy(codes + b * code_bytes, src + b * block_bytes + 2, size_t(code_bytes));
  }
  return q;
}

}  // namespace detail

// ---------------------------------------------------------------- GgufFile

GgufFile GgufFile::open(const std::string& path) {
  return GgufFile(std::make_shared<const detail::GgufData>(detail::open_gguf("load_gguf", path)));
}
uint32_t GgufFile::version() const { return d_->meta.version; }
uint64_t GgufFile::alignment() const { return d_->meta.alignment; }
const GgufMetadata& GgufFile::metadata() const { return d_->meta.metadata; }
const GgufValue* GgufFile::find(const std::string& key) const {
  for (const auto& [k, v] : d_->meta.metadata)
    if (k == key) return &v;
  return nullptr;
}
const std::vector<GgufTensorInfo>& GgufFile::tensors() const { return d_->meta.tensors; }
const GgufTensorInfo& GgufFile::tensor(const std::string& name) const {
  auto it = d_->index.find(name);
  if (it == d_->index.end())
    fail("load_gguf", d_->path, "no tensor named '{}' ({} tensors)", name, d_->meta.tensors.size());
  return d_->meta.tensors[it->second];
}
Tensor GgufFile::load(const std::string& name) const {
  tensor(name);
  return detail::gguf_load_dense("load_gguf", d_, d_->index.at(name));
}
nn::QuantizedTensor GgufFile::load_quantized(const std::string& name) const {
  tensor(name);
  return detail::gguf_load_quantized("load_gguf", *d_, d_->index.at(name));
}
Tensor GgufFile::load_f32(const std::string& name) const {
  const GgufTensorInfo& t = tensor(name);
  if (t.type == uint32_t(GgmlType::q8_0) || t.type == uint32_t(GgmlType::q4_0))
    return nn::dequantize(load_quantized(name)).reshape(t.shape);
  Tensor x = load(name);
  return x.dtype() == kF32 ? x : x.to(kF32);
}

// ---------------------------------------------------------------- writing

void save_gguf(const std::string& path, const GgufMetadata& metadata, const std::vector<GgufWriteTensor>& tensors) {
  constexpr const char* op = "save_gguf";
  uint64_t alignment = kDefaultAlignment;
  std::set<std::string> keys;
  for (const auto& [key, v] : metadata) {
    if (!keys.insert(key).second) fail(op, path, "metadata key '{}' appears twice", key);
    check_value(op, path, key, v, 0);
    if (key == "general.alignment") {
      if (v.type != GgufValueType::u32 || v.as_uint() == 0 || (v.as_uint() & (v.as_uint() - 1)) != 0)
        fail(op, path, "general.alignment must be a power-of-two UINT32, got {} {}", gguf_value_type_name(v.type),
             v.to_string());
      alignment = v.as_uint();
    }
  }

  // Every tensor checked and laid out before the file is created.
  struct Planned {
    const GgufWriteTensor* t;
    Shape shape;
    uint32_t type;
    uint64_t offset, nbytes;
  };
  std::vector<Planned> plan;
  std::set<std::string> names;
  uint64_t offset = 0;
  for (const GgufWriteTensor& t : tensors) {
    if (!names.insert(t.name).second) fail(op, path, "tensor '{}' appears twice", t.name);
    Planned p{&t, {}, 0, 0, 0};
    if (t.quantized) {
      nn::check_quantized(op, path + ": tensor '" + t.name + "'", *t.quantized);
      p.type = uint32_t(t.quantized->type == nn::QuantType::q8_0 ? GgmlType::q8_0 : GgmlType::q4_0);
      p.shape = t.shape.empty() ? t.quantized->shape : t.shape;
      int64_t numel = 1;
      for (int64_t d : p.shape) numel *= d;
      if (p.shape.empty() || p.shape.back() != t.quantized->cols() || numel != t.quantized->rows() * t.quantized->cols())
        fail(op, path, "tensor '{}': shape {} does not match the quantized matrix {}", t.name, to_string(p.shape),
             to_string(t.quantized->shape));
      p.nbytes = uint64_t(numel / 32) * (t.quantized->type == nn::QuantType::q8_0 ? 34 : 18);
    } else {
      if (!t.dense.defined()) fail(op, path, "tensor '{}' is undefined", t.name);
      if (t.dense.device() != kCPU) fail(op, path, "tensor '{}' is on {}; move it to the CPU first", t.name, t.dense.device().str());
      if (t.dense.dim() > kMaxDims)
        fail(op, path, "tensor '{}': {} dims, more than GGUF's {}", t.name, t.dense.dim(), kMaxDims);
      DType dt = t.dense.dtype();
      if (dt != kF32 && dt != kBF16 && dt != kF64)
        fail(op, path, "tensor '{}' is {}; GGUF tensors here are F32, F16, BF16 (or quantized)", t.name,
             kiln::name(dt));
      if (t.as_f16 && dt != kF32) fail(op, path, "tensor '{}': as_f16 needs an f32 tensor, got {}", t.name, kiln::name(dt));
      p.shape = t.dense.shape();
      p.type = uint32_t(t.as_f16 ? GgmlType::f16 : dt == kBF16 ? GgmlType::bf16 : GgmlType::f32);
      p.nbytes = uint64_t(t.dense.numel()) * (p.type == uint32_t(GgmlType::f32) ? 4 : 2);
    }
    p.offset = offset;
    offset = align_up(offset + p.nbytes, alignment);
    plan.push_back(std::move(p));
  }

  Writer w;
  w.u32(kMagic);
  w.u32(3);
  w.u64(plan.size());
  w.u64(metadata.size());
  for (const auto& [key, v] : metadata) {
    w.str(key);
    w.u32(uint32_t(v.type));
    w.value(v);
  }
  for (const Planned& p : plan) {
    w.str(p.t->name);
    w.u32(uint32_t(p.shape.size()));
    for (size_t d = p.shape.size(); d-- > 0;) w.u64(uint64_t(p.shape[d]));  // ne[0] is the innermost dim
    w.u32(p.type);
    w.u64(p.offset);
  }
  w.out.append(align_up(w.out.size(), alignment) - w.out.size(), '\0');

  AtomicFile file(op, path);
  file.write(w.out.data(), w.out.size());
  uint64_t written = 0;
  std::string buf;
  for (const Planned& p : plan) {
    buf.clear();
    if (p.offset > written) buf.append(p.offset - written, '\0');
    const GgufWriteTensor& t = *p.t;
    if (t.quantized) {
      // Interleave: per block, the scale as f16 (exact: kiln's scales are halves), then the codes.
      const nn::QuantizedTensor& q = *t.quantized;
      bool q8 = q.type == nn::QuantType::q8_0;
      int64_t nblocks = q.rows() * (q.cols() / 32), code_bytes = q8 ? 32 : 16;
      const auto* codes = static_cast<const uint8_t*>(q.codes.data_ptr());
      const float* scales = q.scales.data<float>();
      for (int64_t b = 0; b < nblocks; ++b) {
        uint16_t h = backend::cpu::fp32_to_fp16(scales[b]);
        buf.append(reinterpret_cast<const char*>(&h), 2);
        buf.append(reinterpret_cast<const char*>(codes + b * code_bytes), size_t(code_bytes));
      }
    } else if (p.type == uint32_t(GgmlType::f16)) {
      Tensor c = t.dense.contiguous();
      const float* x = c.data<float>();
      for (int64_t k = 0; k < c.numel(); ++k) {
        uint16_t h = backend::cpu::fp32_to_fp16(x[k]);
        buf.append(reinterpret_cast<const char*>(&h), 2);
      }
    } else {
      Tensor c = (t.dense.dtype() == kF64 ? t.dense.to(kF32) : t.dense).contiguous();
      buf.append(static_cast<const char*>(c.data_ptr()), size_t(c.nbytes()));
    }
    file.write(buf.data(), buf.size());
    written = p.offset + p.nbytes;
  }
  file.commit();
}

}  // namespace kiln::io
