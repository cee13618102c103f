// libFuzzer target: tokenizer JSON (src/data/tokenizer.cpp, bpe_tokenizer.cpp),
// as a text (tokenizer_from_json, BpeTokenizer::from_json) and as a file
// (load_tokenizer). Properties: an accepted tokenizer's to_json() reads back
// to the same JSON, and decode(encode(s)) of a valid text gives s back.
#include <cstdint>
#include <memory>
#include <string>

#include "kiln/core/allocator.h"
#include "kiln/data/bpe_tokenizer.h"
#include "kiln/data/tokenizer.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static kiln::fuzz::InputFile file;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  std::unique_ptr<kiln::data::Tokenizer> tok;
  const bool parsed = kiln::fuzz::accepts([&] { tok = kiln::data::tokenizer_from_json(text); });
  const std::string& path = file.write(data, size);
  const bool loaded = kiln::fuzz::accepts([&] { kiln::data::load_tokenizer(path); });
  kiln::fuzz::require(parsed == loaded, "load_tokenizer and tokenizer_from_json disagree on the same bytes");
  kiln::fuzz::accepts([&] { kiln::data::BpeTokenizer::from_json(text); });
  if (tok) {
    const std::string json = tok->to_json();
    std::unique_ptr<kiln::data::Tokenizer> again;
    kiln::fuzz::require(kiln::fuzz::accepts([&] { again = kiln::data::tokenizer_from_json(json); }),
                        "a tokenizer's own to_json() was refused");
    kiln::fuzz::require(again->to_json() == json, "to_json() does not round-trip");
    const std::string sample = "hello, world";
    kiln::fuzz::accepts([&] {  // a char vocabulary may lack these characters: an error then
      kiln::fuzz::require(tok->decode(tok->encode(sample)) == sample, "decode(encode(s)) != s");
    });
  }
  kiln::empty_cache();
  return 0;
}
