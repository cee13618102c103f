// Language-model data sets over a text file: each example is a window of
// seq_len tokens and the same window shifted by one (the next-token targets).
//
//   auto text = std::make_shared<data::CharDataset>("tinyshakespeare.txt", 64);  // vocab_size() == 65
//   data::Example e = text->get(0);       // input [64] i64 = tokens[0, 64), target [64] i64 = tokens[1, 65)
//   text->decode(e.input)                 // "First Citizen:\nBefore we proceed any further, hear me speak.\n\nAl"
//   data::DataLoader loader(text, {.batch_size = 32});   // input [32, 64], target [32, 64]
//
// Windows do not overlap: example i covers tokens [i * L, i * L + L] (L =
// seq_len, L + 1 tokens: input the first L, target the last L), so there are
// (T - 1) / L examples of a file of T tokens and the tail that fills no
// window is unused. Shuffling the loader shuffles windows.
//
// ByteDataset: tokens are the file's bytes (vocabulary 0..255), for any file.
// CharDataset: tokens are the file's characters (Unicode code points, the file
// must be valid UTF-8); the vocabulary is its distinct characters sorted by
// code point, so it depends only on the file (Karpathy's char-rnn / nanoGPT
// shakespeare_char: 65 characters for tinyshakespeare).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "kiln/data/dataset.h"

namespace kiln::data {

/// The windows of a token sequence; ByteDataset and CharDataset fill it from a file.
class TokenDataset : public Dataset {
 public:
  int64_t size() const override { return (tokens_.numel() - 1) / seq_len_; }
  /// input [seq_len] i64 = tokens[i*L, i*L+L), target [seq_len] i64 = tokens[i*L+1, i*L+L+1).
  Example get(int64_t index) const override;
  /// out.input and out.target [n, seq_len] i64: two memcpy per example.
  void gather(std::span<const int64_t> indices, Batch& out) const override;

  int64_t seq_len() const { return seq_len_; }
  /// Every token of the file, [T] i64.
  const Tensor& tokens() const { return tokens_; }
  virtual int64_t vocab_size() const = 0;

 protected:
  /// Checks seq_len > 0; the derived constructor then calls set_tokens.
  TokenDataset(const char* op, std::string path, int64_t seq_len);
  /// The file's bytes; a missing or unreadable file is "[op] cannot read <path>: <reason>".
  std::string read_file() const;
  /// Keeps the tokens; fewer than seq_len + 1 is "[op] <path> holds 9 <unit>, fewer than seq_len + 1 = 65".
  void set_tokens(const std::vector<int64_t>& tokens, const char* unit);

  const char* op_;         // "ByteDataset" or "CharDataset", for errors
  std::string gather_op_;  // "<op_>.gather", built once: gather runs every batch
  std::string path_;

 private:
  int64_t seq_len_;
  Tensor tokens_;  // [T] i64, T >= seq_len + 1
};

/// Tokens are bytes 0..255.
class ByteDataset : public TokenDataset {
 public:
  ByteDataset(const std::string& path, int64_t seq_len);
  int64_t vocab_size() const override { return 256; }
  /// The bytes of `text` as ids.
  static std::vector<int64_t> encode(const std::string& text);
  /// Ids 0..255 back to bytes; another id is a kiln::Error.
  static std::string decode(std::span<const int64_t> ids);
  /// The same for a 1-D i64 tensor (a model's output).
  static std::string decode(const Tensor& ids);
};

/// Tokens are the characters of a UTF-8 file, numbered by the sorted vocabulary.
class CharDataset : public TokenDataset {
 public:
  CharDataset(const std::string& path, int64_t seq_len);
  int64_t vocab_size() const override { return int64_t(code_points_.size()); }
  /// The vocabulary, by id: each character as its UTF-8 string ("\n", " ", "!", ..., "z").
  const std::vector<std::string>& vocab() const { return vocab_; }
  /// The ids of the characters of `text` (UTF-8); an invalid byte sequence or
  /// a character outside the vocabulary is a kiln::Error naming it.
  std::vector<int64_t> encode(const std::string& text) const;
  /// Ids back to UTF-8 text; an id outside [0, vocab_size()) is a kiln::Error.
  std::string decode(std::span<const int64_t> ids) const;
  std::string decode(const Tensor& ids) const;

 private:
  std::vector<char32_t> code_points_;  // sorted: id -> code point
  std::vector<std::string> vocab_;     // id -> UTF-8
};

}  // namespace kiln::data
