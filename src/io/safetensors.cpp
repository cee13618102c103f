// safetensors read/write: validated loads, atomic saves (docs/io.md).
//
// File layout (all integers little-endian):
//   [0, 8)           u64 N, the header's length in bytes
//   [8, 8 + N)       UTF-8 JSON object, may end in spaces:
//                      {"__metadata__": {str: str, ...},            (optional)
//                       name: {"dtype": "F32", "shape": [2, 3],
//                              "data_offsets": [begin, end]}, ...}
//   [8 + N, size)    the data buffer; [begin, end) is relative to its start,
//                    every byte belongs to exactly one tensor.
#include "kiln/io/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <system_error>
#include <utility>
#include <vector>

#include "kiln/core/atomic_file.h"
#include "kiln/core/error.h"
#include "kiln/io/json_util.h"
#include "src/io/safetensors_internal.h"

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; kiln reads and writes it as raw memory");

namespace kiln::io {
namespace {
using detail::brief;

// std::map-backed JSON: lookups and inserts stay O(log n) for headers of many
// thousands of tensors (ordered_json is a vector with linear search). Header
// order is recorded separately while parsing and kept by hand while writing.
using Json = nlohmann::json;

// The reference implementation refuses headers above 100 MB; a real header
// (thousands of tensors) is a few MB.
constexpr uint64_t kMaxHeaderBytes = 100ull << 20;
constexpr const char* kMetadataKey = "__metadata__";

using detail::Entry;
using detail::FileBytes;
using detail::FileDType;
using detail::Header;

constexpr FileDType kFileDTypes[] = {
    {"BOOL", 1, kBool}, {"U8", 1, kU8},   {"I32", 4, kI32}, {"I64", 8, kI64},
    {"BF16", 2, kBF16}, {"F16", 2, kF32}, {"F32", 4, kF32}, {"F64", 8, kF64},
};
constexpr const char* kSupportedNames = "BOOL, U8, I32, I64, BF16, F16, F32, F64";

const FileDType* find_file_dtype(const std::string& name) {
  for (const auto& d : kFileDTypes)
    if (name == d.name) return &d;
  return nullptr;
}

const char* file_dtype_name(DType t) {
  switch (t) {
    case DType::boolean:
      return "BOOL";
    case DType::u8:
      return "U8";
    case DType::i32:
      return "I32";
    case DType::i64:
      return "I64";
    case DType::bf16:
      return "BF16";
    case DType::f32:
      return "F32";
    case DType::f64:
      return "F64";
  }
  return "?";
}

using kiln::detail::errno_text;

/// IEEE binary16 bits -> float (exact: every half is a float).
float half_to_float(uint16_t h) {
  uint32_t sign = uint32_t(h >> 15) << 31;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ff;
  uint32_t bits;
  if (exp == 0) {
    // zero or subnormal: mant * 2^-24
    float f = std::ldexp(float(mant), -24);
    return sign ? -f : f;
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (mant << 13);  // inf, or NaN keeping its payload
  } else {
    bits = sign | ((exp - 15 + 127) << 23) | (mant << 13);
  }
  return std::bit_cast<float>(bits);
}

/// Owns a file descriptor: closed on every path out, so errors never leak one.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

// ---------------------------------------------------------------- reading

/// "[op] path: message".
template <class... Args>
[[noreturn]] void fail(const char* op, const std::string& path, fmt::format_string<Args...> f, Args&&... args) {
  throw Error(op, path + ": " + fmt::format(f, std::forward<Args>(args)...));
}

/// A JSON number that is a non-negative integer (nlohmann stores those as unsigned).
bool as_u64(const Json& v, uint64_t& out) {
  if (!v.is_number_unsigned()) return false;
  out = v.get<uint64_t>();
  return true;
}

/// "[op] path: tensor 'name': message".
template <class... Args>
[[noreturn]] void fail_tensor(const char* op, const std::string& path, const std::string& name,
                              fmt::format_string<Args...> f, Args&&... args) {
  fail(op, path, "tensor '{}': {}", name, fmt::format(f, std::forward<Args>(args)...));
}

Entry parse_entry(const char* op, const std::string& path, const std::string& name, const Json& j,
                  uint64_t buffer_size) {
  if (!j.is_object())
    fail_tensor(op, path, name, "entry is {}, not an object with dtype, shape and data_offsets", j.type_name());
  Entry e;
  e.name = name;

  auto dt = j.find("dtype");
  if (dt == j.end() || !dt->is_string()) fail_tensor(op, path, name, "missing \"dtype\" string");
  e.dtype = find_file_dtype(dt->get<std::string>());
  if (!e.dtype)
    fail_tensor(op, path, name, "unsupported dtype '{}' (kiln reads {})", dt->get<std::string>(), kSupportedNames);

  auto sh = j.find("shape");
  if (sh == j.end() || !sh->is_array()) fail_tensor(op, path, name, "missing \"shape\" array");
  // numel, and the product of the non-zero sizes: an empty tensor's strides
  // are still products of the other sizes and must fit in int64 (the fuzzer
  // found [0, 2^62, 2^62] overflowing them).
  int64_t numel = 1, strides_span = 1;
  for (size_t i = 0; i < sh->size(); ++i) {
    uint64_t d;
    if (!as_u64((*sh)[i], d) || d > uint64_t(std::numeric_limits<int64_t>::max()))
      fail_tensor(op, path, name, "shape[{}] is {}, not a non-negative integer", i, brief((*sh)[i]));
    e.shape.push_back(int64_t(d));
    if (__builtin_mul_overflow(numel, int64_t(d), &numel) ||
        __builtin_mul_overflow(strides_span, std::max<int64_t>(int64_t(d), 1), &strides_span))
      fail_tensor(op, path, name, "shape {} overflows the element count", to_string(e.shape));
  }
  int64_t nbytes;
  if (__builtin_mul_overflow(numel, e.dtype->file_itemsize, &nbytes))
    fail_tensor(op, path, name, "shape {} overflows the byte count", to_string(e.shape));

  auto off = j.find("data_offsets");
  if (off == j.end() || !off->is_array() || off->size() != 2 || !as_u64((*off)[0], e.begin) ||
      !as_u64((*off)[1], e.end))
    fail_tensor(op, path, name, "\"data_offsets\" must be two non-negative integers [begin, end], got {}",
                off == j.end() ? std::string("nothing") : brief(*off));
  if (e.begin > e.end) fail_tensor(op, path, name, "data_offsets [{}, {}]: begin is after end", e.begin, e.end);
  if (e.end > buffer_size)
    fail_tensor(op, path, name, "data_offsets [{}, {}]: end is beyond the data buffer of {} bytes", e.begin, e.end,
                buffer_size);
  if (e.end - e.begin != uint64_t(nbytes))
    fail_tensor(op, path, name,
                "data_offsets [{}, {}] hold {} bytes, but shape {} of {} needs {} ({} elements x {} bytes)", e.begin,
                e.end, e.end - e.begin, to_string(e.shape), e.dtype->name, nbytes, numel, e.dtype->file_itemsize);
  return e;
}

/// Builds the header's JSON through nlohmann's SAX interface, which lets it
/// (a) reject duplicate keys, which are legal JSON that a plain parse silently
/// collapses (last wins), and (b) record the top-level keys in header order,
/// at the speed of a plain parse (the callback-filtering parse is ~15x slower).
struct HeaderParser : nlohmann::json_sax<Json> {
  HeaderParser(const char* op, const std::string& path) : op(op), path(path) {}

