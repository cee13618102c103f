// safetensors: round trips of every dtype and layout, a file written by Python,
// one test per kind of corrupt file, and atomic saves.
#include "kiln/io/safetensors.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <nlohmann/json.hpp>

#include "src/io/safetensors_internal.h"
#include "tests/support/io_testing.h"

namespace kiln::io {
namespace {
using namespace testing;
namespace fs = std::filesystem;

std::string u64_le(uint64_t n) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[size_t(i)] = char(uint8_t(n >> (8 * i)));
  return s;
}

/// A safetensors file by hand: length field, header text as given, data bytes.
std::string file_bytes(const std::string& header, const std::string& data) {
  return u64_le(header.size()) + header + data;
}

/// Every test gets a fresh folder under the system's temp dir.
class Safetensors : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() / fmt::format("kiln_io_{}_{}", ::getpid(), info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    detail::set_save_hook({});
    fs::permissions(dir_, fs::perms::owner_all, fs::perm_options::add);
    fs::remove_all(dir_);
  }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  std::vector<std::string> files() const {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(dir_)) out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
  }

  /// Writes `header` + `data` as a file and expects load_safetensors to fail with
  /// "[load_safetensors] <path>: <message>".
  void expect_load_error(const std::string& header, const std::string& data, const std::string& message) {
    std::string p = path("bad.safetensors");
    write_bytes(p, file_bytes(header, data));
    EXPECT_KILN_ERROR(load_safetensors(p), "[load_safetensors] " + p + ": " + message);
  }

  fs::path dir_;
};

void expect_same(const nn::StateDict& got, const nn::StateDict& want) {
  ASSERT_EQ(got.keys(), want.keys());
  for (const auto& [name, t] : want) {
    SCOPED_TRACE(name);
    const Tensor& g = got.at(name);
    EXPECT_EQ(g.shape(), t.shape());
    EXPECT_TRUE(g.is_contiguous());
    EXPECT_TRUE(equal(g, t));
  }
}

nn::StateDict every_dtype() {
  Generator gen(7);
  Tensor f32 = randn({3, 4}, gen);
  f32.data<float>()[1] = std::numeric_limits<float>::quiet_NaN();
  f32.data<float>()[2] = -std::numeric_limits<float>::infinity();
  f32.data<float>()[3] = -0.0f;
  return nn::StateDict{
      {"layer.weight", f32},
      {"layer.bias", randn({4}, gen, {.dtype = kF64})},
      {"emb.bf16", to(randn({2, 3}, gen), kBF16)},
      {"i32", tensor(std::vector<int32_t>{-2147483647 - 1, -1, 0, 2147483647})},
      {"i64", tensor(std::vector<int64_t>{int64_t(1) << 40, -(int64_t(1) << 52), 0, 7}, {2, 2})},
      {"u8", tensor(std::vector<uint8_t>{0, 1, 128, 255})},
      {"mask", tensor(std::vector<bool>{true, false, false, true, true}, {5, 1})},
      {"scalar", scalar_tensor(2.5)},
      {"empty", zeros({0, 3})},
      {"empty_i64", zeros({0}, {.dtype = kI64})},
      {"step", scalar_tensor(int64_t(12345), {.dtype = kI64})},
  };
}

TEST_F(Safetensors, RoundTripsEveryDTypeWithMetadata) {
  nn::StateDict sd = every_dtype();
  std::map<std::string, std::string> meta{{"format", "pt"}, {"epoch", "3"}, {"note", "ünïcode, \"quotes\"\n"}};
  save_safetensors(path("a.safetensors"), sd, meta);
  expect_same(load_safetensors(path("a.safetensors")), sd);
  EXPECT_EQ(read_safetensors_metadata(path("a.safetensors")), meta);
  EXPECT_EQ(load_safetensors(path("a.safetensors")).at("i64").dtype(), kI64);
}

