// GGUF: round trips of every metadata type (nested arrays, strings) and tensor
// type kiln writes, the bytes of the layout, lossless Q8_0/Q4_0 conversion
// to and from kiln's planes, and one test per kind of malformed file.
#include "kiln/io/gguf.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "src/io/gguf_internal.h"
#include "tests/support/io_testing.h"

namespace kiln::io {
namespace {
using namespace kiln::testing;
using VT = GgufValueType;

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() &&
         std::memcmp(a.contiguous().data_ptr(), b.contiguous().data_ptr(), size_t(a.nbytes())) == 0;
}

GgufMetadata every_type() {
  return {
      {"general.architecture", GgufValue::string("kiln-gpt")},
      {"u8", GgufValue::uint(VT::u8, 255)},
      {"i8", GgufValue::sint(VT::i8, -128)},
      {"u16", GgufValue::uint(VT::u16, 65535)},
      {"i16", GgufValue::sint(VT::i16, -32768)},
      {"u32", GgufValue::uint(VT::u32, 4000000000u)},
      {"i32", GgufValue::sint(VT::i32, -2000000000)},
      {"f32", GgufValue::real(VT::f32, 0.5)},
      {"bool", GgufValue::boolean(true)},
      {"u64", GgufValue::uint(VT::u64, ~uint64_t(0))},
      {"i64", GgufValue::sint(VT::i64, INT64_MIN)},
      {"f64", GgufValue::real(VT::f64, 0.1)},
      {"empty string", GgufValue::string("")},
      {"utf8 \xc3\xa9", GgufValue::string("caf\xc3\xa9\n\"q\"")},
      {"tokens", GgufValue::array(VT::string, {GgufValue::string("a"), GgufValue::string(""), GgufValue::string("bc")})},
      {"scores", GgufValue::array(VT::f32, {GgufValue::real(VT::f32, 1.5), GgufValue::real(VT::f32, -2)})},
      {"nested", GgufValue::array(VT::array, {GgufValue::array(VT::i32, {GgufValue::sint(VT::i32, 1)}),
                                              GgufValue::array(VT::string, {GgufValue::string("x")}),
                                              GgufValue::array(VT::u8, {})})},
      {"empty array", GgufValue::array(VT::boolean, {})},
  };
}

class Gguf : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = fresh_dir(); }
  std::string path(const std::string& n) const { return dir_ + "/" + n; }
  std::string dir_;
};

TEST_F(Gguf, RoundTripsEveryMetadataTypeAndTensorType) {
  Generator gen(1);
  Tensor f32 = randn({3, 64}, gen), bf16 = randn({2, 3, 4}, gen, {.dtype = kBF16}), f16 = randn({5, 7}, gen);
  Tensor w = randn({6, 96}, gen);
  nn::QuantizedTensor q8 = nn::quantize(w, nn::QuantType::q8_0), q4 = nn::quantize(w, nn::QuantType::q4_0);
  GgufMetadata md = every_type();
  save_gguf(path("m.gguf"), md,
            {{.name = "f32", .dense = f32},
             {.name = "bf16", .dense = bf16},
             {.name = "f16", .dense = f16, .as_f16 = true},
             {.name = "q8", .quantized = q8},
             {.name = "q4", .quantized = q4, .shape = {2, 3, 96}},
             {.name = "scalar", .dense = tensor(std::vector<float>{2.5f}).reshape({})}});
  GgufFile g = GgufFile::open(path("m.gguf"));
  EXPECT_EQ(g.version(), 3u);
  EXPECT_EQ(g.alignment(), 32u);
  EXPECT_EQ(g.metadata(), md);
  ASSERT_NE(g.find("nested"), nullptr);
  EXPECT_EQ(g.find("nested")->as_array()[1].as_array()[0].as_string(), "x");
  EXPECT_EQ(g.find("u8")->to_string(), "255");
  EXPECT_EQ(g.find("tokens")->to_string(2), R"(["a", "", ... (3 items)])");
  ASSERT_EQ(g.tensors().size(), 6u);
  EXPECT_TRUE(same_bits(g.load("f32"), f32));
  EXPECT_TRUE(same_bits(g.load("bf16"), bf16));
  Tensor f16_back = g.load("f16");
  for (int64_t i = 0; i < f16.numel(); ++i)
    EXPECT_NEAR(f16_back.data<float>()[i], f16.data<float>()[i], 1e-3 * std::fabs(f16.data<float>()[i]) + 1e-7);
  EXPECT_EQ(g.tensor("f16").type, uint32_t(GgmlType::f16));
  EXPECT_EQ(g.tensor("scalar").shape, Shape{});
  EXPECT_EQ(g.load("scalar").item<float>(), 2.5f);
  // Quantized: the planes come back bit for bit (scales are halves both ways).
  for (auto [name, q] : {std::pair{"q8", q8}, std::pair{"q4", q4}}) {
    SCOPED_TRACE(name);
    nn::QuantizedTensor back = g.load_quantized(name);
    EXPECT_EQ(back.type, q.type);
    EXPECT_EQ(back.shape, q.shape);
    EXPECT_TRUE(same_bits(back.codes, q.codes));
    EXPECT_TRUE(same_bits(back.scales, q.scales));
  }
  EXPECT_EQ(g.tensor("q4").shape, (Shape{2, 3, 96}));
  EXPECT_EQ(g.tensor("q8").nbytes, 6u * 3 * 34);
  EXPECT_TRUE(same_bits(g.load_f32("q8"), nn::dequantize(q8)));
  for (const auto& t : g.tensors()) EXPECT_EQ(t.offset % 32, 0u) << t.name;
  EXPECT_KILN_ERROR(g.load("q8"), "load it with GgufFile::load_quantized");
  EXPECT_KILN_ERROR(g.load_quantized("f32"), "not Q8_0 or Q4_0");
  EXPECT_KILN_ERROR(g.tensor("nope"), "no tensor named 'nope'");
}

