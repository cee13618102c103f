// The "__metadata__" of a kiln checkpoint as a struct, and the checksums:
// parsing, validation and printing, with no knowledge of modules or
// optimizers (so the fuzz target links it with kiln_core alone). The keys and
// their JSON: docs/checkpoints.md.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "kiln/core/generator.h"
#include "kiln/core/rngs.h"
#include "kiln/io/checkpoint.h"
#include "src/io/safetensors_internal.h"

namespace kiln::io::detail {

// Version 2 added "kiln.header_crc32c" (NOTE [Header checksum]); version 1
// files, written before it, are still read, without that check.
constexpr int64_t kFormatVersion = 2;

/// What the header checksum covers of one tensor besides its bytes.
struct TensorSignature {
  std::string name;
  DType dtype;
  Shape shape;
};

struct CheckpointMeta {
  int64_t format_version = 0;  // 0: no kiln metadata (a plain weights file)
  std::string config;          // JSON text, "" when none
  bool has_progress = false;
  Progress progress;
  std::vector<std::string> models;                // tensor-name prefixes ("" for top level)
  std::map<std::string, std::string> optimizers;  // prefix -> optimizer name ("AdamW")
  std::map<std::string, std::map<std::string, double>> schedulers;
  std::map<std::string, std::map<std::string, Rngs::Stream>> rngs;
  std::map<std::string, GeneratorState> generators;  // "<model prefix.><module path>.<name>"
  std::map<std::string, State> states;
  std::map<std::string, uint32_t> crc32c;  // tensor name -> checksum of its bytes in the file
};

/// The metadata entries of `meta`, "kiln."-prefixed, plus "format": "pt" and
/// the header checksum over them and the file's `tensors`.
std::map<std::string, std::string> to_metadata(const CheckpointMeta& meta,
                                               const std::vector<TensorSignature>& tensors);

/// Parses and checks the kiln entries of a validated header: every entry well
/// formed, (for kiln files) a checksum for exactly the header's tensors, and
/// (version 2) the header checksum.
/// Throws "[op] path: metadata 'kiln.progress': ...".
CheckpointMeta parse_metadata(const char* op, const std::string& path, const Header& header);

/// Recomputes every tensor's CRC32C from the file's bytes and compares.
void verify_checksums(const char* op, const std::string& path, const FileBytes& file, const Header& header,
                      const CheckpointMeta& meta);

/// read_checkpoint_info on bytes already read (the fuzz target's entry point).
CheckpointInfo checkpoint_info(const char* op, const std::string& path, const FileBytes& file);

}  // namespace kiln::io::detail
