// Byte-pair encoding (SPECS D2): merges learned from the 256 byte values up to
// a target vocabulary, encode/decode exact for any bytes, save/load.
// docs/tokenizers.md has the rules (pre-tokenization, tie-break, file format).
//
//   auto bpe = data::BpeTokenizer::train_file("tinyshakespeare.txt", {.vocab_size = 4096});
//   std::vector<int64_t> ids = bpe.encode("To be, or not to be");  // any bytes, invalid UTF-8 too
//   bpe.decode(ids);                                                // "To be, or not to be"
//   bpe.save("shakespeare-4k.json");
//   auto again = data::BpeTokenizer::load("shakespeare-4k.json");
//
// Token i < 256 is byte i; token 256 + r is merge r, the concatenation of its
// two tokens. Training repeatedly merges the most frequent adjacent pair;
// encoding splits the text into chunks (Pretokenizer) and, in each chunk,
// applies the merges in rank order as training learned them.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "kiln/data/tokenizer.h"

namespace kiln::data {

/// How text is cut into chunks before merging; merges never cross a chunk's
/// boundary.
enum class Pretokenizer {
  /// GPT-2's rule on byte classes (split_gpt2): words with their leading
  /// space, digit runs, punctuation runs, whitespace, English contractions.
  gpt2,
  /// The whole text is one chunk: merges may join anything.
  none,
};

/// "gpt2" / "none"; the inverse is an error naming `op` for another string.
const char* to_string(Pretokenizer p);
Pretokenizer pretokenizer_from_string(const std::string& name, const char* op);

/// GPT-2's pre-tokenization regex
///   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
/// with byte classes instead of Unicode ones: a letter is A-Z, a-z or any
/// byte >= 0x80 (so a UTF-8 character, valid or not, is part of a word), a
/// digit 0-9, whitespace one of " \t\n\v\f\r", everything else punctuation.
/// Hand-written (no std::regex); the chunks are views into `text` and
/// concatenate to it exactly.
std::vector<std::string_view> split_gpt2(std::string_view text);

struct BpeOptions {
  /// 256 byte tokens plus vocab_size - 256 merges. Training stops earlier
  /// when no adjacent pair is left (vocab_size() then says how many it found).
  int64_t vocab_size = 4096;
  Pretokenizer pretokenizer = Pretokenizer::gpt2;
};

class BpeTokenizer : public Tokenizer {
 public:
  /// One merge: the two tokens that make token 256 + rank.
  using Merge = std::pair<int32_t, int32_t>;

  /// Learns merges from `text`: each step merges the adjacent pair with the
  /// highest count over all chunks (each occurrence counted, "aaa" holds
  /// "aa" twice); equal counts go to the smallest (left id, right id). An
  /// empty text or vocab_size < 256 is a kiln::Error.
  static BpeTokenizer train(std::string_view text, const BpeOptions& options = {});
  /// The same on a file's bytes.
  static BpeTokenizer train_file(const std::string& path, const BpeOptions& options = {});
  /// Given merges: merge r's ids must be below 256 + r (tokens that exist
  /// before it) and no pair may repeat.
  BpeTokenizer(std::vector<Merge> merges, Pretokenizer pretokenizer = Pretokenizer::gpt2);
  /// A tokenizer_from_json / load_tokenizer of a BPE tokenizer, else a kiln::Error.
  static BpeTokenizer from_json(std::string_view json);
  static BpeTokenizer load(const std::string& path);

  const std::vector<Merge>& merges() const { return merges_; }
  Pretokenizer pretokenizer() const { return pretokenizer_; }

  std::string name() const override { return "bpe"; }
  int64_t vocab_size() const override { return 256 + int64_t(merges_.size()); }
  /// Any bytes; decode(encode(text)) == text.
  std::vector<int64_t> encode(std::string_view text) const override;
  /// {..., "type": "bpe", "pretokenizer": "gpt2", "vocab_size": V,
  ///  "merges": [[l, r], ...], "crc32c": n}: crc32c of the merges as
  /// little-endian i32 pairs.
  std::string to_json() const override;

 private:
  std::string_view token_bytes(int64_t id) const override { return tokens_[size_t(id)]; }

  std::vector<Merge> merges_;
  Pretokenizer pretokenizer_;
  std::vector<std::string> tokens_;  // id -> bytes
  std::unordered_map<uint64_t, int32_t> ranks_;  // (left << 32 | right) -> rank
};

/// A tokenizer of the kind `name` learned from `text`: "byte" (nothing to
/// learn), "char" (CharTokenizer::train) or "bpe" (BpeTokenizer::train with
/// `bpe`); another name is "[train_tokenizer] unknown tokenizer 'x' (byte,
/// char or bpe)". For a command line's --tokenizer (here, not in
/// tokenizer.h, because it needs BpeOptions).
std::unique_ptr<Tokenizer> train_tokenizer(const std::string& name, std::string_view text, const BpeOptions& bpe = {});

}  // namespace kiln::data
