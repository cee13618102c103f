// libFuzzer target: the bytes of a GGUF file given to kiln's GGUF reader
// (src/io/gguf.cpp) through the file path and from memory. A kiln::Error is
// the expected answer to a bad file; a crash, a sanitizer report, a leak, any
// other exception, or the two paths disagreeing is a finding. Every tensor of
// an accepted file is read (dense or quantized), so a header that validates
// with a range outside the file is caught by AddressSanitizer. Run it with
// tools/fuzz (docs/fuzzing.md).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "kiln/core/allocator.h"
#include "kiln/io/gguf.h"
#include "src/io/gguf_internal.h"
#include "tests/fuzz/fuzz_util.h"

using kiln::fuzz::accepts;
using kiln::fuzz::InputFile;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static InputFile file;
  const std::string& path = file.write(data, size);
  namespace d = kiln::io::detail;

  const bool mapped = accepts([&] {
    auto g = std::make_shared<const d::GgufData>(d::open_gguf("fuzz", path));
    for (size_t i = 0; i < g->meta.tensors.size(); ++i) {
      uint32_t type = g->meta.tensors[i].type;
      if (type == uint32_t(kiln::io::GgmlType::q8_0) || type == uint32_t(kiln::io::GgmlType::q4_0))
        d::gguf_load_quantized("fuzz", *g, i);
      else
        d::gguf_load_dense("fuzz", g, i);
    }
    for (const auto& [key, value] : g->meta.metadata) value.to_string();
  });
  const bool memory = accepts([&] { d::gguf_from_memory("fuzz", data, size); });
  kiln::fuzz::require(mapped == memory, "the mapped and in-memory GGUF readers disagree");

  kiln::empty_cache();
  return 0;
}
