// Byte- and character-level language-model data sets: a file's tokens cut
// into non-overlapping windows of seq_len + 1 (input, and target shifted by one).
#include "kiln/data/text.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "kiln/core/error.h"
#include "src/data/batch_checks.h"

namespace kiln::data {
namespace {

// Strict UTF-8 (RFC 3629): the code point starting at s[i], advancing i; -1 for
// an invalid sequence (a stray continuation byte, a truncated sequence, an
// overlong form, a surrogate, beyond U+10FFFF).
int32_t next_code_point(const std::string& s, size_t& i) {
  const auto byte = [&](size_t k) { return uint8_t(s[k]); };
  const uint8_t b0 = byte(i);
  if (b0 < 0x80) {
    ++i;
    return b0;
  }
  int len;
  int32_t cp, min;
  if ((b0 & 0xE0) == 0xC0) {
    len = 2, cp = b0 & 0x1F, min = 0x80;
  } else if ((b0 & 0xF0) == 0xE0) {
    len = 3, cp = b0 & 0x0F, min = 0x800;
  } else if ((b0 & 0xF8) == 0xF0) {
    len = 4, cp = b0 & 0x07, min = 0x10000;
  } else {
    return -1;
  }
  if (i + size_t(len) > s.size()) return -1;
  for (int k = 1; k < len; ++k) {
    const uint8_t b = byte(i + size_t(k));
    if ((b & 0xC0) != 0x80) return -1;
    cp = cp << 6 | (b & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return -1;
  i += size_t(len);
  return cp;
}

std::string to_utf8(char32_t cp) {
  std::string out;
  if (cp < 0x80) {
    out += char(cp);
  } else if (cp < 0x800) {
    out += char(0xC0 | (cp >> 6));
    out += char(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += char(0xE0 | (cp >> 12));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  } else {
    out += char(0xF0 | (cp >> 18));
    out += char(0x80 | ((cp >> 12) & 0x3F));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  }
  return out;
}

// The code points of UTF-8 `text`, or an error naming the first bad byte.
std::vector<char32_t> decode_utf8(const char* op, const std::string& text, const std::string& where) {
  std::vector<char32_t> out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const size_t at = i;
    const int32_t cp = next_code_point(text, i);
    KILN_CHECK(cp >= 0, op, "{} is not valid UTF-8: byte 0x{:02x} at offset {} does not start a character", where,
               uint8_t(text[at]), at);
    out.push_back(char32_t(cp));
  }
  return out;
}

// A 1-D i64 tensor's values.
std::span<const int64_t> ids_of(const char* op, const Tensor& ids, Tensor& keep) {
  KILN_CHECK(ids.defined() && ids.dim() == 1 && ids.dtype() == kI64, op, "ids must be a 1-D i64 tensor, got {}",
             describe(ids));
  keep = ids.is_contiguous() ? ids : ids.contiguous();
  return {keep.data<int64_t>(), size_t(keep.numel())};
}

}  // namespace

// ---- TokenDataset ----

TokenDataset::TokenDataset(const char* op, std::string path, int64_t seq_len)
    : op_(op), gather_op_(fmt::format("{}.gather", op)), path_(std::move(path)), seq_len_(seq_len) {
  KILN_CHECK(seq_len > 0, op, "seq_len must be positive, got {}", seq_len);
}

std::string TokenDataset::read_file() const {
  std::error_code ec;
  KILN_CHECK(std::filesystem::exists(path_, ec), op_, "cannot read {}: no such file", path_);
  KILN_CHECK(!std::filesystem::is_directory(path_, ec), op_, "cannot read {}: it is a folder", path_);
  std::ifstream in(path_, std::ios::binary);
  KILN_CHECK(in.good(), op_, "cannot read {}: {}", path_, std::strerror(errno));
  std::ostringstream bytes;
  bytes << in.rdbuf();
  return std::move(bytes).str();
}

void TokenDataset::set_tokens(const std::vector<int64_t>& tokens, const char* unit) {
  KILN_CHECK(int64_t(tokens.size()) >= seq_len_ + 1, op_, "{} holds {} {}, fewer than seq_len + 1 = {}", path_,
             tokens.size(), unit, seq_len_ + 1);
  tokens_ = Tensor::empty({int64_t(tokens.size())}, kI64);
  std::copy(tokens.begin(), tokens.end(), tokens_.data<int64_t>());
}

Example TokenDataset::get(int64_t index) const {
  KILN_CHECK(index >= 0 && index < size(), fmt::format("{}.get", op_), "index {} is out of range for {} examples",
             index, size());
  const int64_t start = index * seq_len_;
  return {Tensor::make_view(tokens_.storage(), {seq_len_}, {1}, start, kI64),
          Tensor::make_view(tokens_.storage(), {seq_len_}, {1}, start + 1, kI64)};
}

void TokenDataset::gather(std::span<const int64_t> indices, Batch& out) const {
  const char* op = gather_op_.c_str();
  const int64_t n = int64_t(indices.size()), size = this->size();
  const int64_t row[] = {seq_len_};
  check_batch_part(op, "input", out.input, n, row, kI64);
  check_batch_part(op, "target", out.target, n, row, kI64);
  const int64_t* tokens = tokens_.data<int64_t>();
  int64_t* in = out.input.data<int64_t>();
  int64_t* tgt = out.target.data<int64_t>();
  const size_t bytes = size_t(seq_len_) * sizeof(int64_t);
  for (int64_t k = 0; k < n; ++k) {
    const int64_t i = indices[size_t(k)];
    KILN_CHECK(i >= 0 && i < size, op, "index {} is out of range for {} examples", i, size);
    std::memcpy(in + k * seq_len_, tokens + i * seq_len_, bytes);
    std::memcpy(tgt + k * seq_len_, tokens + i * seq_len_ + 1, bytes);
  }
}

// ---- ByteDataset ----

ByteDataset::ByteDataset(const std::string& path, int64_t seq_len) : TokenDataset("ByteDataset", path, seq_len) {
  set_tokens(encode(read_file()), "bytes");
}

std::vector<int64_t> ByteDataset::encode(const std::string& text) {
  std::vector<int64_t> ids(text.size());
  for (size_t i = 0; i < text.size(); ++i) ids[i] = uint8_t(text[i]);
  return ids;
}

std::string ByteDataset::decode(std::span<const int64_t> ids) {
  std::string out(ids.size(), '\0');
  for (size_t i = 0; i < ids.size(); ++i) {
    KILN_CHECK(ids[i] >= 0 && ids[i] < 256, "ByteDataset.decode", "id {} at position {} is not a byte (0..255)", ids[i],
               i);
    out[i] = char(uint8_t(ids[i]));
  }
  return out;
}

std::string ByteDataset::decode(const Tensor& ids) {
  Tensor keep;
  return decode(ids_of("ByteDataset.decode", ids, keep));
}

// ---- CharDataset ----

CharDataset::CharDataset(const std::string& path, int64_t seq_len) : TokenDataset("CharDataset", path, seq_len) {
  std::vector<char32_t> chars = decode_utf8(op_, read_file(), path_);
  code_points_ = chars;
  std::sort(code_points_.begin(), code_points_.end());
  code_points_.erase(std::unique(code_points_.begin(), code_points_.end()), code_points_.end());
  vocab_.reserve(code_points_.size());
  for (char32_t cp : code_points_) vocab_.push_back(to_utf8(cp));
  // Ids by binary search in the sorted vocabulary (65 entries for English text).
  std::vector<int64_t> ids(chars.size());
  for (size_t i = 0; i < chars.size(); ++i)
    ids[i] = std::lower_bound(code_points_.begin(), code_points_.end(), chars[i]) - code_points_.begin();
  set_tokens(ids, "characters");
}

std::vector<int64_t> CharDataset::encode(const std::string& text) const {
  constexpr const char* op = "CharDataset.encode";
  std::vector<char32_t> chars = decode_utf8(op, text, "the text");
  std::vector<int64_t> ids(chars.size());
  for (size_t i = 0; i < chars.size(); ++i) {
    auto it = std::lower_bound(code_points_.begin(), code_points_.end(), chars[i]);
    KILN_CHECK(it != code_points_.end() && *it == chars[i], op,
               "character '{}' (U+{:04X}) at position {} is not in the vocabulary of {}", to_utf8(chars[i]),
               uint32_t(chars[i]), i, path_);
    ids[i] = it - code_points_.begin();
  }
  return ids;
}

std::string CharDataset::decode(std::span<const int64_t> ids) const {
  std::string out;
  out.reserve(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    KILN_CHECK(ids[i] >= 0 && ids[i] < vocab_size(), "CharDataset.decode",
               "id {} at position {} is outside the vocabulary [0, {})", ids[i], i, vocab_size());
    out += vocab_[size_t(ids[i])];
  }
  return out;
}

std::string CharDataset::decode(const Tensor& ids) const {
  Tensor keep;
  return decode(ids_of("CharDataset.decode", ids, keep));
}

}  // namespace kiln::data