// The bytes ggml expects: magic, version, counts, a key/value, a tensor info
// with ne[0] innermost, padding to the alignment, the Q8_0 block {f16 d, qs}.
TEST_F(Gguf, WritesGgmlsLayout) {
  Tensor w = Tensor::empty({1, 32}, kF32);
  for (int j = 0; j < 32; ++j) w.data<float>()[j] = float(j - 16);
  save_gguf(path("l.gguf"), {{"general.alignment", GgufValue::uint(VT::u32, 64)}},
            {{.name = "w", .quantized = nn::quantize(w, nn::QuantType::q8_0)}});
  std::string b = read_bytes(path("l.gguf"));
  auto u32 = [&](size_t at) { uint32_t v; std::memcpy(&v, b.data() + at, 4); return v; };
  auto u64 = [&](size_t at) { uint64_t v; std::memcpy(&v, b.data() + at, 8); return v; };
  EXPECT_EQ(b.substr(0, 4), "GGUF");
  EXPECT_EQ(u32(4), 3u);
  EXPECT_EQ(u64(8), 1u);   // tensors
  EXPECT_EQ(u64(16), 1u);  // key/values
  EXPECT_EQ(u64(24), 17u);
  EXPECT_EQ(b.substr(32, 17), "general.alignment");
  EXPECT_EQ(u32(49), 4u);   // UINT32
  EXPECT_EQ(u32(53), 64u);
  EXPECT_EQ(u64(57), 1u);   // name length
  EXPECT_EQ(b[65], 'w');
  EXPECT_EQ(u32(66), 2u);   // dims
  EXPECT_EQ(u64(70), 32u);  // ne[0]: the row length
  EXPECT_EQ(u64(78), 1u);   // ne[1]
  EXPECT_EQ(u32(86), 8u);   // GGML_TYPE_Q8_0
  EXPECT_EQ(u64(90), 0u);   // offset
  ASSERT_EQ(b.size(), 128u + 34u);  // header padded to 64, one block
  uint16_t d;
  std::memcpy(&d, b.data() + 128, 2);
  EXPECT_EQ(d, 0x3008);  // fp16(16 / 127)
  EXPECT_EQ(int8_t(b[130]), -127);
  EXPECT_EQ(int8_t(b[130 + 16]), 0);
  EXPECT_EQ(int8_t(b[130 + 31]), 119);
  GgufFile g = GgufFile::open(path("l.gguf"));
  EXPECT_EQ(g.alignment(), 64u);
}

/// A GGUF file by hand (little-endian pieces).
struct Bytes {
  std::string s;
  Bytes& u32(uint32_t v) { s.append(reinterpret_cast<char*>(&v), 4); return *this; }
  Bytes& u64(uint64_t v) { s.append(reinterpret_cast<char*>(&v), 8); return *this; }
  Bytes& str(const std::string& v) { u64(v.size()); s += v; return *this; }
  Bytes& pad(size_t a) { s.append((a - s.size() % a) % a, '\0'); return *this; }
  Bytes& raw(size_t n) { s.append(n, '\x01'); return *this; }
};

