// Language-model data sets: a file's tokens (any Tokenizer's, bytes or
// characters) cut into non-overlapping windows of seq_len + 1 (input, and
// target shifted by one).
#include "kiln/data/text.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "kiln/core/error.h"
#include "src/data/batch_checks.h"
#include "src/data/text_util.h"

namespace kiln::data {
namespace {

// Runs `f` for the data set `op` over `path`; a kiln::Error thrown inside (the
// tokenizer's) is rethrown naming both: "[CharDataset] t.txt: [CharTokenizer.train] ...".
template <class F>
auto for_file(const char* op, const std::string& path, F&& f) {
  try {
    return f();
  } catch (const Error& e) {
    throw Error(op, fmt::format("{}: {}", path, e.what()), e.file(), e.line());
  }
}

std::shared_ptr<const Tokenizer> checked(const char* op, std::shared_ptr<const Tokenizer> tokenizer) {
  KILN_CHECK(tokenizer != nullptr, op, "the tokenizer is null");
  return tokenizer;
}

}  // namespace

// ---- TokenDataset ----

TokenDataset::TokenDataset(const char* op, std::string path, int64_t seq_len)
    : op_(op), gather_op_(fmt::format("{}.gather", op)), path_(std::move(path)), seq_len_(seq_len) {
  KILN_CHECK(seq_len > 0, op, "seq_len must be positive, got {}", seq_len);
}

TokenDataset::TokenDataset(const std::string& path, std::shared_ptr<const Tokenizer> tokenizer, int64_t seq_len)
    : TokenDataset("TokenDataset", path, seq_len) {
  set_tokens(checked(op_, std::move(tokenizer)), read_file(), "tokens");
}

TokenDataset::TokenDataset(std::vector<int64_t> tokens, std::shared_ptr<const Tokenizer> tokenizer, int64_t seq_len)
    : TokenDataset("TokenDataset", "the token sequence", seq_len) {
  tokenizer_ = checked(op_, std::move(tokenizer));
  const int64_t V = tokenizer_->vocab_size();
  for (size_t i = 0; i < tokens.size(); ++i)
    KILN_CHECK(tokens[i] >= 0 && tokens[i] < V, op_, "token {} at position {} is outside the {} vocabulary [0, {})",
               tokens[i], i, tokenizer_->name(), V);
  keep_tokens(tokens, "tokens");
}

std::string TokenDataset::read_file() const { return detail::read_file(op_, path_); }

void TokenDataset::set_tokens(std::shared_ptr<const Tokenizer> tokenizer, std::string_view text, const char* unit) {
  tokenizer_ = std::move(tokenizer);
  keep_tokens(for_file(op_, path_, [&] { return tokenizer_->encode(text); }), unit);
}

void TokenDataset::keep_tokens(const std::vector<int64_t>& tokens, const char* unit) {
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
  set_tokens(std::make_shared<ByteTokenizer>(), read_file(), "bytes");
}

std::vector<int64_t> ByteDataset::encode(std::string_view text) { return ByteTokenizer().encode(text); }

std::string ByteDataset::decode(std::span<const int64_t> ids) { return ByteTokenizer().decode(ids); }

std::string ByteDataset::decode(const Tensor& ids) { return ByteTokenizer().decode(ids); }

// ---- CharDataset ----

CharDataset::CharDataset(const std::string& path, int64_t seq_len) : TokenDataset("CharDataset", path, seq_len) {
  const std::string text = read_file();
  auto chars = for_file(op_, path_, [&] { return std::make_shared<CharTokenizer>(CharTokenizer::train(text)); });
  set_tokens(std::move(chars), text, "characters");
}

const std::vector<std::string>& CharDataset::vocab() const {
  return static_cast<const CharTokenizer&>(*tokenizer()).vocab();
}

}  // namespace kiln::data
