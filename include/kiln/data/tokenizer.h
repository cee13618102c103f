// Tokenizers (SPECS D2): bytes <-> token ids. ByteTokenizer (ids are bytes),
// CharTokenizer (ids number a vocabulary of UTF-8 characters), and
// BpeTokenizer (kiln/data/bpe_tokenizer.h, byte-pair merges over the 256
// bytes). docs/tokenizers.md.
//
//   auto chars = data::CharTokenizer::train(text);     // the text's characters, sorted: 65 for tinyshakespeare
//   std::vector<int64_t> ids = chars.encode("First");  // {18, 47, 56, 57, 58}
//   chars.decode(ids);                                 // "First"
//   chars.save("chars.json");                          // atomic; JSON as to_json()
//   std::unique_ptr<data::Tokenizer> again = data::load_tokenizer("chars.json");
//
// Every tokenizer has a self-describing JSON form, to_json(), which a
// checkpoint's config can carry and tokenizer_from_json() rebuilds:
//   {"format": "kiln.tokenizer", "version": 1, "type": "byte" | "char" | "bpe", ...}
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/core/tensor.h"

namespace kiln::data {

/// Text (any bytes) to ids in [0, vocab_size()) and back.
class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  /// "byte", "char" or "bpe": the "type" of the JSON form.
  virtual std::string name() const = 0;
  virtual int64_t vocab_size() const = 0;
  /// The ids of `text`'s bytes. ByteTokenizer and BpeTokenizer take any
  /// bytes; CharTokenizer needs UTF-8 made of its vocabulary's characters.
  virtual std::vector<int64_t> encode(std::string_view text) const = 0;
  /// The bytes of the ids, concatenated: decode(encode(text)) == text. An id
  /// outside [0, vocab_size()) is "[BpeTokenizer.decode] id 300 at position 1
  /// is outside the vocabulary [0, 260)".
  std::string decode(std::span<const int64_t> ids) const;
  /// The same for a 1-D i64 tensor (a model's output).
  std::string decode(const Tensor& ids) const;
  /// The bytes of one token (a BPE token may end inside a UTF-8 character:
  /// print tokens as they come, the terminal joins the bytes).
  std::string_view token(int64_t id) const;

  /// The self-describing JSON text (one line) that tokenizer_from_json rebuilds.
  virtual std::string to_json() const = 0;
  /// Writes to_json() to `path` atomically (a crash leaves the old file or the new one).
  void save(const std::string& path) const;

 protected:
  /// `class_name` ("BpeTokenizer") starts the ops of errors: "[BpeTokenizer.decode] ...".
  explicit Tokenizer(const char* class_name) : class_name_(class_name) {}
  const char* class_name_;

 private:
  /// token(id) for an id already in range.
  virtual std::string_view token_bytes(int64_t id) const = 0;
};

/// Ids are the bytes 0..255: any text, vocab_size() == 256.
class ByteTokenizer : public Tokenizer {
 public:
  ByteTokenizer() : Tokenizer("ByteTokenizer") {}
  std::string name() const override { return "byte"; }
  int64_t vocab_size() const override { return 256; }
  std::vector<int64_t> encode(std::string_view text) const override;
  /// {"format": "kiln.tokenizer", "version": 1, "type": "byte"}
  std::string to_json() const override;

 private:
  std::string_view token_bytes(int64_t id) const override;
};

/// Ids number a vocabulary of characters (Unicode code points) sorted by code
/// point (Karpathy's char-rnn / nanoGPT shakespeare_char numbering).
class CharTokenizer : public Tokenizer {
 public:
  /// The distinct characters of UTF-8 `text`. Invalid UTF-8 is "[CharTokenizer.train]
  /// the text is not valid UTF-8: byte 0xff at offset 3 does not start a character";
  /// an empty text is an error.
  static CharTokenizer train(std::string_view text);
  /// The vocabulary of `characters`, which must be strictly increasing valid
  /// code points (what train() finds, and what to_json() stores).
  explicit CharTokenizer(std::vector<char32_t> characters);
  /// The vocabulary, by id: each character as its UTF-8 string ("\n", " ", "!", ..., "z").
  const std::vector<std::string>& vocab() const { return vocab_; }

  std::string name() const override { return "char"; }
  int64_t vocab_size() const override { return int64_t(code_points_.size()); }
  /// Invalid UTF-8 or a character outside the vocabulary is a kiln::Error
  /// naming it: "character 'z' (U+007A) at position 2 is not in the vocabulary".
  std::vector<int64_t> encode(std::string_view text) const override;
  /// {..., "type": "char", "vocab": "\n !$&...z", "crc32c": n}: the characters
  /// in id order as one UTF-8 string; crc32c of its bytes.
  std::string to_json() const override;

 private:
  std::string_view token_bytes(int64_t id) const override { return vocab_[size_t(id)]; }

  std::vector<char32_t> code_points_;  // strictly increasing: id -> code point
  std::vector<std::string> vocab_;     // id -> UTF-8
};

/// Rebuilds a tokenizer from its to_json() text. Everything is checked: JSON
/// syntax (a text cut short), "format", "version", "type", each field, the
/// checksum; a bad text is "[tokenizer_from_json] ..." naming the problem.
std::unique_ptr<Tokenizer> tokenizer_from_json(std::string_view json);
/// Reads a file written by Tokenizer::save; errors are "[load_tokenizer] <path>: ...".
std::unique_ptr<Tokenizer> load_tokenizer(const std::string& path);

}  // namespace kiln::data