/// Header of one tensor `name` with dims (ne order), type and offset, no metadata.
Bytes one_tensor(std::vector<uint64_t> ne, uint32_t type, uint64_t offset, uint64_t n_kv = 0) {
  Bytes b;
  b.u32(0x46554747).u32(3).u64(1).u64(n_kv);
  b.str("t").u32(uint32_t(ne.size()));
  for (uint64_t d : ne) b.u64(d);
  b.u32(type).u64(offset);
  return b;
}

TEST_F(Gguf, MalformedFilesAreRefusedNamingTheProblem) {
  auto expect = [&](const std::string& bytes, const std::string& message) {
    write_bytes(path("bad.gguf"), bytes);
    EXPECT_KILN_ERROR(GgufFile::open(path("bad.gguf")), message);
    EXPECT_KILN_ERROR(detail::gguf_from_memory("fuzz", bytes.data(), bytes.size()), message);
  };
  expect("GGU", "truncated: magic");
  expect("GGML0000", "not a GGUF file");
  expect(Bytes().u32(0x46554747).u32(1).s, "version 1");
  expect(Bytes().u32(0x46554747).u32(0x03000000).s, "big-endian");
  expect(Bytes().u32(0x46554747).u32(4).u64(0).u64(0).s, "version 4 is not supported");
  expect(Bytes().u32(0x46554747).u32(3).u64(0).u64(1ull << 60).s, "metadata count");
  expect(Bytes().u32(0x46554747).u32(3).u64(1ull << 60).u64(0).s, "tensor count");
  expect(Bytes().u32(0x46554747).u32(3).u64(0).u64(1).str("k").u32(13).u64(0).s, "value type 13 is not a GGUF type");
  expect(Bytes().u32(0x46554747).u32(3).u64(0).u64(1).str("k").u32(8).u64(1000).s, "string length 1000 runs past");
  expect(Bytes().u32(0x46554747).u32(3).u64(0).u64(1).str("k").u32(9).u32(4).u64(1ull << 40).s,
         "array of 1099511627776 UINT32 values cannot fit");
  expect(Bytes().u32(0x46554747).u32(3).u64(0).u64(1).str("k").u32(7).s + "\x02", "BOOL value is 2");
  expect(Bytes().u32(0x46554747).u32(3).u64(0).u64(2).str("k").u32(0).s + "\x01" +
             Bytes().str("k").u32(0).s + "\x01",
         "metadata key 'k' appears twice");
  expect(Bytes().u32(0x46554747).u32(3).u64(0).u64(1).str("general.alignment").u32(4).u32(48).s,
         "general.alignment 48 is not a power of two");
  expect(Bytes().u32(0x46554747).u32(3).u64(0).u64(1).str("general.alignment").u32(10).u64(32).s,
         "general.alignment is UINT64, not UINT32");
  {  // arrays nested 9 deep
    Bytes b;
    b.u32(0x46554747).u32(3).u64(0).u64(1).str("deep").u32(9);
    for (int i = 0; i < 9; ++i) b.u32(9).u64(1);
    b.u32(0).u64(0).raw(64);
    expect(b.s, "nest more than 8 deep");
  }
  expect(one_tensor({32}, 12, 0).pad(32).raw(144).s, "type Q4_K is not supported (kiln reads F32, F16, BF16, Q8_0, Q4_0)");
  expect(one_tensor({32}, 77, 0).pad(32).raw(144).s, "type 77 is not supported");
  expect(one_tensor({4}, 0, 0).pad(32).raw(8).s, "bytes [0, 16) run past the data section of 8 bytes");
  expect(one_tensor({4}, 0, 7).pad(32).raw(64).s, "offset 7 is not a multiple of the alignment 32");
  expect(one_tensor({4}, 0, 1ull << 62).pad(32).raw(64).s, "run past the data section");
  expect(one_tensor({1ull << 40, 1ull << 40}, 0, 0).pad(32).raw(64).s, "dims overflow the element count");
  expect(one_tensor({1ull << 62, 1}, 0, 0).pad(32).raw(64).s, "dims overflow the byte count");
  // Empty, but its strides would overflow (found by the fuzzer).
  expect(one_tensor({1, 1ull << 48, 0, 1ull << 37}, 0, 0).pad(32).raw(64).s, "dims overflow the element count");
  expect(one_tensor({1, 1, 1, 1, 1}, 0, 0).pad(32).raw(64).s, "5 dims, more than GGUF's 4");
  expect(one_tensor({48}, 8, 0).pad(32).raw(64).s, "rows of 48 values are not whole blocks of 32");
  {  // two tensors over the same bytes
    Bytes b;
    b.u32(0x46554747).u32(3).u64(2).u64(0);
    b.str("a").u32(1).u64(8).u32(0).u64(0);
    b.str("b").u32(1).u64(8).u32(0).u64(0);
    b.pad(32).raw(32);
    expect(b.s, "overlap tensor");
    Bytes c;
    c.u32(0x46554747).u32(3).u64(2).u64(0);
    c.str("a").u32(1).u64(8).u32(0).u64(0);
    c.str("a").u32(1).u64(8).u32(0).u64(32);
    c.pad(32).raw(64);
    expect(c.s, "tensor 'a' appears twice");
  }
  // Every truncation of a valid file is an error, never a crash.
  Generator gen(2);
  save_gguf(path("ok.gguf"), every_type(),
            {{.name = "x", .dense = randn({2, 32}, gen)},
             {.name = "q", .quantized = nn::quantize(randn({2, 32}, gen), nn::QuantType::q4_0)}});
  std::string ok = read_bytes(path("ok.gguf"));
  EXPECT_NO_THROW(detail::gguf_from_memory("fuzz", ok.data(), ok.size()));
  for (size_t n = 0; n < ok.size(); ++n)
    EXPECT_THROW(detail::gguf_from_memory("fuzz", ok.data(), n), Error) << "truncated to " << n;
}

