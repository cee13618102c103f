// The Tokenizer interface, ByteTokenizer, CharTokenizer, and the JSON form
// every tokenizer is saved in (docs/tokenizers.md, "Files").
#include "kiln/data/tokenizer.h"

#include <algorithm>
#include <array>

#include "kiln/core/atomic_file.h"
#include "kiln/core/crc32c.h"
#include "kiln/io/read_file.h"
#include "src/data/text_util.h"
#include "src/data/tokenizer_json.h"

namespace kiln::data {

using nlohmann::json;

// ---- Tokenizer ----

std::string Tokenizer::decode(std::span<const int64_t> ids) const {
  std::string out;
  out.reserve(ids.size());
  const int64_t V = vocab_size();
  for (size_t i = 0; i < ids.size(); ++i) {
    KILN_CHECK(ids[i] >= 0 && ids[i] < V, fmt::format("{}.decode", class_name_),
               "id {} at position {} is outside the vocabulary [0, {})", ids[i], i, V);
    out += token_bytes(ids[i]);
  }
  return out;
}

std::string Tokenizer::decode(const Tensor& ids) const {
  Tensor keep;
  return decode(detail::ids_of(fmt::format("{}.decode", class_name_).c_str(), ids, keep));
}

std::string_view Tokenizer::token(int64_t id) const {
  KILN_CHECK(id >= 0 && id < vocab_size(), fmt::format("{}.token", class_name_),
             "id {} is outside the vocabulary [0, {})", id, vocab_size());
  return token_bytes(id);
}

void Tokenizer::save(const std::string& path) const {
  atomic_write(fmt::format("{}.save", class_name_).c_str(), path, to_json() + "\n");
}

// ---- ByteTokenizer ----

std::vector<int64_t> ByteTokenizer::encode(std::string_view text) const {
  std::vector<int64_t> ids(text.size());
  for (size_t i = 0; i < text.size(); ++i) ids[i] = uint8_t(text[i]);
  return ids;
}

std::string ByteTokenizer::to_json() const { return detail::tokenizer_json("byte").dump(); }

std::string_view ByteTokenizer::token_bytes(int64_t id) const {
  // Byte b is the one-byte view at kBytes[b].
  static const std::array<char, 256> kBytes = [] {
    std::array<char, 256> b{};
    for (int i = 0; i < 256; ++i) b[size_t(i)] = char(uint8_t(i));
    return b;
  }();
  return {&kBytes[size_t(id)], 1};
}

// ---- CharTokenizer ----

CharTokenizer::CharTokenizer(std::vector<char32_t> characters) : Tokenizer("CharTokenizer") {
  KILN_CHECK(!characters.empty(), "CharTokenizer", "the vocabulary is empty");
  for (size_t i = 0; i < characters.size(); ++i) {
    const char32_t c = characters[i];
    KILN_CHECK(c <= 0x10FFFF && !(c >= 0xD800 && c <= 0xDFFF), "CharTokenizer",
               "character U+{:04X} at {} is not a Unicode scalar value", uint32_t(c), i);
    KILN_CHECK(i == 0 || characters[i - 1] < c, "CharTokenizer",
               "characters must be distinct and in increasing code point order: U+{:04X} at {} follows U+{:04X}",
               uint32_t(c), i, uint32_t(characters[i - 1]));
  }
  code_points_ = std::move(characters);
  vocab_.reserve(code_points_.size());
  for (char32_t cp : code_points_) vocab_.push_back(detail::to_utf8(cp));
}

CharTokenizer CharTokenizer::train(std::string_view text) {
  constexpr const char* op = "CharTokenizer.train";
  KILN_CHECK(!text.empty(), op, "the text is empty");
  std::vector<char32_t> chars = detail::decode_utf8(op, text, "the text");
  std::sort(chars.begin(), chars.end());
  chars.erase(std::unique(chars.begin(), chars.end()), chars.end());
  return CharTokenizer(std::move(chars));
}

std::vector<int64_t> CharTokenizer::encode(std::string_view text) const {
  constexpr const char* op = "CharTokenizer.encode";
  std::vector<char32_t> chars = detail::decode_utf8(op, text, "the text");
  std::vector<int64_t> ids(chars.size());
  // Binary search in the sorted vocabulary (65 entries for English text).
  for (size_t i = 0; i < chars.size(); ++i) {
    auto it = std::lower_bound(code_points_.begin(), code_points_.end(), chars[i]);
    KILN_CHECK(it != code_points_.end() && *it == chars[i], op,
               "character '{}' (U+{:04X}) at position {} is not in the vocabulary", detail::to_utf8(chars[i]),
               uint32_t(chars[i]), i);
    ids[i] = it - code_points_.begin();
  }
  return ids;
}

std::string CharTokenizer::to_json() const {
  std::string all;
  for (const std::string& c : vocab_) all += c;
  nlohmann::ordered_json j = detail::tokenizer_json("char");
  j["vocab"] = all;
  j["crc32c"] = crc32c(all.data(), all.size());
  return j.dump();
}

// ---- the JSON form ----

namespace detail {

nlohmann::ordered_json tokenizer_json(const char* type) {
  return {{"format", kTokenizerFormat}, {"version", kTokenizerVersion}, {"type", type}};
}

json TokenizerJsonReader::parse(std::string_view text, std::string& type) const {
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded()) fail("not valid JSON (cut short or damaged)");
  if (!j.is_object()) fail("expected a JSON object, got {}", io::detail::brief(j));
  const auto format = j.find("format");
  if (format == j.end() || *format != kTokenizerFormat)
    fail("not a kiln tokenizer: \"format\" is {}, expected \"{}\"",
         format == j.end() ? "missing" : io::detail::brief(*format), kTokenizerFormat);
  const uint64_t version = u64(field(j, "version"), "version");
  if (version != uint64_t(kTokenizerVersion))
    fail("format version {} is not one this kiln reads ({})", version, kTokenizerVersion);
  type = string(field(j, "type"), "type");
  std::vector<const char*> keys;  // the type's own
  if (type == "char") keys = {"vocab", "crc32c"};
  else if (type == "bpe") keys = {"pretokenizer", "vocab_size", "merges", "crc32c"};
  else if (type != "byte") fail("unknown tokenizer type \"{}\" (byte, char or bpe)", type);
  for (const char* k : keys) field(j, k);
  for (const auto& item : j.items()) {
    const std::string& key = item.key();  // not a structured binding: clang 14 (the fuzz build) cannot capture one
    const bool known = key == "format" || key == "version" || key == "type" ||
                       std::any_of(keys.begin(), keys.end(), [&](const char* k) { return key == k; });
    if (!known) fail("unexpected key \"{}\" in a {} tokenizer", key, type);
  }
  return j;
}

const json& TokenizerJsonReader::field(const json& j, const char* key) const {
  const auto it = j.find(key);
  if (it == j.end()) fail("no \"{}\"", key);
  return *it;
}

uint64_t TokenizerJsonReader::u64(const json& j, const char* what) const {
  if (!j.is_number_unsigned()) fail("\"{}\" is {}, expected a non-negative integer", what, io::detail::brief(j));
  return j.get<uint64_t>();
}

const std::string& TokenizerJsonReader::string(const json& j, const char* what) const {
  if (!j.is_string()) fail("\"{}\" is {}, expected a string", what, io::detail::brief(j));
  return j.get_ref<const std::string&>();
}

void TokenizerJsonReader::check_crc(const json& j, uint32_t actual, const char* what) const {
  const uint64_t stored = u64(field(j, "crc32c"), "crc32c");
  if (stored != actual) fail("the {} do not match their crc32c ({:#010x}, stored {:#x}): the file is damaged", what, actual, stored);
}

std::unique_ptr<Tokenizer> from_json(const TokenizerJsonReader& r, std::string_view text) {
  std::string type;
  const json j = r.parse(text, type);
  if (type == "byte") return std::make_unique<ByteTokenizer>();
  if (type == "char") {
    const std::string& all = r.string(j.at("vocab"), "vocab");
    r.check_crc(j, crc32c(all.data(), all.size()), "characters");
    return r.build([&] {
      return std::make_unique<CharTokenizer>(decode_utf8("CharTokenizer", all, "the vocabulary"));
    });
  }
  return std::make_unique<BpeTokenizer>(bpe_from_json(r, j));
}

}  // namespace detail

std::unique_ptr<Tokenizer> tokenizer_from_json(std::string_view json) {
  return detail::from_json({"tokenizer_from_json", ""}, json);
}

std::unique_ptr<Tokenizer> load_tokenizer(const std::string& path) {
  constexpr const char* op = "load_tokenizer";
  return detail::from_json({op, path}, io::read_file(op, path, io::kMaxJsonBytes, "a tokenizer JSON file"));
}

}  // namespace kiln::data
