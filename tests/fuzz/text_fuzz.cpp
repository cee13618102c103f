// libFuzzer target: the text data sets (src/data/text.cpp) over a file's bytes:
// ByteDataset, CharDataset (strict UTF-8) and a TokenDataset with a character
// vocabulary trained on the same text. Properties: every window's tokens are
// in the vocabulary, and a CharDataset's decode gives the text's characters back.
#include <cstdint>
#include <string>

#include "kiln/core/allocator.h"
#include "kiln/data/text.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static kiln::fuzz::InputFile file;
  if (size == 0) return 0;
  const int64_t seq_len = 1 + data[0] % 16;
  const std::string& path = file.write(data + 1, size - 1);
  kiln::fuzz::accepts([&] {
    kiln::data::ByteDataset bytes(path, seq_len);
    kiln::fuzz::require(bytes.size() == int64_t(size - 2) / seq_len, "ByteDataset's size");
    for (int64_t i = 0; i < bytes.size(); ++i) bytes.get(i);
  });
  kiln::fuzz::accepts([&] {
    kiln::data::CharDataset chars(path, seq_len);
    const int64_t V = int64_t(chars.vocab().size());
    for (int64_t i = 0; i < chars.size(); ++i)
      for (int64_t t : chars.get(i).input.to_vector<int64_t>())
        kiln::fuzz::require(t >= 0 && t < V, "a token outside the vocabulary");
    const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
    kiln::fuzz::require(chars.decode(chars.tokens()) == text, "decode(tokens) is not the text");
  });
  kiln::empty_cache();
  return 0;
}