TEST_F(Safetensors, RoundTripsNonContiguousTensors) {
  Generator gen(3);
  Tensor base = randn({4, 6}, gen, {.dtype = kF64});
  nn::StateDict sd{
      {"transposed", base.t()},
      {"strided", base.slice(1, 0, 6, 2)},
      {"permuted", noncontiguous(randn({2, 3, 4}, gen))},
      {"expanded", tensor({1.0f, 2.0f, 3.0f}).unsqueeze(0).expand({4, 3})},
      {"bf16_t", to(randn({3, 5}, gen), kBF16).t()},
  };
  for (const auto& [name, t] : sd) {
    if (name != "expanded") {
      ASSERT_FALSE(t.is_contiguous()) << name;
    }
  }
  save_safetensors(path("nc.safetensors"), sd);
  expect_same(load_safetensors(path("nc.safetensors")), sd);
  // A dense file: exactly the bytes of the logical tensors, nothing of the bases.
  int64_t data = 0;
  for (const auto& [name, t] : sd) data += t.nbytes();
  auto bytes = read_bytes(path("nc.safetensors"));
  uint64_t n;
  std::memcpy(&n, bytes.data(), 8);
  EXPECT_EQ(int64_t(bytes.size()), 8 + int64_t(n) + data);
}

TEST_F(Safetensors, EmptyStateDictAndLargeTensor) {
  save_safetensors(path("e.safetensors"), {}, {{"k", "v"}});
  EXPECT_TRUE(load_safetensors(path("e.safetensors")).empty());
  EXPECT_EQ(read_safetensors_metadata(path("e.safetensors")).at("k"), "v");
  save_safetensors(path("none.safetensors"), {});
  EXPECT_TRUE(read_safetensors_metadata(path("none.safetensors")).empty());

  Generator gen(1);
  nn::StateDict big{{"w", randn({512, 1031}, gen)}, {"b", randn({1031}, gen, {.dtype = kF64})}};
  save_safetensors(path("big.safetensors"), big);
  expect_same(load_safetensors(path("big.safetensors")), big);
}

// The layout the reference writer produces: metadata first, tensors in order,
// header padded with spaces (data 64-byte aligned), data little-endian and dense.
TEST_F(Safetensors, WritesTheReferenceLayout) {
  nn::StateDict sd{{"z", tensor({1.0f, -2.0f})}, {"a", tensor(std::vector<int64_t>{258})}};
  save_safetensors(path("l.safetensors"), sd, {{"format", "pt"}});
  std::string bytes = read_bytes(path("l.safetensors"));
  uint64_t n;
  std::memcpy(&n, bytes.data(), 8);
  EXPECT_EQ(n % 8, 0u);
  std::string header = bytes.substr(8, n);
  EXPECT_EQ(header.front(), '{');
  std::string trimmed = header.substr(0, header.find_last_not_of(' ') + 1);
  EXPECT_EQ(trimmed,
            R"({"__metadata__":{"format":"pt"},"z":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
            R"("a":{"dtype":"I64","shape":[1],"data_offsets":[8,16]}})");
  // Padded so the data starts 64-byte aligned (a multiple of the reference's 8).
  EXPECT_EQ(header.size() - trimmed.size(), (64 - ((8 + trimmed.size()) % 64)) % 64);
  EXPECT_EQ((8 + n) % 64, 0u);
  std::string data = bytes.substr(8 + n);
  ASSERT_EQ(data.size(), 16u);
  float f[2];
  std::memcpy(f, data.data(), 8);
  EXPECT_EQ(f[0], 1.0f);
  EXPECT_EQ(f[1], -2.0f);
  EXPECT_EQ(uint8_t(data[8]), 2);  // 258 = 0x0102, low byte first
  EXPECT_EQ(uint8_t(data[9]), 1);
}

// tests/goldens/torch_tensors.safetensors is written by tools/goldens/io.py
// (tools/goldens/safetensors_util.py) from PyTorch tensors; torch_tensors.json
// holds their values (F16 as the f32 it loads as).
TEST_F(Safetensors, LoadsAFileWrittenByPython) {
  std::string file = std::string(KILN_GOLDEN_DIR) + "/torch_tensors.safetensors";
  const auto& g = golden("torch_tensors");
  nn::StateDict sd = load_safetensors(file);
  std::vector<std::string> names;
  for (const auto& t : g.at("tensors")) names.push_back(t.at("name").get<std::string>());
  EXPECT_EQ(sd.keys(), names);
  for (const auto& t : g.at("tensors")) {
    SCOPED_TRACE(t.at("name").get<std::string>());
    EXPECT_TRUE(equal(sd.at(t.at("name").get<std::string>()), golden_tensor(t.at("value"))));
  }
  EXPECT_EQ(read_safetensors_metadata(file), (g.at("metadata").get<std::map<std::string, std::string>>()));
}