/// What kiln writes, as @huggingface/gguf reports it (tools/gguf_crosscheck.mjs):
/// value types by number, 64-bit integers as strings, arrays with their subType.
nlohmann::json crosscheck_json(const GgufValue& v) {
  switch (v.type) {
    case VT::u64:
      return std::to_string(v.as_uint());
    case VT::i64:
      return std::to_string(v.as_int());
    case VT::array: {
      nlohmann::json a = nlohmann::json::array();
      for (const auto& item : v.as_array()) a.push_back(crosscheck_json(item));
      return a;
    }
    case VT::string:
      return v.as_string();
    case VT::boolean:
      return v.as_bool();
    case VT::f32:
    case VT::f64:
      return v.as_double();
    case VT::i8:
    case VT::i16:
    case VT::i32:
      return v.as_int();
    default:
      return v.as_uint();
  }
}

// A file with every metadata type and every tensor type, committed with the
// JSON of what it holds: tests/io/gguf_crosscheck_test.py reads it with the
// independent @huggingface/gguf (when node has it) and compares. This test
// keeps the committed bytes what save_gguf writes; KILN_REGENERATE_GOLDENS=1
// rewrites both files.
TEST_F(Gguf, WritesTheCommittedCrossCheckFile) {
  Tensor x = Tensor::empty({2, 64}, kF32);
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = float(std::sin(double(i) * 0.37) * (1 + i % 7));
  GgufMetadata md = every_type();
  md.emplace_back("general.alignment", GgufValue::uint(VT::u32, 64));
  std::vector<GgufWriteTensor> ts{{.name = "f32", .dense = x},
                                  {.name = "f16", .dense = x.slice(1, 0, 8), .as_f16 = true},
                                  {.name = "bf16", .dense = x.to(kBF16).reshape({2, 4, 16})},
                                  {.name = "q8_0", .quantized = nn::quantize(x, nn::QuantType::q8_0)},
                                  {.name = "q4_0", .quantized = nn::quantize(x, nn::QuantType::q4_0)}};
  save_gguf(path("x.gguf"), md, ts);
  std::string golden_gguf = std::string(KILN_GOLDEN_DIR) + "/io_gguf_kiln_written.gguf";
  std::string golden_json = std::string(KILN_GOLDEN_DIR) + "/io_gguf_kiln_written.json";
  if (std::getenv("KILN_REGENERATE_GOLDENS")) {
    std::filesystem::copy_file(path("x.gguf"), golden_gguf, std::filesystem::copy_options::overwrite_existing);
    GgufFile g = GgufFile::open(golden_gguf);
    nlohmann::json j;
    for (const auto& [k, v] : g.metadata()) {
      j["metadata"][k] = {{"type", uint32_t(v.type)}, {"value", crosscheck_json(v)}};
      if (v.type == VT::array) j["metadata"][k]["subType"] = uint32_t(v.elem_type);
    }
    for (const auto& t : g.tensors()) {
      nlohmann::json shape = nlohmann::json::array();
      for (size_t d = t.shape.size(); d-- > 0;) shape.push_back(std::to_string(t.shape[d]));  // ne[0] first
      j["tensors"].push_back({{"name", t.name}, {"shape", shape}, {"dtype", t.type}, {"offset", std::to_string(t.offset)}});
    }
    std::string bytes = read_bytes(golden_gguf);
    uint64_t data_start = bytes.size() - (g.tensors().back().offset + g.tensors().back().nbytes);
    j["tensorDataOffset"] = std::to_string(data_start);
    write_bytes(golden_json, j.dump(1) + "\n");
  }
  EXPECT_EQ(read_bytes(path("x.gguf")), read_bytes(golden_gguf)) << "save_gguf no longer writes " << golden_gguf;
}

