// Whole-file reads, strict UTF-8 and tensor ids for src/data/text.cpp and the tokenizers.
#include "src/data/text_util.h"

#include "kiln/core/error.h"
#include "kiln/io/read_file.h"

namespace kiln::data::detail {
namespace {

// The code point starting at s[i], advancing i; -1 for an invalid sequence.
int32_t next_code_point(std::string_view s, size_t& i) {
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

}  // namespace

std::string read_file(const char* op, const std::string& path) {
  return io::read_file(op, path, io::kMaxTextBytes, "a text data set");
}

std::vector<char32_t> decode_utf8(const char* op, std::string_view text, std::string_view where) {
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

std::span<const int64_t> ids_of(const char* op, const Tensor& ids, Tensor& keep) {
  KILN_CHECK(ids.defined() && ids.dim() == 1 && ids.dtype() == kI64, op, "ids must be a 1-D i64 tensor, got {}",
             describe(ids));
  keep = ids.is_contiguous() ? ids : ids.contiguous();
  return {keep.data<int64_t>(), size_t(keep.numel())};
}

}  // namespace kiln::data::detail
