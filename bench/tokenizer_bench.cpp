// BPE tokenizer (SPECS D2) on tinyshakespeare (1,115,394 bytes): training a
// 4096-token vocabulary and encoding / decoding the whole file with it.
// PyTorch has no tokenizer (Debian's python3-torch ships none), so the torch
// column is null.
//
//   bpe_train_4k       train    ms per BpeTokenizer::train_file (read + split + 3840 merges)
//   bpe_train_4k_none  train    the same with pretokenizer "none" (the file is one chunk)
//   bpe_encode_4k      encode   MB/s of BpeTokenizer::encode over the file (1 MB = 1e6 bytes)
//                      decode   MB/s of decode of those ids back to the file
//                      bytes_per_token  the file's bytes over its tokens
// The file is $KILN_TEXT_DATA_DIR/tinyshakespeare.txt, else
// ../shared/data/tinyshakespeare.txt (bench/run runs in the checkout); without
// it these benches print nothing.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "bench/bench.h"
#include "kiln/kiln.h"

namespace bench {
namespace {

std::string corpus_path() {
  const char* dir = std::getenv("KILN_TEXT_DATA_DIR");
  return std::string(dir && *dir ? dir : "../shared/data") + "/tinyshakespeare.txt";
}

bool have_corpus(const std::string& name) {
  if (std::filesystem::exists(corpus_path())) return true;
  std::fprintf(stderr, "%s: no %s (set KILN_TEXT_DATA_DIR); skipped\n", name.c_str(), corpus_path().c_str());
  return false;
}

void bench_train(const std::string& name, kiln::data::Pretokenizer pre) {
  if (!have_corpus(name)) return;
  const std::string path = corpus_path();
  const double sec = seconds_per_call(
      [&] { kiln::data::BpeTokenizer::train_file(path, {.vocab_size = 4096, .pretokenizer = pre}); }, 1.0);
  emit(name, "train", "ms/train", sec * 1e3);
}

void bench_encode(const std::string& name) {
  if (!have_corpus(name)) return;
  std::ifstream in(corpus_path(), std::ios::binary);
  std::ostringstream bytes;
  bytes << in.rdbuf();
  const std::string text = std::move(bytes).str();
  const auto bpe = kiln::data::BpeTokenizer::train(text, {.vocab_size = 4096});
  std::vector<int64_t> ids;
  const double enc = seconds_per_call([&] { ids = bpe.encode(text); }, 0.5);
  const double dec = seconds_per_call([&] { std::string s = bpe.decode(ids); }, 0.5);
  const double mb = double(text.size()) * 1e-6;
  emit(name, "encode", "MB/s", mb / enc);
  emit(name, "decode", "MB/s", mb / dec);
  emit(name, "bytes_per_token", "bytes/token", double(text.size()) / double(ids.size()));
}

}  // namespace

void tokenizer_benches(std::vector<Bench>& out) {
  out.push_back({"bpe_train_4k", [](const std::string& n) { bench_train(n, kiln::data::Pretokenizer::gpt2); }});
  out.push_back({"bpe_train_4k_none", [](const std::string& n) { bench_train(n, kiln::data::Pretokenizer::none); }});
  out.push_back({"bpe_encode_4k", bench_encode});
}

}  // namespace bench
