// libFuzzer target: a checkpoint folder's record, checkpoints.json
// (src/io/checkpoint_manager.cpp). Opening the folder reads it; a damaged
// record is rebuilt from the checkpoint files (none here), a mismatch of
// monitor or a newer version is an error. Properties: an opened manager lists
// only steps >= 0, and its best is one of them or none.
#include <cstdint>
#include <string>

#include "kiln/io/checkpoint_manager.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& dir = kiln::fuzz::scratch_dir();
  const std::string record = dir + "/" + kiln::io::CheckpointManager::kIndexName;
  kiln::fuzz::write_file(record, std::string_view(reinterpret_cast<const char*>(data), size));
  kiln::fuzz::accepts([&] {
    kiln::io::CheckpointManager manager(dir, {.keep_last = 2, .monitor = "val/loss"});
    for (const auto& e : manager.entries()) kiln::fuzz::require(e.step >= 0, "a negative step was listed");
    kiln::fuzz::require(!manager.latest().has_value(), "a checkpoint listed that no file backs");
    kiln::fuzz::require(!manager.best().has_value(), "a best checkpoint that no file backs");
  });
  return 0;
}
