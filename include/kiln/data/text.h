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
// TokenDataset: the tokens are any Tokenizer's encoding of the file
// (kiln/data/tokenizer.h, e.g. a BpeTokenizer), or a given token sequence.
// ByteDataset: tokens are the file's bytes (ByteTokenizer, vocabulary 0..255),
// for any file.
// CharDataset: tokens are the file's characters (a CharTokenizer trained on
// the file, which must be valid UTF-8); the vocabulary is its distinct
// characters sorted by code point, so it depends only on the file
// (Karpathy's char-rnn / nanoGPT shakespeare_char: 65 characters for
// tinyshakespeare).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/data/dataset.h"
#include "kiln/data/tokenizer.h"

namespace kiln::data {

/// The windows of a token sequence and the tokenizer that made it.
class TokenDataset : public Dataset {
 public:
  /// The windows of `path`'s bytes encoded by `tokenizer`:
  ///   auto bpe = std::make_shared<data::BpeTokenizer>(data::BpeTokenizer::train_file(path, {.vocab_size = 4096}));
  ///   data::TokenDataset text(path, bpe, 64);
  /// A tokenizer error is "[TokenDataset] <path>: [CharTokenizer.encode] ...".
  TokenDataset(const std::string& path, std::shared_ptr<const Tokenizer> tokenizer, int64_t seq_len);
  /// The windows of `tokens`, ids of `tokenizer` (one part of a file's
  /// encoding: a train / validation split); an id outside the vocabulary is an error.
  TokenDataset(std::vector<int64_t> tokens, std::shared_ptr<const Tokenizer> tokenizer, int64_t seq_len);

  int64_t size() const override { return (tokens_.numel() - 1) / seq_len_; }
  /// input [seq_len] i64 = tokens[i*L, i*L+L), target [seq_len] i64 = tokens[i*L+1, i*L+L+1).
  Example get(int64_t index) const override;
  /// out.input and out.target [n, seq_len] i64: two memcpy per example.
  void gather(std::span<const int64_t> indices, Batch& out) const override;

  int64_t seq_len() const { return seq_len_; }
  /// Every token of the file, [T] i64.
  const Tensor& tokens() const { return tokens_; }
  const std::shared_ptr<const Tokenizer>& tokenizer() const { return tokenizer_; }
  int64_t vocab_size() const { return tokenizer_->vocab_size(); }
  /// The tokenizer's encode and decode.
  std::vector<int64_t> encode(std::string_view text) const { return tokenizer_->encode(text); }
  std::string decode(std::span<const int64_t> ids) const { return tokenizer_->decode(ids); }
  std::string decode(const Tensor& ids) const { return tokenizer_->decode(ids); }

 protected:
  /// Checks seq_len > 0; the derived constructor then calls read_file and set_tokens.
  TokenDataset(const char* op, std::string path, int64_t seq_len);
  /// The file's bytes; a missing or unreadable file is "[op] cannot read <path>: <reason>".
  std::string read_file() const;
  /// Keeps the tokenizer and `text`'s encoding; fewer than seq_len + 1 tokens
  /// is "[op] <path> holds 9 <unit>, fewer than seq_len + 1 = 65".
  void set_tokens(std::shared_ptr<const Tokenizer> tokenizer, std::string_view text, const char* unit);

  const char* op_;         // "TokenDataset", "ByteDataset" or "CharDataset", for errors
  std::string gather_op_;  // "<op_>.gather", built once: gather runs every batch
  std::string path_;

 private:
  void keep_tokens(const std::vector<int64_t>& tokens, const char* unit);

  int64_t seq_len_;
  std::shared_ptr<const Tokenizer> tokenizer_;
  Tensor tokens_;  // [T] i64, T >= seq_len + 1
};

/// Tokens are bytes 0..255 (ByteTokenizer).
class ByteDataset : public TokenDataset {
 public:
  ByteDataset(const std::string& path, int64_t seq_len);
  /// ByteTokenizer's encode and decode, without a data set.
  static std::vector<int64_t> encode(std::string_view text);
  static std::string decode(std::span<const int64_t> ids);
  static std::string decode(const Tensor& ids);
};

/// Tokens are the characters of a UTF-8 file, numbered by the sorted
/// vocabulary: a CharTokenizer trained on the file (tokenizer()).
class CharDataset : public TokenDataset {
 public:
  CharDataset(const std::string& path, int64_t seq_len);
  /// The vocabulary, by id: each character as its UTF-8 string ("\n", " ", "!", ..., "z").
  const std::vector<std::string>& vocab() const;
};

}  // namespace kiln::data
