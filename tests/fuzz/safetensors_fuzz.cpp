// libFuzzer target: the bytes of a file given to every loader of safetensors
// files. A kiln::Error is the expected answer to a bad file; a crash, a
// sanitizer report, a leak, any other exception, or loaders that disagree
// about the same header is a finding. Run it with tools/fuzz (docs/fuzzing.md).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "kiln/core/allocator.h"
#include "kiln/io/safetensors.h"
#include "src/io/checkpoint_format.h"
#include "tests/fuzz/fuzz_util.h"

using kiln::fuzz::accepts;
using kiln::fuzz::InputFile;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static InputFile file;
  const std::string& path = file.write(data, size);

  // One line per loader of untrusted files.
  const bool tensors = accepts([&] { kiln::io::load_safetensors(path); });
  const bool metadata = accepts([&] { kiln::io::read_safetensors_metadata(path); });
  // What Checkpoint::load reads before it touches any object: kiln's metadata,
  // the checksums, and the tensors aliasing the file's bytes.
  const bool checkpoint = accepts([&] {
    namespace d = kiln::io::detail;
    auto bytes = std::make_shared<const d::FileBytes>(d::FileBytes::open("fuzz", path));
    d::Header h = d::read_header("fuzz", path, *bytes);
    d::CheckpointMeta meta = d::parse_metadata("fuzz", path, h);
    d::verify_checksums("fuzz", path, *bytes, h, meta);
    for (const d::Entry& e : h.entries) d::alias_tensor("fuzz", path, bytes, h, e);
    kiln::io::read_checkpoint_info(path);
  });

  // Both validate the same header; only load_safetensors reads the data (and
  // rejects a BOOL byte other than 0 or 1), so it may refuse more, never less.
  if (checkpoint && !metadata) {
    std::fprintf(stderr, "the checkpoint reader accepted a file whose header read_safetensors_metadata refused\n");
    std::abort();
  }
  if (tensors && !metadata) {
    std::fprintf(stderr, "load_safetensors accepted a file whose header read_safetensors_metadata refused\n");
    std::abort();
  }

  // Freed tensor memory goes back to malloc, not to kiln's block cache, so
  // AddressSanitizer sees any later use of it.
  kiln::empty_cache();
  return 0;
}