TEST_F(Safetensors, F16LoadsAsF32) {
  // 1, -2, 65504 (max), 2^-24 (smallest subnormal), -0, inf, 6.1035e-05 (smallest normal)
  std::vector<uint16_t> h{0x3c00, 0xc000, 0x7bff, 0x0001, 0x8000, 0x7c00, 0x0400, 0x7e00};
  std::string data(reinterpret_cast<const char*>(h.data()), h.size() * 2);
  std::string header = R"({"h":{"dtype":"F16","shape":[2,4],"data_offsets":[0,16]}})";
  write_bytes(path("h.safetensors"), file_bytes(header, data));
  Tensor t = load_safetensors(path("h.safetensors")).at("h");
  EXPECT_EQ(t.dtype(), kF32);
  EXPECT_EQ(t.shape(), (Shape{2, 4}));
  auto v = t.to_vector<float>();
  EXPECT_EQ(v[0], 1.0f);
  EXPECT_EQ(v[1], -2.0f);
  EXPECT_EQ(v[2], 65504.0f);
  EXPECT_EQ(v[3], std::ldexp(1.0f, -24));
  EXPECT_EQ(v[4], 0.0f);
  EXPECT_TRUE(std::signbit(v[4]));
  EXPECT_EQ(v[5], std::numeric_limits<float>::infinity());
  EXPECT_EQ(v[6], std::ldexp(1.0f, -14));
  EXPECT_TRUE(std::isnan(v[7]));
}

TEST_F(Safetensors, AcceptsUnpaddedHeadersAndAnyKeyOrder) {
  // Other writers may skip padding and order the header differently from the data.
  std::string data(12, '\0');
  float one = 1.0f;
  std::memcpy(&data[8], &one, 4);
  write_bytes(path("u.safetensors"),
              file_bytes(R"({"b":{"dtype":"F32","shape":[],"data_offsets":[8,12]},)"
                         R"("a":{"dtype":"I64","shape":[1],"data_offsets":[0,8]},"__metadata__":{}})",
                         data));
  nn::StateDict sd = load_safetensors(path("u.safetensors"));
  EXPECT_EQ(sd.keys(), (std::vector<std::string>{"a", "b"}));  // file (byte) order
  EXPECT_EQ(sd.at("b").dim(), 0);
  EXPECT_EQ(sd.at("b").item<float>(), 1.0f);

  // Empty tensors share an offset; among them the header's order is kept.
  write_bytes(path("e.safetensors"),
              file_bytes(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                         R"("z":{"dtype":"F32","shape":[0,5],"data_offsets":[4,4]},)"
                         R"("a":{"dtype":"I64","shape":[3,0],"data_offsets":[4,4]}})",
                         std::string(4, '\0')));
  sd = load_safetensors(path("e.safetensors"));
  EXPECT_EQ(sd.keys(), (std::vector<std::string>{"w", "z", "a"}));
  EXPECT_EQ(sd.at("a").shape(), (Shape{3, 0}));
  EXPECT_EQ(sd.at("a").dtype(), kI64);
}

// ---- corrupt files: one test per check, each message names what is wrong

const std::string kF32x2 = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";

TEST_F(Safetensors, RejectsFileShorterThanLengthField) {
  write_bytes(path("s.safetensors"), std::string("\x08\0\0\0\0", 5));
  EXPECT_KILN_ERROR(load_safetensors(path("s.safetensors")),
                    "[load_safetensors] " + path("s.safetensors") +
                        ": file is 5 bytes, shorter than the 8-byte header length");
}

