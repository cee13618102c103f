// libFuzzer target: CausalLMConfig's JSON (src/models/causal_lm_config.cpp),
// what `kiln generate` reads from a checkpoint. Property: an accepted config
// is valid and its to_json() reads back to itself.
#include <cstdint>
#include <string>

#include "kiln/models/causal_lm.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  kiln::models::CausalLMConfig c;
  if (kiln::fuzz::accepts([&] { c = kiln::models::CausalLMConfig::from_json(text); })) {
    kiln::fuzz::require(kiln::fuzz::accepts([&] { c.validate(); }), "an accepted config does not validate");
    const std::string json = c.to_json();
    kiln::models::CausalLMConfig again;
    kiln::fuzz::require(kiln::fuzz::accepts([&] { again = kiln::models::CausalLMConfig::from_json(json); }),
                        "a config's own to_json() was refused");
    kiln::fuzz::require(again.to_json() == json, "to_json() does not round-trip");
    kiln::fuzz::require(c.hidden() > 0, "hidden() is not positive");
  }
  return 0;
}
