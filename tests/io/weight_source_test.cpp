// io::WeightSource: a mapped safetensors file, a 3-shard manifest equal bit
// for bit to the single file, aliasing without copies, resident memory until
// tensors are touched, and bad manifests.
#include "kiln/io/weight_source.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <fstream>

#include "kiln/io/gguf.h"
#include "kiln/io/onnx.h"
#include "tests/support/io_testing.h"

namespace kiln::io {
namespace {
using namespace kiln::testing;

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() &&
         std::memcmp(a.contiguous().data_ptr(), b.contiguous().data_ptr(), size_t(a.nbytes())) == 0;
}

void write_text(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

nn::StateDict sample(Generator& gen) {
  nn::StateDict sd;
  sd.insert("wte.weight", randn({50, 32}, gen));
  sd.insert("h.0.attn.weight", randn({96, 32}, gen));
  sd.insert("h.0.attn.bias", randn({96}, gen));
  sd.insert("h.0.ln.weight", randn({32}, gen, {.dtype = kBF16}));
  sd.insert("h.1.mlp.weight", randn({128, 32}, gen, {.dtype = kF64}));
  sd.insert("odd", tensor(std::vector<int32_t>{1, 2, 3}));
  sd.insert("after_odd", randn({3, 5}, gen));
  sd.insert("steps", tensor(std::vector<int64_t>{7}));
  return sd;
}

TEST(WeightSource, SingleFileLoadsEveryTensorAndAliasesAlignedOnes) {
  std::string dir = fresh_dir();
  Generator gen(1);
  nn::StateDict sd = sample(gen);
  save_safetensors(dir + "/m.safetensors", sd, {{"format", "pt"}});
  WeightSource src = WeightSource::open(dir + "/m.safetensors");
  EXPECT_EQ(src.format(), "safetensors");
  EXPECT_EQ(src.names().size(), sd.size());
  EXPECT_EQ(src.metadata().at("format"), "pt");
  for (const auto& [name, t] : sd) {
    SCOPED_TRACE(name);
    Tensor got = src.load(name);
    EXPECT_TRUE(same_bits(got, t));
    EXPECT_EQ(src.info(name).shape, t.shape());
    EXPECT_EQ(src.info(name).nbytes, uint64_t(t.nbytes()));
  }
  // The writer starts the data 64-byte aligned: the first tensor (and every
  // one after tensors of whole 64-byte multiples) lies on a cache line.
  EXPECT_TRUE(src.aliases("h.0.attn.weight"));
  // After 12 bytes of I32 the next f32 tensor is 4- but not 64-byte aligned: still aliased.
  EXPECT_TRUE(src.aliases("after_odd"));
  EXPECT_NE(reinterpret_cast<uintptr_t>(src.load("after_odd").data_ptr()) % 64, 0u);
  Tensor w = src.load("h.0.attn.weight");
  EXPECT_EQ(reinterpret_cast<uintptr_t>(w.data_ptr()) % 64, 0u);
  EXPECT_EQ(src.info("h.0.ln.weight").dtype, "BF16");
  EXPECT_KILN_ERROR(src.load("nope"), "no tensor named 'nope'");
}

TEST(WeightSource, TensorsKeepTheMappingAlive) {
  std::string dir = fresh_dir();
  Generator gen(2);
  Tensor want = randn({64, 64}, gen);
  save_safetensors(dir + "/m.safetensors", nn::StateDict{{"w", want}});
  Tensor w;
  {
    WeightSource src = WeightSource::open(dir + "/m.safetensors");
    ASSERT_TRUE(src.aliases("w"));
    w = src.load("w");
  }
  std::filesystem::remove(dir + "/m.safetensors");  // the mapping outlives the name
  EXPECT_TRUE(same_bits(w, want));
}

/// Splits `sd` into three shards with a manifest, as Hugging Face's save_pretrained does.
void write_sharded(const std::string& dir, const nn::StateDict& sd) {
  std::vector<nn::StateDict> shards(3);
  nlohmann::json map = nlohmann::json::object();
  size_t i = 0;
  for (const auto& [name, t] : sd) {
    size_t s = i++ % 3;
    shards[s].insert(name, t);
    map[name] = fmt::format("model-{:05d}-of-00003.safetensors", s + 1);
  }
  for (size_t s = 0; s < 3; ++s)
    save_safetensors(fmt::format("{}/model-{:05d}-of-00003.safetensors", dir, s + 1), shards[s]);
  nlohmann::json manifest{{"metadata", {{"total_size", 12345}}}, {"weight_map", map}};
  write_text(dir + "/model.safetensors.index.json", manifest.dump(2));
}

TEST(WeightSource, ThreeShardManifestLoadsBitwiseEqualToTheSingleFile) {
  std::string dir = fresh_dir();
  Generator gen(3);
  nn::StateDict sd = sample(gen);
  save_safetensors(dir + "/single.safetensors", sd);
  write_sharded(dir, sd);
  WeightSource one = WeightSource::open(dir + "/single.safetensors");
  WeightSource many = WeightSource::open(dir + "/model.safetensors.index.json");
  EXPECT_EQ(many.format(), "safetensors-sharded");
  EXPECT_EQ(many.metadata().at("total_size"), "12345");
  ASSERT_EQ(one.names(), many.names());
  for (const std::string& name : one.names()) {
    SCOPED_TRACE(name);
    EXPECT_TRUE(same_bits(one.load(name), many.load(name)));
    EXPECT_NE(many.info(name).file.find("-of-00003.safetensors"), std::string::npos);
  }
}

TEST(WeightSource, BadManifestsAreRefusedNamingTheProblem) {
  std::string dir = fresh_dir();
  Generator gen(4);
  nn::StateDict sd = sample(gen);
  write_sharded(dir, sd);
  std::string m = dir + "/bad.index.json";
  write_text(m, R"({"weight_map": {"wte.weight": "/etc/passwd"}})");
  EXPECT_KILN_ERROR(WeightSource::open(m), "must be a relative file name");
  write_text(m, R"({"weight_map": {"wte.weight": "../x.safetensors"}})");
  EXPECT_KILN_ERROR(WeightSource::open(m), "may not leave the manifest's folder");
  write_text(m, R"({"weight_map": {"wte.weight": "missing.safetensors"}})");
  EXPECT_KILN_ERROR(WeightSource::open(m), "cannot open");
  write_text(m, R"({"weights": {}})");
  EXPECT_KILN_ERROR(WeightSource::open(m), "missing \"weight_map\"");
  write_text(m, R"({"weight_map": {"wte.weight": 3}})");
  EXPECT_KILN_ERROR(WeightSource::open(m), "not a shard file name");
  // A name mapped to a shard that lacks it, and a shard tensor the map leaves out.
  write_text(m, R"({"weight_map": {"wte.weight": "model-00002-of-00003.safetensors"}})");
  EXPECT_KILN_ERROR(WeightSource::open(m), "does not hold it");
  nlohmann::json j = nlohmann::json::parse(read_bytes(dir + "/model.safetensors.index.json"));
  j["weight_map"].erase("steps");
  write_text(m, j.dump());
  EXPECT_KILN_ERROR(WeightSource::open(m), "tensor 'steps': in this shard but not in the manifest");
  write_text(m, "{not json");
  EXPECT_KILN_ERROR(WeightSource::open(m), "not a JSON object");
  EXPECT_KILN_ERROR(WeightSource::open(dir + "/none.safetensors"), "no such file");
  // An ONNX ModelProto (field 1, ir_version 7, as torch.onnx.export writes first).
  write_bytes(dir + "/m.onnx", std::string("\x08\x07\x12\x07pytorch", 10));
  // (A cut-off one: read as ONNX, refused by the ONNX reader.)
  if (onnx_supported()) EXPECT_KILN_ERROR(WeightSource::open(dir + "/m.onnx"), "m.onnx: not an ONNX model");
}

TEST(WeightSource, NamesKilnCheckpointsAsSuch) {
  std::string dir = fresh_dir();
  Rngs rngs(0);
  nn::Linear lin(4, 3, rngs);
  Checkpoint().model(lin, "model").save(dir + "/c.safetensors");
  WeightSource src = WeightSource::open(dir + "/c.safetensors");
  EXPECT_EQ(src.format(), "kiln-checkpoint");
  EXPECT_EQ(src.names(), (std::vector<std::string>{"model.bias", "model.weight"}));
  EXPECT_TRUE(equal(src.load("model.weight"), lin.weight));
}

/// Resident set size in bytes (/proc/self/statm's second field, in pages).
int64_t rss_bytes() {
  std::ifstream f("/proc/self/statm");
  int64_t size = 0, resident = 0;
  f >> size >> resident;
  return resident * int64_t(::sysconf(_SC_PAGESIZE));
}

// SPECS I6: opening a large file through the mapping costs (almost) no resident
// memory until tensors are touched. 96 MiB here (512 MiB in the issue's
// target; the bound scales: headers and bookkeeping only).
TEST(WeightSource, OpeningAMappedFileAddsLittleResidentMemory) {
  std::string dir = fresh_dir();
  {
    nn::StateDict sd;
    for (int i = 0; i < 6; ++i) sd.insert(fmt::format("layer{}.weight", i), full({1024, 4096}, float(i)));
    save_safetensors(dir + "/big.safetensors", sd);
  }
  int64_t before = rss_bytes();
  WeightSource src = WeightSource::open(dir + "/big.safetensors");
  std::vector<Tensor> held;
  for (const std::string& name : src.names()) held.push_back(src.load(name));  // aliases: still untouched
  int64_t opened = rss_bytes();
  EXPECT_LT(opened - before, int64_t(8) << 20) << "resident memory grew by " << (opened - before) << " bytes";
  double sum = 0;
  const float* p = held[3].data<float>();
  for (int64_t i = 0; i < held[3].numel(); i += 1024) sum += p[i];  // touch one 16 MiB tensor
  EXPECT_EQ(sum, 3.0 * 4096);
  EXPECT_GT(rss_bytes() - opened, int64_t(12) << 20);
}

TEST(WeightSource, OpensGgufFilesByTheirMagic) {
  std::string dir = fresh_dir();
  Generator gen(5);
  Tensor a = randn({4, 64}, gen), b = randn({3}, gen, {.dtype = kBF16});
  save_gguf(dir + "/m.gguf", {{"general.name", GgufValue::string("tiny")}},
            {{.name = "a", .dense = a}, {.name = "b", .dense = b},
             {.name = "q", .quantized = nn::quantize(a, nn::QuantType::q8_0)}});
  WeightSource src = WeightSource::open(dir + "/m.gguf");
  EXPECT_EQ(src.format(), "gguf");
  EXPECT_EQ(src.metadata().at("general.name"), "\"tiny\"");
  EXPECT_TRUE(same_bits(src.load("a"), a));
  EXPECT_TRUE(src.aliases("a"));
  EXPECT_TRUE(same_bits(src.load("b"), b));
  EXPECT_EQ(src.info("q").dtype, "Q8_0");
  EXPECT_EQ(src.info("q").shape, (Shape{4, 64}));
  EXPECT_KILN_ERROR(src.load("q"), "load it with GgufFile::load_quantized");
}

}  // namespace
}  // namespace kiln::io