TEST_F(Safetensors, RejectsHeaderLengthBeyondFile) {
  write_bytes(path("bad.safetensors"), u64_le(1000) + kF32x2);
  EXPECT_KILN_ERROR(load_safetensors(path("bad.safetensors")),
                    ": header length 1000 exceeds the " + std::to_string(kF32x2.size()) + " bytes after");
}

TEST_F(Safetensors, RejectsHeaderLengthOver100MB) {
  write_bytes(path("bad.safetensors"), u64_le(200ull << 20) + kF32x2);
  EXPECT_KILN_ERROR(load_safetensors(path("bad.safetensors")), "exceeds the limit of 104857600 bytes (100 MB)");
  write_bytes(path("bad.safetensors"), u64_le(~0ull) + kF32x2);
  EXPECT_KILN_ERROR(load_safetensors(path("bad.safetensors")), "(100 MB)");
}

TEST_F(Safetensors, RejectsInvalidJson) {
  expect_load_error(R"({"a":{"dtype":"F32",)", std::string(8, '\0'), "header is not valid JSON: ");
  expect_load_error("", "", "header is not valid JSON: ");
  expect_load_error("{\"a\xff\":1}", "", "header is not valid JSON: ");  // not UTF-8
}

TEST_F(Safetensors, RejectsHeaderThatIsNotAnObject) {
  expect_load_error("[1, 2]  ", "", "header is a JSON array, not an object");
}

TEST_F(Safetensors, RejectsNonObjectEntries) {
  expect_load_error(R"({"a":[0,8]})", std::string(8, '\0'), "tensor 'a': entry is array, not an object");
  expect_load_error(R"({"__metadata__":"x"})", "", "__metadata__ is string, not an object of strings");
  expect_load_error(R"({"__metadata__":{"epoch":3}})", "", "__metadata__ 'epoch' is 3, not a string");
}

TEST_F(Safetensors, RejectsMissingOrUnknownDType) {
  expect_load_error(R"({"a":{"dtype":"F8_E4M3","shape":[8],"data_offsets":[0,8]}})", std::string(8, '\0'),
                    "tensor 'a': unsupported dtype 'F8_E4M3' (kiln reads BOOL, U8, I32, I64, BF16, F16, F32, F64)");
  expect_load_error(R"({"a":{"shape":[2],"data_offsets":[0,8]}})", std::string(8, '\0'),
                    "tensor 'a': missing \"dtype\" string");
  expect_load_error(R"({"a":{"dtype":4,"shape":[2],"data_offsets":[0,8]}})", std::string(8, '\0'),
                    "tensor 'a': missing \"dtype\" string");
}

TEST_F(Safetensors, RejectsNegativeOrNonIntegerShape) {
  expect_load_error(R"({"a":{"dtype":"F32","shape":[2,-1],"data_offsets":[0,8]}})", std::string(8, '\0'),
                    "tensor 'a': shape[1] is -1, not a non-negative integer");
  expect_load_error(R"({"a":{"dtype":"F32","shape":[2.0],"data_offsets":[0,8]}})", std::string(8, '\0'),
                    "tensor 'a': shape[0] is 2.0, not a non-negative integer");
  expect_load_error(R"({"a":{"dtype":"F32","shape":2,"data_offsets":[0,8]}})", std::string(8, '\0'),
                    "tensor 'a': missing \"shape\" array");
  expect_load_error(R"({"a":{"dtype":"F32","shape":[9223372036854775808],"data_offsets":[0,8]}})",
                    std::string(8, '\0'), "tensor 'a': shape[0] is 9223372036854775808, not a non-negative integer");
}

TEST_F(Safetensors, RejectsOverflowingShape) {
  expect_load_error(R"({"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]}})",
                    std::string(8, '\0'), "tensor 'a': shape [4294967296, 4294967296] overflows the element count");
  expect_load_error(R"({"a":{"dtype":"F64","shape":[2305843009213693952],"data_offsets":[0,8]}})",
                    std::string(8, '\0'), "tensor 'a': shape [2305843009213693952] overflows the byte count");
}