  const char* op;
  const std::string& path;
  Json root;
  std::vector<Json*> open;            // objects and arrays being filled, outermost first
  Json* slot = nullptr;               // where the next value of an object goes (after its key)
  std::vector<std::string> top_keys;  // keys of the root object, in order
  std::string error;                  // nlohmann's message after a syntax error

  /// Stores a scalar or an empty container at the current position; returns it.
  Json* put(Json v) {
    if (open.empty()) {
      root = std::move(v);
      return &root;
    }
    Json& parent = *open.back();
    if (parent.is_array()) {
      parent.push_back(std::move(v));
      return &parent.back();  // stable: nothing is appended to `parent` while this child is open
    }
    *slot = std::move(v);
    return slot;
  }

  bool null() override { return put(nullptr), true; }
  bool boolean(bool v) override { return put(v), true; }
  bool number_integer(number_integer_t v) override { return put(v), true; }
  bool number_unsigned(number_unsigned_t v) override { return put(v), true; }
  bool number_float(number_float_t v, const string_t&) override { return put(v), true; }
  bool string(string_t& v) override { return put(std::move(v)), true; }
  bool binary(binary_t&) override { return true; }  // JSON text has no binary values
  // A header nests three levels (root, entry, shape); refusing deeper input
  // keeps every later recursion over the JSON (dump() in a message, the
  // destructor) shallow. The fuzzer found a stack overflow without this.
  static constexpr size_t kMaxDepth = 8;
  void check_depth() const {
    if (open.size() >= kMaxDepth) fail(op, path, "header nests JSON more than {} levels deep", kMaxDepth);
  }
  bool start_object(std::size_t) override { return check_depth(), open.push_back(put(Json::object())), true; }
  bool start_array(std::size_t) override { return check_depth(), open.push_back(put(Json::array())), true; }
  bool end_object() override { return open.pop_back(), true; }
  bool end_array() override { return open.pop_back(), true; }

