// libFuzzer target: the bytes of an ONNX file given to kiln's ONNX reader
// (src/io/onnx.cpp) through the file path and from memory. protobuf's own
// parser (Debian's libprotobuf, not instrumented) decodes the message; what is
// fuzzed is kiln's conversion after it: tensor payloads against their dims,
// types, attributes, the graph's definitions. A kiln::Error is the expected
// answer to a bad file; a crash, a sanitizer report, a leak, another exception
// or the two paths disagreeing is a finding. Every accepted tensor is read
// whole, so a payload shorter than its dims is caught by AddressSanitizer.
// Run it with tools/fuzz (docs/fuzzing.md).
#include <cstdint>
#include <string>

#include "kiln/io/onnx.h"
#include "tests/fuzz/fuzz_util.h"

using kiln::fuzz::accepts;
using kiln::fuzz::InputFile;

namespace {
uint64_t touch(const kiln::Tensor& t) {
  uint64_t h = 0;
  if (!t.defined() || t.numel() == 0) return h;
  const auto* p = static_cast<const uint8_t*>(t.data_ptr());
  for (int64_t i = 0; i < t.nbytes(); ++i) h = h * 31 + p[i];
  return h;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static InputFile file;
  const std::string& path = file.write(data, size);
  uint64_t h_file = 0, h_mem = 0;
  auto read_all = [](const kiln::io::OnnxModelFile& f, uint64_t& h) {
    for (const auto& [name, t] : f.initializers) h += touch(t);
    for (const auto& n : f.nodes)
      for (const auto& a : n.attributes) h += touch(a.t);
    for (const auto& v : f.inputs) h += v.describe().size();
    for (const auto& v : f.outputs) h += v.describe().size();
  };
  const bool from_file = accepts([&] { read_all(kiln::io::read_onnx(path), h_file); });
  const bool from_memory = accepts([&] {
    read_all(kiln::io::parse_onnx(std::string(reinterpret_cast<const char*>(data), size), "fuzz"), h_mem);
  });
  kiln::fuzz::require(from_file == from_memory && h_file == h_mem, "the file and in-memory ONNX readers disagree");
  // A TensorProto on its own (the backend tests' .pb files) through the same checks.
  accepts([&] { touch(kiln::io::read_onnx_tensor(path).second); });
  return 0;
}