TEST_F(Safetensors, RejectsDataOffsetsThatAreNotTwoIntegers) {
  const std::string data(8, '\0');
  const std::string want = "tensor 'a': \"data_offsets\" must be two non-negative integers [begin, end], got ";
  expect_load_error(R"({"a":{"dtype":"F32","shape":[2]}})", data, want + "nothing");
  expect_load_error(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8]}})", data, want + "[8]");
  expect_load_error(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8,8]}})", data, want + "[0, 8, 8]");
  expect_load_error(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,"8"]}})", data, want + "[0, \"8\"]");
  expect_load_error(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[-8,0]}})", data, want + "[-8, 0]");
  expect_load_error(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":{"begin":0}}})", data, want);
}

TEST_F(Safetensors, RejectsBeginAfterEnd) {
  expect_load_error(R"({"a":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}})", std::string(8, '\0'),
                    "tensor 'a': data_offsets [8, 0]: begin is after end");
}

TEST_F(Safetensors, RejectsEndBeyondBuffer) {
  expect_load_error(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", std::string(8, '\0'),
                    "tensor 'a': data_offsets [0, 16]: end is beyond the data buffer of 8 bytes");
}

TEST_F(Safetensors, RejectsByteSizeThatDoesNotMatchShape) {
  expect_load_error(R"({"a":{"dtype":"F64","shape":[2],"data_offsets":[0,8]}})", std::string(8, '\0'),
                    "tensor 'a': data_offsets [0, 8] hold 8 bytes, but shape [2] of F64 needs 16 (2 elements x 8 bytes)");
}

TEST_F(Safetensors, RejectsOverlappingRanges) {
  expect_load_error(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                    R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                    std::string(12, '\0'), "tensor 'b': bytes [4, 12) overlap tensor 'a' [0, 8)");
  // Two tensors on the same bytes.
  expect_load_error(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                    R"("b":{"dtype":"I32","shape":[2],"data_offsets":[0,8]}})",
                    std::string(8, '\0'), "tensor 'b': bytes [0, 8) overlap tensor 'a' [0, 8)");
}

TEST_F(Safetensors, RejectsGapsInTheBuffer) {
  expect_load_error(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                    R"("b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
                    std::string(12, '\0'),
                    "tensor 'b': bytes [4, 8) of the data buffer before it belong to no tensor");
  expect_load_error(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", std::string(8, '\0'),
                    "tensor 'a': bytes [0, 4) of the data buffer before it belong to no tensor");
  expect_load_error(kF32x2, std::string(12, '\0'),
                    "bytes [8, 12) at the end of the data buffer belong to no tensor (the buffer must be fully covered)");
}

TEST_F(Safetensors, RejectsDuplicateNames) {
  expect_load_error(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                    R"("a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                    std::string(8, '\0'), "tensor 'a': duplicate name in the header");
  expect_load_error(R"({"a":{"dtype":"F32","dtype":"F64","shape":[1],"data_offsets":[0,4]}})", std::string(4, '\0'),
                    "tensor 'a': duplicate key 'dtype'");
  expect_load_error(R"({"__metadata__":{"k":"1","k":"2"}})", "", "__metadata__: duplicate key 'k'");
  expect_load_error(R"([{"k":1,"k":2}])", "", "duplicate key 'k' in the header");
}

TEST_F(Safetensors, RejectsBoolBytesOtherThanZeroOrOne) {
  expect_load_error(R"({"m":{"dtype":"BOOL","shape":[3],"data_offsets":[0,3]}})", std::string("\x01\x00\x02", 3),
                    "tensor 'm': BOOL element 2 is 2, not 0 or 1");
}

TEST_F(Safetensors, RejectsMissingFileAndFolders) {
  EXPECT_KILN_ERROR(load_safetensors(path("nope.safetensors")),
                    "[load_safetensors] " + path("nope.safetensors") + ": cannot open: No such file or directory");
  EXPECT_KILN_ERROR(load_safetensors(dir_.string()), ": not a regular file");
}