// The fuzz target's seeds are written by an independent writer
// (tests/fuzz/make_gguf_corpus.py, Python's struct): the valid ones load with
// the values it wrote, the bad_ ones are refused.
TEST_F(Gguf, ReadsTheFilesOfAnIndependentWriter) {
  std::string dir = std::string(KILN_SOURCE_DIR) + "/tests/fuzz/corpus/gguf";
  int valid = 0, bad = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    std::string name = e.path().filename().string();
    SCOPED_TRACE(name);
    if (name.rfind("bad_", 0) == 0) {
      EXPECT_THROW(GgufFile::open(e.path().string()), Error);
      ++bad;
      continue;
    }
    GgufFile g = GgufFile::open(e.path().string());
    for (const auto& t : g.tensors()) g.load_f32(t.name);
    ++valid;
  }
  EXPECT_EQ(valid, 5);
  EXPECT_EQ(bad, 9);
  GgufFile every = GgufFile::open(dir + "/every_value_type.gguf");
  EXPECT_EQ(every.find("general.architecture")->as_string(), "gpt2");
  EXPECT_EQ(every.find("i16")->as_int(), -300);
  EXPECT_EQ(every.find("u64")->as_uint(), uint64_t(1) << 63);
  EXPECT_EQ(every.find("f64")->as_double(), 1e300);
  EXPECT_EQ(every.find("nested")->to_string(), R"([[1, 2], ["x"], []])");
  EXPECT_EQ(every.find("tokens")->as_array()[2].as_string(), "\xc3\xa9");
  GgufFile types = GgufFile::open(dir + "/every_tensor_type.gguf");
  EXPECT_EQ(types.tensor("four").shape, (Shape{2, 1, 2, 1}));
  EXPECT_EQ(types.tensor("q8").shape, (Shape{2, 32}));
  nn::QuantizedTensor q = types.load_quantized("q8");
  EXPECT_EQ(q.scales.data<float>()[1], 1.0f);
  EXPECT_EQ(GgufFile::open(dir + "/version2.gguf").version(), 2u);
}

// tests/fuzz/crashes/gguf_empty_tensor_stride_overflow.gguf (its README).
TEST_F(Gguf, FuzzReproducerIsRefused) {
  EXPECT_KILN_ERROR(
      GgufFile::open(std::string(KILN_SOURCE_DIR) + "/tests/fuzz/crashes/gguf_empty_tensor_stride_overflow.gguf"),
      "tensor 'four': dims overflow the element count");
}

TEST_F(Gguf, WriterChecksEverythingBeforeCreatingTheFile) {
  Generator gen(3);
  Tensor x = randn({2, 32}, gen);
  auto refused = [&](const GgufMetadata& md, const std::vector<GgufWriteTensor>& ts, const std::string& message) {
    EXPECT_KILN_ERROR(save_gguf(path("w.gguf"), md, ts), message);
    EXPECT_FALSE(std::filesystem::exists(path("w.gguf")));
  };
  refused({{"k", GgufValue::uint(VT::u8, 256)}}, {}, "256 does not fit in UINT8");
  refused({{"k", GgufValue::sint(VT::u32, 1)}}, {}, "must hold an unsigned integer");
  refused({{"k", GgufValue::array(VT::u8, {GgufValue::string("x")})}}, {}, "an array of UINT8 holds a STRING value");
  refused({{"k", GgufValue::boolean(true)}, {"k", GgufValue::boolean(false)}}, {}, "appears twice");
  refused({{"general.alignment", GgufValue::uint(VT::u32, 3)}}, {}, "power-of-two UINT32");
  refused({}, {{.name = "a", .dense = x}, {.name = "a", .dense = x}}, "tensor 'a' appears twice");
  refused({}, {{.name = "i", .dense = tensor(std::vector<int64_t>{1})}}, "tensor 'i' is i64");
  refused({}, {{.name = "u", .dense = Tensor()}}, "tensor 'u' is undefined");
  refused({}, {{.name = "h", .dense = x.to(kBF16), .as_f16 = true}}, "as_f16 needs an f32 tensor");
  refused({}, {{.name = "q", .quantized = nn::quantize(x, nn::QuantType::q8_0), .shape = {3, 32}}},
          "does not match the quantized matrix");
}

}  // namespace
}  // namespace kiln::io
