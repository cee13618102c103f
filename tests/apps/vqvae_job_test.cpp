// kiln train vqvae fashion-mnist, short: it learns (test MSE far under the
// untrained one), writes metrics.csv with the VQ columns, a checkpoint and
// the reconstruction grid each epoch; an interrupted run resumed from its
// epoch-1 checkpoint continues bitwise as the uninterrupted run; bad options
// are errors before anything is written.
#include <gtest/gtest.h>

#include <filesystem>
#include <sstream>

#include "apps/kiln/vqvae.h"
#include "kiln/io/checkpoint.h"
#include "kiln/io/safetensors.h"
#include "tests/support/apps_testing.h"

namespace kiln::app {
namespace {

// The columns that must agree bitwise between two runs (not the timings).
std::vector<std::string> numbers(const std::string& csv) {
  std::vector<std::string> lines = kiln::testing::read_lines(csv);
  std::vector<std::string> out;
  if (lines.empty()) return out;
  std::vector<std::string> header;
  std::stringstream hs(lines[0]);
  for (std::string c; std::getline(hs, c, ',');) header.push_back(c);
  for (size_t i = 1; i < lines.size(); ++i) {
    std::stringstream ls(lines[i]);
    size_t col = 0;
    std::string row;
    for (std::string c; std::getline(ls, c, ','); ++col)
      if (col < header.size() && (header[col] == "loss" || header[col] == "recon_mse" || header[col] == "perplexity" ||
                                  header[col] == "usage" || header[col] == "val/loss" || header[col] == "test/usage" ||
                                  header[col] == "dead_codes"))
        row += c + ",";
    out.push_back(row);
  }
  return out;
}

TEST(VqvaeJob, LearnsWritesGridAndResumesBitwise) {
  const std::string a = kiln::testing::fresh_dir("a"), b = kiln::testing::fresh_dir("b");
  std::ostringstream log;
  // 20 steps: a share threshold of 2% (uniform is 1/32) re-seeds the codes the
  // first batches leave unused, so usage is up within the test's few steps.
  VqvaeOptions o{.codebook_size = 32, .epochs = 2, .batch_size = 64, .lr = 2e-3, .dead_code_threshold = 0.02,
                 .threads = 2, .seed = 3, .out = a, .limit = 640, .test_limit = 200, .log = &log, .tty = false};
  VqvaeResult r = train_vqvae(o);
  EXPECT_EQ(r.epochs, 2);
  EXPECT_LT(r.test_mse, 0.1) << log.str();  // 0.15 untrained; 0.079 when written
  EXPECT_GT(r.test_usage, 0.25) << log.str();  // 0.5 when written
  EXPECT_EQ(int64_t(kiln::testing::read_lines(r.csv).size()), 1 + 20);
  EXPECT_NE(kiln::testing::read_lines(r.csv)[0].find("recon_mse,perplexity,usage,val/loss,test/usage"), std::string::npos);
  EXPECT_EQ(kiln::testing::read_bytes(a + "/recon-epoch1.png").substr(1, 3), "PNG");
  EXPECT_TRUE(r.grid.ends_with("recon-epoch2.png")) << r.grid;
  EXPECT_EQ(kiln::testing::read_bytes(r.grid).substr(1, 3), "PNG");
  EXPECT_NE(log.str().find("test codes: usage"), std::string::npos) << log.str();

  // The same run stopped after epoch 1 and resumed: the same numbers, bitwise.
  std::ostringstream log_b;
  VqvaeOptions ob = o;
  ob.out = b;
  ob.log = &log_b;
  ob.epochs = 1;
  train_vqvae(ob);
  ob.epochs = 2;
  ob.resume = "latest";
  VqvaeResult rb = train_vqvae(ob);
  EXPECT_EQ(numbers(rb.csv), numbers(r.csv)) << log_b.str();
  EXPECT_EQ(rb.test_mse, r.test_mse);
  EXPECT_EQ(rb.test_usage, r.test_usage);
  // The checkpoint holds the codebook and its statistics.
  io::CheckpointInfo info = io::read_checkpoint_info(rb.checkpoint);
  EXPECT_EQ(info.progress.global_step, 20);
  nn::StateDict saved = io::load_safetensors(rb.checkpoint);
  for (const char* key : {"vq.codebook", "vq.cluster_size", "vq.embed_sum", "vq.initialized"})
    EXPECT_TRUE(saved.contains(key)) << key;
  EXPECT_EQ(saved.at("vq.codebook").shape(), (Shape{32, 64}));
  EXPECT_EQ(saved.at("vq.initialized").item<int64_t>(), 1);
  std::filesystem::remove_all(a);
  std::filesystem::remove_all(b);
}

TEST(VqvaeJob, Errors) {
  std::ostringstream log;
  EXPECT_KILN_ERROR(train_vqvae({.levels = 0, .log = &log}), "--levels must be in [1, 64]");
  EXPECT_KILN_ERROR(train_vqvae({.decay = 1.0, .log = &log}), "--decay must be in [0, 1)");
  EXPECT_KILN_ERROR(train_vqvae({.data = "/nonexistent", .log = &log}), "fashion-mnist");
  const std::string dir = kiln::testing::fresh_dir();
  EXPECT_KILN_ERROR(train_vqvae({.codebook_size = 4096, .batch_size = 64, .out = dir, .limit = 640, .log = &log}),
                    "fewer than --codebook-size 4096");
  EXPECT_TRUE(std::filesystem::is_empty(dir));  // refused before the run folder was touched
  EXPECT_KILN_ERROR(train_vqvae({.out = dir, .resume = "latest", .log = &log}), "no checkpoint in");
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace kiln::app