// Validation runs before any tensor is allocated: a bad last entry means no
// memory was taken for the big first one.
TEST_F(Safetensors, ValidatesTheWholeHeaderBeforeAllocating) {
  const int64_t big = 1 << 20;  // floats
  std::string header = fmt::format(
      R"({{"big":{{"dtype":"F32","shape":[{}],"data_offsets":[0,{}]}},"bad":{{"dtype":"F32","shape":[1],"data_offsets":[{},{}]}}}})",
      big, 4 * big, 4 * big, 4 * big + 8);
  write_bytes(path("bad.safetensors"), file_bytes(header, std::string(size_t(4 * big + 8), '\0')));
  empty_cache();
  reset_peak_memory_stats();
  int64_t before = memory_stats().peak_bytes;
  EXPECT_KILN_ERROR(load_safetensors(path("bad.safetensors")), "tensor 'bad': data_offsets [4194304, 4194312] hold 8");
  EXPECT_LT(memory_stats().peak_bytes - before, 4 * big);
  EXPECT_KILN_ERROR(read_safetensors_metadata(path("bad.safetensors")), "[read_safetensors_metadata] ");
}

// Any damage to a valid file either still loads (bytes of tensor data) or
// throws kiln::Error: never a crash, a foreign exception or a read out of bounds.
TEST_F(Safetensors, DamagedFilesLoadOrThrowKilnError) {
  save_safetensors(path("ok.safetensors"), every_dtype(), {{"format", "pt"}});
  const std::string good = read_bytes(path("ok.safetensors"));
  auto try_load = [&](const std::string& bytes) {
    write_bytes(path("d.safetensors"), bytes);
    try {
      nn::StateDict sd = load_safetensors(path("d.safetensors"));
      int64_t total = 0;
      for (const auto& [name, t] : sd) total += t.nbytes();
      uint64_t n;
      std::memcpy(&n, bytes.data(), 8);
      EXPECT_EQ(uint64_t(total), bytes.size() - 8 - n);  // every byte accounted for
      return true;
    } catch (const Error&) {
      return false;
    }
  };
  int loaded = 0, rejected = 0;
  for (size_t len = 0; len < good.size(); len += 7) (try_load(good.substr(0, len)) ? loaded : rejected)++;
  EXPECT_EQ(loaded, 0);  // every truncation is caught
  std::mt19937 rng(123);
  for (int i = 0; i < 400; ++i) {
    std::string bad = good;
    for (int k = 0; k < 1 + i % 3; ++k) bad[rng() % bad.size()] = char(rng());
    (try_load(bad) ? loaded : rejected)++;
  }
  EXPECT_GT(loaded, 0);
  EXPECT_GT(rejected, 0);
}

// ---- saving: argument errors and atomicity

TEST_F(Safetensors, SaveRejectsBadArguments) {
  EXPECT_KILN_ERROR(save_safetensors(path("x.safetensors"), {{"__metadata__", ones({1})}}),
                    "[save_safetensors] " + path("x.safetensors") + ": tensor '__metadata__': the name is reserved");
  EXPECT_KILN_ERROR(save_safetensors(path("x.safetensors"), {{"w", Tensor()}}), "tensor 'w' is undefined");
  EXPECT_KILN_ERROR(save_safetensors(path("x.safetensors"), {{"w\xff", ones({1})}}), "not valid UTF-8");
  EXPECT_TRUE(files().empty());
}

TEST_F(Safetensors, SaveIntoMissingFolderThrows) {
  std::string p = path("missing/x.safetensors");
  EXPECT_KILN_ERROR(save_safetensors(p, {{"w", ones({1})}}),
                    "[save_safetensors] " + p + ": cannot create a temporary file in folder '" + path("missing") +
                        "': No such file or directory");
  EXPECT_TRUE(files().empty());
}

TEST_F(Safetensors, OverwritesAnExistingFile) {
  save_safetensors(path("m.safetensors"), {{"w", ones({3})}});
  save_safetensors(path("m.safetensors"), {{"v", zeros({2}, {.dtype = kF64})}});
  expect_same(load_safetensors(path("m.safetensors")), {{"v", zeros({2}, {.dtype = kF64})}});
  EXPECT_EQ(files(), std::vector<std::string>{"m.safetensors"});
}

