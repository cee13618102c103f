// The main job, short: one epoch of the default CNN on the first 12000
// Fashion-MNIST images must classify the test images far above chance (0.1),
// write its log and checkpoint, and a resume must continue where it stopped.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "apps/kiln/fashion_mnist.h"
#include "kiln/io/checkpoint.h"
#include "tests/support/apps_testing.h"

namespace kiln::app {
namespace {


TEST(FashionMnistJob, OneEpochOfTheCnnLearns) {
  std::string out_dir = kiln::testing::fresh_dir();
  std::ostringstream log;
  FashionMnistOptions o{.epochs = 1, .out = out_dir, .limit = 12000, .test_limit = 2000, .log = &log, .tty = false};
  FashionMnistResult r = train_fashion_mnist(o);
  EXPECT_GT(r.test_accuracy, 0.75) << log.str();
  EXPECT_EQ(r.epochs, 1);
  // 12000 / 64 = 188 steps (the last one of 32): a header and a row per step.
  EXPECT_EQ(int64_t(kiln::testing::read_lines(r.csv).size()), 1 + 188);
  io::CheckpointInfo info = io::read_checkpoint_info(r.checkpoint);
  EXPECT_EQ(info.progress.global_step, 188);
  std::string text = log.str();
  EXPECT_NE(text.find("epoch 1/1 188/188 |██████████|"), std::string::npos) << text;
  EXPECT_NE(text.find("summary: loss: initial"), std::string::npos) << text;
  EXPECT_NE(text.find(fmt::format("test accuracy: {:.4f}", r.test_accuracy)), std::string::npos) << text;
  EXPECT_EQ(text.find('\r'), std::string::npos);  // not a terminal: no in-place rewrites

  // Resume for a second epoch: it starts at step 189 and appends to the log.
  std::ostringstream log2;
  o.epochs = 2;
  o.resume = "latest";
  o.log = &log2;
  FashionMnistResult r2 = train_fashion_mnist(o);
  EXPECT_EQ(r2.epochs, 2);
  EXPECT_EQ(int64_t(kiln::testing::read_lines(r2.csv).size()), 1 + 2 * 188);
  EXPECT_EQ(io::read_checkpoint_info(r2.checkpoint).progress.global_step, 376);
  EXPECT_NE(log2.str().find("epoch 2/2 188/188"), std::string::npos) << log2.str();
  EXPECT_EQ(log2.str().find("epoch 1/2"), std::string::npos) << log2.str();
  std::filesystem::remove_all(out_dir);
}

TEST(FashionMnistJob, Errors) {
  std::ostringstream log;
  EXPECT_KILN_ERROR(train_fashion_mnist({.model = "vit", .log = &log}), "--model must be cnn or mlp, got 'vit'");
  EXPECT_KILN_ERROR(train_fashion_mnist({.data = "/nonexistent", .log = &log}), "dataset-fashion-mnist");
  std::string dir = kiln::testing::fresh_dir();
  // A file where the folder belongs is named as such (it read "...gz not found").
  kiln::testing::write_bytes(dir + "/train-images-idx3-ubyte.gz", "x");
  EXPECT_KILN_ERROR(train_fashion_mnist({.data = dir + "/train-images-idx3-ubyte.gz", .log = &log}),
                    "--data " + dir + "/train-images-idx3-ubyte.gz is a file: give the folder that holds the IDX files");
  EXPECT_KILN_ERROR(train_fashion_mnist({.out = dir, .resume = "latest", .log = &log}), "no checkpoint in");
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace kiln::app