  bool key(string_t& k) override {
    Json& object = *open.back();
    if (object.contains(k)) {
      bool top = open.size() == 1;
      if (top) fail(op, path, "tensor '{}': duplicate name in the header", k);
      if (!root.is_object() || top_keys.empty()) fail(op, path, "duplicate key '{}' in the header", k);
      if (top_keys.back() == kMetadataKey) fail(op, path, "__metadata__: duplicate key '{}'", k);
      fail(op, path, "tensor '{}': duplicate key '{}'", top_keys.back(), k);
    }
    if (open.size() == 1 && root.is_object()) top_keys.push_back(k);
    slot = &object[k];  // std::map: the reference stays valid as keys are added
    return true;
  }

  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) override {
    error = e.what();
    return false;
  }
};

}  // namespace

namespace detail {

FileBytes::~FileBytes() {
  if (mapped_) ::munmap(const_cast<uint8_t*>(data_), size_);
}

FileBytes FileBytes::map_lazily(const char* op, const std::string& path) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) fail(op, path, "cannot open: {}", errno_text(errno));
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) fail(op, path, "cannot stat: {}", errno_text(errno));
  if (!S_ISREG(st.st_mode)) fail(op, path, "not a regular file");
  if (st.st_size == 0) return FileBytes();
  FileBytes f;
  f.size_ = size_t(st.st_size);
  void* p = ::mmap(nullptr, f.size_, PROT_READ, MAP_PRIVATE, fd.get(), 0);
  if (p == MAP_FAILED) fail(op, path, "cannot map {} bytes: {}", f.size_, errno_text(errno));
  f.data_ = static_cast<const uint8_t*>(p);
  f.mapped_ = true;
  return f;
}

FileBytes FileBytes::open(const char* op, const std::string& path) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) fail(op, path, "cannot open: {}", errno_text(errno));
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) fail(op, path, "cannot stat: {}", errno_text(errno));
  if (!S_ISREG(st.st_mode)) fail(op, path, "not a regular file");
  FileBytes f;
  f.size_ = size_t(st.st_size);
  if (f.size_ >= kMapThreshold) {
    // Large files are mapped, not read: their bytes go from the page cache
    // straight into the tensors. (A file truncated in place by another program
    // while mapped would fault; kiln's own saves replace files by rename.)
    // Read-only, and populated in one call: faulting each 4 KiB page in on
    // first touch cost a load of 120 MB about 30% more here.
    void* p = ::mmap(nullptr, f.size_, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd.get(), 0);
    if (p == MAP_FAILED) fail(op, path, "cannot map {} bytes: {}", f.size_, errno_text(errno));
    ::madvise(p, f.size_, MADV_SEQUENTIAL);
    f.data_ = static_cast<const uint8_t*>(p);
    f.mapped_ = true;
    return f;
  }
  f.buffer_.resize(f.size_);
  size_t done = 0;
  while (done < f.size_) {
    ssize_t got = ::pread(fd.get(), f.buffer_.data() + done, f.size_ - done, off_t(done));
    if (got < 0) {
      if (errno == EINTR) continue;
      fail(op, path, "read failed at byte {}: {}", done, errno_text(errno));
    }
    if (got == 0) fail(op, path, "unexpected end of file at byte {} (was it truncated while loading?)", done);
    done += size_t(got);
  }
  f.data_ = f.buffer_.data();
  return f;
}

FileBytes FileBytes::from_memory(const void* data, size_t size) {
  FileBytes f;
  f.buffer_.assign(static_cast<const uint8_t*>(data), static_cast<const uint8_t*>(data) + size);
  f.data_ = f.buffer_.data();
  f.size_ = size;
  return f;
}