TEST_F(Safetensors, FailedSaveLeavesThePreviousFileAndNoTemporary) {
  nn::StateDict old{{"w", arange(0, 6).reshape({2, 3})}};
  save_safetensors(path("m.safetensors"), old, {{"epoch", "1"}});
  std::string before = read_bytes(path("m.safetensors"));

  std::string temp;
  detail::set_save_hook([&](const std::string& t) {
    temp = t;
    // The temporary is complete and beside the target when the save fails.
    EXPECT_EQ(fs::path(t).parent_path(), dir_);
    EXPECT_TRUE(fs::exists(t));
    EXPECT_TRUE(equal(load_safetensors(t).at("w"), ones({100})));
    throw Error("test", "disk full (injected)");
  });
  EXPECT_KILN_ERROR(save_safetensors(path("m.safetensors"), {{"w", ones({100})}}, {{"epoch", "2"}}),
                    "disk full (injected)");
  EXPECT_FALSE(temp.empty());
  EXPECT_FALSE(fs::exists(temp));
  EXPECT_EQ(read_bytes(path("m.safetensors")), before);
  EXPECT_EQ(files(), std::vector<std::string>{"m.safetensors"});
  expect_same(load_safetensors(path("m.safetensors")), old);
}

TEST_F(Safetensors, FailedRenameRemovesTheTemporary) {
  // The target is a non-empty folder: rename() fails after the temporary is written.
  fs::create_directories(dir_ / "target" / "inside");
  EXPECT_KILN_ERROR(save_safetensors(path("target"), {{"w", ones({4})}}),
                    "[save_safetensors] " + path("target") + ": cannot rename temporary file");
  EXPECT_EQ(files(), std::vector<std::string>{"target"});
}

TEST_F(Safetensors, SaveIntoReadOnlyFolderThrowsAndKeepsTheFile) {
  if (::geteuid() == 0) GTEST_SKIP() << "root ignores folder permissions";
  save_safetensors(path("m.safetensors"), {{"w", ones({2})}});
  fs::permissions(dir_, fs::perms::owner_write | fs::perms::group_write | fs::perms::others_write,
                  fs::perm_options::remove);
  EXPECT_KILN_ERROR(save_safetensors(path("m.safetensors"), {{"w", zeros({2})}}), "Permission denied");
  fs::permissions(dir_, fs::perms::owner_all, fs::perm_options::add);
  expect_same(load_safetensors(path("m.safetensors")), {{"w", ones({2})}});
  EXPECT_EQ(files(), std::vector<std::string>{"m.safetensors"});
}

}  // namespace
}  // namespace kiln::io

namespace kiln::io {
namespace {

// The fuzzing findings (tests/fuzz/crashes/README.md), each now an error.
TEST_F(Safetensors, RejectsDeeplyNestedJsonWithoutRecursing) {
  std::string nest = std::string(100000, '[') + std::string(100000, ']');
  expect_load_error(R"({"__metadata__":{"a":)" + nest + "}}", "", "header nests JSON more than 8 levels deep");
  expect_load_error(R"({"a":{"dtype":"F32","shape":[)" + nest + R"(],"data_offsets":[0,0]}})", "",
                    "header nests JSON more than 8 levels deep");
}

TEST_F(Safetensors, RejectsEmptyTensorsWhoseStridesWouldOverflow) {
  expect_load_error(R"({"w":{"dtype":"F32","shape":[2,0,4611686018427387904,4611686018427387904],"data_offsets":[0,0]}})",
                    "", "tensor 'w': shape [2, 0, 4611686018427387904] overflows the element count");
}

TEST_F(Safetensors, MessagesQuoteLongValuesShortly) {
  std::string long_value(1000, 'x');
  expect_load_error(R"({"__metadata__":{"a":[")" + long_value + R"("]}})", "",
                    "__metadata__ 'a' is [\"" + std::string(60, 'x') + "\"...], not a string");
  expect_load_error(R"({"a":{"dtype":"F32","shape":[")" + long_value + R"("],"data_offsets":[0,0]}})", "",
                    "tensor 'a': shape[0] is \"" + std::string(60, 'x') + "\"..., not a non-negative integer");
}

}  // namespace
}  // namespace kiln::io
