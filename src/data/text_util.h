// Helpers of the text data sets and tokenizers (src/data only): reading a
// whole file, strict UTF-8, the ids of a 1-D i64 tensor, and BPE's pair keys.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/core/tensor.h"

namespace kiln::data::detail {

/// The bytes of a text file, at most io::kMaxTextBytes (1 GiB); a missing,
/// unreadable or larger file is "[op] cannot read <path>: <reason>".
std::string read_file(const char* op, const std::string& path);

/// The code points of UTF-8 `text` (strict, RFC 3629: no stray continuation
/// bytes, truncated sequences, overlong forms, surrogates or code points above
/// U+10FFFF); else "[op] <where> is not valid UTF-8: byte 0xff at offset 3 does
/// not start a character".
std::vector<char32_t> decode_utf8(const char* op, std::string_view text, std::string_view where);

/// One code point as UTF-8.
std::string to_utf8(char32_t cp);

/// A 1-D i64 tensor's values (`keep` holds a contiguous copy when needed);
/// else "[op] ids must be a 1-D i64 tensor, got [2, 2] i64".
std::span<const int64_t> ids_of(const char* op, const Tensor& ids, Tensor& keep);

/// A BPE symbol pair as one 64-bit key (the trainer's pair counts, the
/// tokenizer's merge ranks); comparing keys compares (left, right).
inline uint64_t pair_key(int32_t left, int32_t right) { return uint64_t(uint32_t(left)) << 32 | uint32_t(right); }

}  // namespace kiln::data::detail
