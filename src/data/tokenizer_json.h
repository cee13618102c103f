// The tokenizers' JSON form (src/data only): the envelope every type shares,
// {"format": "kiln.tokenizer", "version": 1, "type": ...}, and a reader whose
// errors name the op and the file.
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "kiln/core/error.h"
#include "kiln/data/bpe_tokenizer.h"
#include "kiln/io/json_util.h"

namespace kiln::data::detail {

inline constexpr const char* kTokenizerFormat = "kiln.tokenizer";
inline constexpr int64_t kTokenizerVersion = 1;

/// The envelope of a tokenizer's JSON, in this key order; the type adds its fields.
nlohmann::ordered_json tokenizer_json(const char* type);

/// Checks a tokenizer's JSON text; every error is "[op] <where>: ..." (or
/// "[op] ..." when `where` is empty, a text rather than a file).
class TokenizerJsonReader {
 public:
  TokenizerJsonReader(const char* op, std::string where) : op_(op), where_(std::move(where)) {}

  template <class... Args>
  [[noreturn]] void fail(fmt::format_string<Args...> f, Args&&... args) const {
    std::string message = fmt::format(f, std::forward<Args>(args)...);
    throw Error(op_, where_.empty() ? message : where_ + ": " + message);
  }
  /// Parses `text` and checks the envelope: a JSON object (a text cut short
  /// is not), "format" and "version" this kiln reads, a known "type", and
  /// only the keys `type` has. Returns the object; *type is set.
  nlohmann::json parse(std::string_view text, std::string& type) const;
  const nlohmann::json& field(const nlohmann::json& j, const char* key) const;
  uint64_t u64(const nlohmann::json& j, const char* what) const;
  const std::string& string(const nlohmann::json& j, const char* what) const;
  /// j["crc32c"] must equal `actual` (the checksum of what was read).
  void check_crc(const nlohmann::json& j, uint32_t actual, const char* what) const;
  /// Runs `build` (a constructor that validates); its kiln::Error is rethrown
  /// as this reader's: "[load_tokenizer] t.json: [BpeTokenizer] merge 3 ...".
  template <class F>
  auto build(F&& f) const {
    try {
      return f();
    } catch (const Error& e) {
      fail("{}", e.what());
    }
  }

 private:
  const char* op_;
  std::string where_;
};

/// The tokenizer of a JSON text (tokenizer.cpp).
std::unique_ptr<Tokenizer> from_json(const TokenizerJsonReader& r, std::string_view text);
/// The BPE tokenizer of a checked envelope (bpe_tokenizer.cpp).
BpeTokenizer bpe_from_json(const TokenizerJsonReader& r, const nlohmann::json& j);

}  // namespace kiln::data::detail