Header read_header(const char* op, const std::string& path, const FileBytes& file) {
  uint64_t size = file.size();
  if (size < 8) fail(op, path, "file is {} bytes, shorter than the 8-byte header length", size);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | file.data()[i];
  if (n > kMaxHeaderBytes)
    fail(op, path, "header length {} exceeds the limit of {} bytes (100 MB)", n, kMaxHeaderBytes);
  if (n > size - 8) fail(op, path, "header length {} exceeds the {} bytes after the length field", n, size - 8);
  std::string_view text(reinterpret_cast<const char*>(file.data()) + 8, size_t(n));

  HeaderParser parser(op, path);
  if (!Json::sax_parse(text, &parser)) fail(op, path, "header is not valid JSON: {}", parser.error);
  const Json& j = parser.root;
  const std::vector<std::string>& order = parser.top_keys;
  if (!j.is_object()) fail(op, path, "header is a JSON {}, not an object", j.type_name());

  Header h;
  h.data_start = 8 + n;
  uint64_t buffer_size = size - h.data_start;
  for (const std::string& key : order) {
    const Json& value = j.at(key);
    if (key == kMetadataKey) {
      if (!value.is_object()) fail(op, path, "__metadata__ is {}, not an object of strings", value.type_name());
      for (const auto& [mk, mv] : value.items()) {
        if (!mv.is_string()) fail(op, path, "__metadata__ '{}' is {}, not a string", mk, brief(mv));
        h.metadata.emplace(mk, mv.get<std::string>());
      }
      continue;
    }
    h.entries.push_back(parse_entry(op, path, key, value, buffer_size));
  }

  // The ranges must tile [0, buffer_size): sorted by (begin, end), each starts
  // where the previous ended. Stable sort keeps header order among empty tensors.
  std::stable_sort(h.entries.begin(), h.entries.end(), [](const Entry& a, const Entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t cursor = 0;
  const Entry* prev = nullptr;
  for (const Entry& e : h.entries) {
    if (e.begin < cursor)
      fail(op, path, "tensor '{}': bytes [{}, {}) overlap tensor '{}' [{}, {})", e.name, e.begin, e.end, prev->name,
           prev->begin, prev->end);
    if (e.begin > cursor)
      fail(op, path,
           "tensor '{}': bytes [{}, {}) of the data buffer before it belong to no tensor (the buffer must be fully "
           "covered)",
           e.name, cursor, e.begin);
    if (e.end > cursor || !prev) prev = &e;
    cursor = e.end;
  }
  if (cursor != buffer_size)
    fail(op, path,
         "bytes [{}, {}) at the end of the data buffer belong to no tensor (the buffer must be fully covered)", cursor,
         buffer_size);
  return h;
}

Tensor read_tensor(const char* op, const std::string& path, const FileBytes& file, const Header& h, const Entry& e) {
  Tensor t = Tensor::empty(e.shape, e.dtype->dtype);
  uint64_t nbytes = e.end - e.begin;
  const uint8_t* src = file.data() + h.data_start + e.begin;
  if (std::string_view(e.dtype->name) == "F16") {
    // F16 has no kiln dtype: widen to f32 (exact). memcpy: the bytes may be unaligned.
    float* dst = t.data<float>();
    for (int64_t i = 0; i < t.numel(); ++i) {
      uint16_t half;
      std::memcpy(&half, src + 2 * i, 2);
      dst[i] = half_to_float(half);
    }
  } else if (nbytes > 0) {
    if (e.dtype->dtype == kBool) {
      // A C++ bool must hold 0 or 1; anything else would be undefined behaviour later.
      for (uint64_t i = 0; i < nbytes; ++i)
        if (src[i] > 1) fail(op, path, "tensor '{}': BOOL element {} is {}, not 0 or 1", e.name, i, src[i]);
    }
    std::memcpy(t.data_ptr(), src, nbytes);
  }
  return t;
}

Tensor alias_tensor(const char* op, const std::string& path, const std::shared_ptr<const FileBytes>& file,
                    const Header& h, const Entry& e) {
  const uint8_t* src = entry_bytes(*file, h, e);
  int64_t itemsize = e.dtype->file_itemsize;
  if (e.dtype->dtype == kBool || std::string_view(e.dtype->name) == "F16" || e.end == e.begin ||
      reinterpret_cast<uintptr_t>(src) % uintptr_t(itemsize) != 0)
    return read_tensor(op, path, *file, h, e);
  auto* keep = new std::shared_ptr<const FileBytes>(file);
  auto storage = std::make_shared<Storage>(
      const_cast<uint8_t*>(src), size_t(e.end - e.begin), kCPU,
      [](void*, void* ctx) { delete static_cast<std::shared_ptr<const FileBytes>*>(ctx); }, keep);
  return Tensor::make_view(std::move(storage), e.shape, contiguous_strides(e.shape), 0, e.dtype->dtype);
}

}  // namespace detail

namespace {

// ---------------------------------------------------------------- writing

std::function<void(const std::string&)>& save_hook() {
  static std::function<void(const std::string&)> hook;
  return hook;
}

}  // namespace

namespace detail {
void set_save_hook(std::function<void(const std::string&)> hook) { save_hook() = std::move(hook); }
}  // namespace detail

void save_safetensors(const std::string& path, const nn::StateDict& tensors,
                      const std::map<std::string, std::string>& metadata) {
  constexpr const char* op = "save_safetensors";

  // Header first: every check runs before the file system is touched. Built
  // entry by entry to keep the order: metadata, then the tensors as their bytes follow.
  std::string text = "{";
  auto add = [&](const std::string& key, const auto& value) {
    if (text.size() > 1) text += ',';
    text += Json(key).dump();
    text += ':';
    text += value.dump();
  };
  try {
    if (!metadata.empty()) add(kMetadataKey, Json(metadata));
    uint64_t offset = 0;
    for (const auto& [name, t] : tensors) {
      if (name == kMetadataKey) fail(op, path, "tensor '{}': the name is reserved for metadata", name);
      if (!t.defined()) fail(op, path, "tensor '{}' is undefined", name);
      if (t.device() != kCPU) fail(op, path, "tensor '{}' is on {}; move it to the CPU first", name, t.device().str());
      uint64_t nbytes = uint64_t(t.nbytes());
      // ordered_json: the keys in the reference writer's order.
      add(name, nlohmann::ordered_json{{"dtype", file_dtype_name(t.dtype())},
                                       {"shape", std::vector<int64_t>(t.shape().begin(), t.shape().end())},
                                       {"data_offsets", {offset, offset + nbytes}}});
      offset += nbytes;
    }
  } catch (const Json::exception& e) {
    fail(op, path, "a tensor name or metadata string is not valid UTF-8 ({})", e.what());
  }
  text += '}';
  // Pad with spaces so the data buffer starts 64-byte aligned in the file (the
  // reference writer pads to 8; 64 is a multiple, so its readers are content).
  // A mapping starts on a page, so every tensor whose preceding bytes are a
  // multiple of 64 (all of a model's f32 matrices, in practice) lies on a cache
  // line and io::WeightSource can alias it without a copy. The format allows no
  // gaps between tensors, so an odd-sized tensor shifts the ones after it;
  // those are still aliased when aligned to their element size.
  text.append((64 - (8 + text.size()) % 64) % 64, ' ');
  uint8_t len_bytes[8];
  for (int i = 0; i < 8; ++i) len_bytes[i] = uint8_t(uint64_t(text.size()) >> (8 * i));

  AtomicFile file(op, path);
  file.write(len_bytes, 8);
  file.write(text.data(), text.size());
  for (const auto& [name, t] : tensors) {
    if (t.numel() == 0) continue;
    Tensor c = t.contiguous();  // one tensor at a time: the extra memory is at most the largest tensor
    file.write(c.data_ptr(), size_t(c.nbytes()));
  }
  file.commit(save_hook());
}

nn::StateDict load_safetensors(const std::string& path) {
  constexpr const char* op = "load_safetensors";
  auto file = detail::FileBytes::open(op, path);
  detail::Header h = detail::read_header(op, path, file);
  nn::StateDict out;
  for (const detail::Entry& e : h.entries) out.insert(e.name, detail::read_tensor(op, path, file, h, e));
  return out;
}

std::map<std::string, std::string> read_safetensors_metadata(const std::string& path) {
  constexpr const char* op = "read_safetensors_metadata";
  return detail::read_header(op, path, detail::FileBytes::open(op, path)).metadata;
}

}  // namespace kiln::io
