// The fuzz targets' seed corpora in the regular suite: every valid
// safetensors seed (tests/fuzz/corpus/safetensors, written by
// tests/fuzz/make_corpus.py) loads and every bad_* seed is refused with a
// kiln::Error naming the file; the seeds kiln writes itself (checkpoints,
// tokenizers, checkpoints.json) are current. So the corpora stay what
// docs/fuzzing.md says they are.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <map>

#include "kiln/data/bpe_tokenizer.h"
#include "kiln/data/tokenizer.h"
#include "kiln/io/checkpoint.h"
#include "kiln/io/checkpoint_manager.h"
#include "kiln/io/safetensors.h"
#include "tests/support/data_testing.h"

namespace kiln::io {
namespace {
namespace fs = std::filesystem;

std::vector<fs::path> seeds() {
  std::vector<fs::path> out;
  for (const auto& e : fs::directory_iterator(fs::path(KILN_GOLDEN_DIR) / ".." / "fuzz" / "corpus" / "safetensors"))
    out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

/// What each invalid seed is refused for (every bad_* seed must be listed).
const std::map<std::string, std::string> kRefusals = {
    {"bad_short_file", "file is 3 bytes, shorter than the 8-byte header length"},
    {"bad_header_too_long", "header length 1099511627776 exceeds the limit"},
    {"bad_json", "header is not valid JSON"},
    {"bad_not_object", "header is a JSON array, not an object"},
    {"bad_dtype", "tensor 'w': unsupported dtype 'F8_E4M3'"},
    {"bad_shape_mismatch", "tensor 'w': data_offsets [0, 8] hold 8 bytes, but shape [3] of F32 needs 12"},
    {"bad_overlap", "tensor 'b': bytes [2, 4) overlap tensor 'a'"},
    {"bad_gap", "tensor 'a': bytes [0, 2) of the data buffer before it belong to no tensor"},
    {"bad_beyond_end", "tensor 'a': data_offsets [0, 16]: end is beyond the data buffer of 8 bytes"},
    {"bad_shape_overflow", "tensor 'a': shape [4294967296, 4294967296] overflows"},
    {"bad_negative", "tensor 'a': shape[0] is -1, not a non-negative integer"},
    {"bad_duplicate", "tensor 'a': duplicate name in the header"},
    {"bad_metadata_value", "__metadata__ 'epoch' is 3, not a string"},
    {"bad_bool_value", "tensor 'm': BOOL element 1 is 2, not 0 or 1"},
    {"bad_truncated", "tensor 'w': data_offsets [0, 32]: end is beyond the data buffer"},
};

TEST(FuzzCorpus, ValidSeedsLoadAndBadOnesAreRefused) {
  std::vector<fs::path> files = seeds();
  ASSERT_GE(files.size(), 20u);
  size_t bad = 0;
  for (const fs::path& p : files) {
    std::string name = p.stem().string();
    SCOPED_TRACE(name);
    if (name.rfind("bad_", 0) == 0) {
      ++bad;
      auto it = kRefusals.find(name);
      ASSERT_NE(it, kRefusals.end()) << "list the refusal of the new seed";
      EXPECT_KILN_ERROR(load_safetensors(p.string()), "[load_safetensors] " + p.string() + ": " + it->second);
    } else {
      EXPECT_NO_THROW(load_safetensors(p.string()));
      EXPECT_NO_THROW(read_safetensors_metadata(p.string()));
    }
  }
  EXPECT_EQ(bad, kRefusals.size());
}

// A few seeds' contents, so a change to the generator is noticed here.
TEST(FuzzCorpus, SeedsHoldWhatTheGeneratorSays) {
  fs::path dir = fs::path(KILN_GOLDEN_DIR) / ".." / "fuzz" / "corpus" / "safetensors";
  nn::StateDict every = load_safetensors((dir / "every_dtype.safetensors").string());
  EXPECT_EQ(every.keys(), (std::vector<std::string>{"b", "u8", "i32", "i64", "bf16", "f16", "f32", "f64"}));
  EXPECT_EQ(every.at("f16").dtype(), kF32);  // F16 widens to f32
  EXPECT_EQ(every.at("f16").to_vector<float>(), (std::vector<float>{0.5f, -3.0f}));
  EXPECT_EQ(every.at("i32").to_vector<int32_t>(), (std::vector<int32_t>{-2147483647 - 1, 2147483647}));
  EXPECT_EQ(read_safetensors_metadata((dir / "every_dtype.safetensors").string()),
            (std::map<std::string, std::string>{{"epoch", "3"}, {"format", "pt"}}));

  nn::StateDict order = load_safetensors((dir / "data_order_differs.safetensors").string());
  EXPECT_EQ(order.keys(), (std::vector<std::string>{"c", "a", "b"}));  // in byte order

  nn::StateDict small = load_safetensors((dir / "scalar_and_empty.safetensors").string());
  EXPECT_EQ(small.at("step").dim(), 0);
  EXPECT_EQ(small.at("step").item<int64_t>(), 12345);
  EXPECT_EQ(small.at("rows").shape(), (Shape{0, 3}));

  EXPECT_KILN_ERROR(load_safetensors((dir / "bad_bool_value.safetensors").string()), "BOOL element 1 is 2");
  EXPECT_KILN_ERROR(load_safetensors((dir / "bad_overlap.safetensors").string()), "overlap tensor 'a'");
}

/// The two seeds io::Checkpoint writes (a full checkpoint and a model-only
/// one), so that the fuzzer starts from kiln's real metadata. Rewritten by
/// KILN_REGENERATE_GOLDENS=1 when the format changes.
void write_checkpoint_seeds(const fs::path& dir) {
  Rngs rngs{{"params", 0}, {"dropout", 1}};
  nn::Sequential net(nn::Linear(2, 2, rngs), nn::Dropout(0.5, nn::Init(rngs)));
  optim::Adam opt(net.parameters(), {.lr = 0.1});
  sum(net.forward(ones({1, 2}))).backward();
  opt.step();
  optim::ReduceOnPlateauScheduler sched({.lr = 0.1});  // best = inf: a non-finite value in the metadata
  Progress progress{1, 5, 2};
  data::Sampler order(6, true, 3);
  order.next(2);
  Checkpoint ckpt;
  ckpt.model(net).optimizer(opt).scheduler(sched).rngs(rngs).progress(progress).state("data", order);
  ckpt.config(R"({"width": 2})").save((dir / "checkpoint_full.safetensors").string());
  Checkpoint().model(net).save((dir / "checkpoint_model_only.safetensors").string());
}

TEST(FuzzCorpus, KilnCheckpointSeedsAreCurrent) {
  fs::path corpus = fs::path(KILN_GOLDEN_DIR) / ".." / "fuzz" / "corpus" / "safetensors";
  if (std::getenv("KILN_REGENERATE_GOLDENS")) write_checkpoint_seeds(corpus);
  fs::path fresh = kiln::testing::scratch_root() / "kiln_checkpoint_seeds";
  fs::create_directories(fresh);
  write_checkpoint_seeds(fresh);
  for (const char* name : {"checkpoint_full.safetensors", "checkpoint_model_only.safetensors"}) {
    SCOPED_TRACE(name);
    EXPECT_EQ(testing::read_bytes((fresh / name).string()), testing::read_bytes((corpus / name).string()))
        << "the checkpoint format changed: rerun with KILN_REGENERATE_GOLDENS=1";
    EXPECT_EQ(read_checkpoint_info((corpus / name).string()).format_version, 2);
  }
  // Written by the format before the header checksum (version 1): still read.
  EXPECT_EQ(read_checkpoint_info((corpus / "checkpoint_v1_full.safetensors").string()).format_version, 1);
}

/// The seeds of the reader fuzz targets that carry kiln's checksums, written
/// by kiln: tokenizer JSON (tests/fuzz/corpus/tokenizer) and a checkpoint
/// folder's record (tests/fuzz/corpus/checkpoints_json), each with a few
/// wrong variants. (tests/fuzz/make_reader_corpus.py writes the others.)
std::map<std::string, std::string> reader_seeds() {
  std::map<std::string, std::string> out;
  out["tokenizer/byte.json"] = data::ByteTokenizer().to_json();
  out["tokenizer/char.json"] = data::CharTokenizer::train("hello, world").to_json();
  const std::string bpe = data::BpeTokenizer::train("low lower lowest, hello hello world", {.vocab_size = 264}).to_json();
  out["tokenizer/bpe.json"] = bpe;
  std::string bad = bpe;
  bad[bad.rfind("crc32c") + 9] ^= 1;  // a digit of the checksum
  out["tokenizer/bad_crc.json"] = bad;
  out["tokenizer/bad_type.json"] = R"({"format": "kiln.tokenizer", "version": 1, "type": "wordpiece"})";

  const fs::path dir = kiln::testing::scratch_root() / "kiln_record_seed";
  fs::remove_all(dir);
  Rngs rngs{{"params", 0}};
  nn::Linear net(2, 2, rngs);
  Checkpoint ckpt;
  ckpt.model(net);
  CheckpointManager manager(dir.string(), {.keep_last = 2, .monitor = "val/loss"});
  manager.save(ckpt, 10, 0.5);
  manager.save(ckpt, 20, std::nullopt);
  manager.save(ckpt, 30, 0.25);
  out["checkpoints_json/three_saves.json"] = testing::read_bytes((dir / CheckpointManager::kIndexName).string());
  out["checkpoints_json/other_monitor.json"] =
      R"({"format":"kiln.CheckpointManager","version":1,"monitor":"val/acc","mode":"max","best":null,"checkpoints":[]})";
  out["checkpoints_json/newer_version.json"] =
      R"({"format":"kiln.CheckpointManager","version":2,"monitor":"val/loss","mode":"min","best":null,"checkpoints":[]})";
  out["checkpoints_json/bad_step.json"] =
      R"({"format":"kiln.CheckpointManager","version":1,"monitor":"val/loss","mode":"min","best":null,"checkpoints":[{"step":-1,"metric":"nan"}]})";
  fs::remove_all(dir);
  return out;
}

TEST(FuzzCorpus, ReaderSeedsAreCurrent) {
  const fs::path corpus = fs::path(KILN_GOLDEN_DIR) / ".." / "fuzz" / "corpus";
  for (const auto& [name, bytes] : reader_seeds()) {
    SCOPED_TRACE(name);
    if (std::getenv("KILN_REGENERATE_GOLDENS")) {
      fs::create_directories((corpus / name).parent_path());
      testing::write_bytes((corpus / name).string(), bytes);
    }
    EXPECT_EQ(testing::read_bytes((corpus / name).string()), bytes) << "rerun with KILN_REGENERATE_GOLDENS=1";
  }
  // The valid tokenizers load, the others are refused.
  for (const char* ok : {"byte.json", "char.json", "bpe.json"})
    EXPECT_NO_THROW(data::load_tokenizer((corpus / "tokenizer" / ok).string())) << ok;
  EXPECT_KILN_ERROR(data::load_tokenizer((corpus / "tokenizer" / "bad_crc.json").string()), "the file is damaged");
  EXPECT_KILN_ERROR(data::load_tokenizer((corpus / "tokenizer" / "bad_type.json").string()), "unknown tokenizer type");
}

// Reproducers of fuzzing findings (tests/fuzz/crashes/README.md), fixed in
// src/io/safetensors.cpp: the deep_nesting_* files overflowed the stack (a
// crash, not an error), and empty_tensor_stride_overflow was undefined
// behaviour in Tensor::empty's strides.
TEST(FuzzCrashes, ReproducersAreRefusedWithAnError) {
  fs::path dir = fs::path(KILN_GOLDEN_DIR) / ".." / "fuzz" / "crashes";
  int n = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().extension() != ".safetensors") continue;
    std::string p = e.path().string();
    SCOPED_TRACE(p);
    ++n;
    if (e.path().stem().string().rfind("deep_nesting", 0) == 0) {
      EXPECT_KILN_ERROR(load_safetensors(p), "[load_safetensors] " + p + ": ");
      EXPECT_KILN_ERROR(read_safetensors_metadata(p), "[read_safetensors_metadata] " + p + ": ");
    } else {
      // Refused, or loaded with valid strides: either fix is right.
      try {
        for (const auto& [name, t] : load_safetensors(p)) EXPECT_TRUE(t.is_contiguous()) << name;
      } catch (const Error& err) {
        EXPECT_NE(std::string(err.what()).find("[load_safetensors] " + p + ": "), std::string::npos) << err.what();
      }
    }
  }
  EXPECT_EQ(n, 4);
}

}  // namespace
}  // namespace kiln::io
