// The language-model job, short: a tiny GPT on the first 20 KB of tiny
// Shakespeare (a synthetic text when ../shared/data is absent) must learn
// (its val loss well under the uniform ln V), write its log and checkpoints,
// resume to exactly the parameters of an uninterrupted run, and load back
// for generation; bad options and files are named errors.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "kiln/core/grad_mode.h"
#include "kiln/io/checkpoint.h"
#include "kiln/ops/reduce.h"
#include "tests/apps/lm_testing.h"
#include "tests/support/apps_testing.h"

namespace kiln::app {
namespace {


TEST(LmJob, SmokeLearnsLogsAndLoads) {
  std::string dir = kiln::testing::fresh_dir();
  std::string data = testing::corpus_slice(dir, 20000);
  std::ostringstream log;
  LmOptions o = tiny_lm(data, dir + "/run", &log);
  o.iters = 60;
  o.eval_interval = 30;
  LmResult r = train_lm(o);
  LanguageModel lm = load_lm(r.checkpoint);
  const double uniform = std::log(double(lm.config.vocab_size));
  EXPECT_LT(r.val_loss, uniform - 0.7) << log.str();  // the characters' frequencies alone give ~ln V - 0.9
  EXPECT_LT(r.train_loss, uniform - 0.7) << log.str();
  EXPECT_EQ(r.iters, 60);
  EXPECT_EQ(int64_t(kiln::testing::read_lines(r.csv).size()), 1 + 60);
  std::ifstream csv(r.csv);
  std::string header;
  std::getline(csv, header);
  EXPECT_NE(header.find("train/loss,val/loss"), std::string::npos) << header;
  EXPECT_EQ(header.find("moe/"), std::string::npos) << header;  // the routing columns only with experts
  std::string text = log.str();
  EXPECT_NE(text.find("validation: loss"), std::string::npos) << text;
  EXPECT_NE(text.find("validation train: loss"), std::string::npos) << text;
  EXPECT_NE(text.find(fmt::format("val loss: {:.4f}", r.val_loss)), std::string::npos) << text;
  EXPECT_NE(text.find("s wall"), std::string::npos) << text;

  // load_lm: the config, the tokenizer and the weights of the run; the run
  // folder works as well as the file.
  EXPECT_EQ(lm.iters, 60);
  EXPECT_EQ(lm.config.n_embd, 32);
  EXPECT_EQ(lm.config.block_size, 16);
  EXPECT_EQ(lm.tokenizer->name(), "char");
  EXPECT_EQ(lm.tokenizer->decode(lm.tokenizer->encode("First Citizen")), "First Citizen");
  LanguageModel again = load_lm(dir + "/run");
  EXPECT_EQ(again.iters, 60);
  NoGradGuard no_grad;
  Tensor idx = Tensor::empty({1, 5}, kI64);
  std::vector<int64_t> ids = lm.tokenizer->encode("First");
  std::copy(ids.begin(), ids.end(), idx.data<int64_t>());
  EXPECT_TRUE(kiln::testing::equal(lm.model->forward(idx), again.model->forward(idx)));
  std::filesystem::remove_all(dir);
}

// N iterations == k iterations, a resume, and the other N - k: the same
// parameters bit for bit (batches, scheduler, AdamW moments, the estimates).
TEST(LmJob, ResumeIsExact) {
  std::string dir = kiln::testing::fresh_dir();
  std::string data = testing::corpus_slice(dir, 8000);
  std::ostringstream log;
  LmOptions whole = tiny_lm(data, dir + "/whole", &log);
  whole.dropout = 0.1;  // the dropout stream resumes too
  LmResult a = train_lm(whole);

  // The uninterrupted run saved a checkpoint at step 10 (eval_interval):
  // resume from it in another folder (with its CSV, which the resume truncates).
  LmOptions part = whole;
  part.out = dir + "/part";
  std::filesystem::create_directories(part.out + "/checkpoints");
  io::CheckpointInfo info = io::read_checkpoint_info(a.checkpoint);
  EXPECT_EQ(info.progress.global_step, 20);
  const std::string step10 = dir + "/whole/checkpoints/step-10.safetensors";
  ASSERT_EQ(io::read_checkpoint_info(step10).progress.global_step, 10) << log.str();
  std::filesystem::copy_file(a.csv, part.out + "/metrics.csv");
  part.resume = step10;
  LmResult b = train_lm(part);
  EXPECT_EQ(b.iters, 20);
  EXPECT_EQ(b.val_loss, a.val_loss);
  EXPECT_EQ(b.train_loss, a.train_loss);
  LanguageModel ma = load_lm(a.checkpoint), mb = load_lm(b.checkpoint);
  auto sa = ma.model->state_dict(), sb = mb.model->state_dict();
  ASSERT_EQ(sa.size(), sb.size());
  for (const auto& [k, v] : sa) EXPECT_TRUE(kiln::testing::equal(sb.at(k), v)) << k;
  std::filesystem::remove_all(dir);
}

// --memory-budget: three probe steps pick the batch (reported, trained
// with, saved in the run's config); a resumed run keeps it.
TEST(LmJob, MemoryBudgetPicksTheBatchAndAResumeKeepsIt) {
  std::string dir = kiln::testing::fresh_dir();
  std::string data = testing::corpus_slice(dir, 8000);
  std::ostringstream log;
  LmOptions o = tiny_lm(data, dir + "/run", &log);
  o.iters = 4;
  o.eval_interval = 2;
  o.eval_iters = 1;
  o.memory_budget = "24M";
  LmResult r = train_lm(o);
  const std::string text = log.str();
  EXPECT_NE(text.find(fmt::format("--memory-budget 24 MiB: batch {} (predicted peak", r.batch_size)),
            std::string::npos) << text;
  EXPECT_NE(text.find("--memory-budget 24 MiB: peak during training"), std::string::npos) << text;
  EXPECT_GT(r.batch_size, 8) << text;  // a tiny model: far more than the default fits
  EXPECT_NE(text.find(fmt::format("batch {} ·", r.batch_size)), std::string::npos) << text;
  EXPECT_EQ(r.iters, 4);
  io::CheckpointInfo info = io::read_checkpoint_info(r.checkpoint);
  EXPECT_NE(info.config.find(fmt::format("\"batch_size\":{}", r.batch_size)), std::string::npos) << info.config;

  // Resumed from step 2 with a different budget: the run's batch, no probes.
  std::ostringstream log2;
  LmOptions part = tiny_lm(data, dir + "/part", &log2);
  part.iters = 4;
  part.eval_interval = 2;
  part.eval_iters = 1;
  part.memory_budget = "1G";
  part.resume = dir + "/run/checkpoints/step-2.safetensors";
  std::filesystem::create_directories(part.out + "/checkpoints");
  std::filesystem::copy_file(r.csv, part.out + "/metrics.csv");
  LmResult b = train_lm(part);
  EXPECT_EQ(b.batch_size, r.batch_size) << log2.str();
  EXPECT_NE(log2.str().find(fmt::format("resuming with the run's batch {}", r.batch_size)), std::string::npos)
      << log2.str();
  EXPECT_EQ(b.val_loss, r.val_loss);

  LmOptions bad = tiny_lm(data, dir + "/bad", &log);
  bad.memory_budget = "lots";
  try {
    train_lm(bad);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--memory-budget must be a size"), std::string::npos) << e.what();
  }
  std::filesystem::remove_all(dir);
}

TEST(LmJob, Errors) {
  std::string dir = kiln::testing::fresh_dir();
  std::ostringstream log;
  std::string data = testing::corpus_slice(dir, 4000);
  LmOptions o = tiny_lm(data, dir + "/run", &log);
  auto with = [&](auto edit) {
    LmOptions c = o;
    edit(c);
    return c;
  };
  EXPECT_KILN_ERROR(train_lm(with([](LmOptions& c) { c.data = ""; })), "--data FILE is required");
  EXPECT_KILN_ERROR(train_lm(with([&](LmOptions& c) { c.data = dir + "/missing.txt"; })),
                    "cannot read --data " + dir + "/missing.txt: no such file");
  // 4000 characters: 400 val tokens, too few for a context of 512.
  EXPECT_KILN_ERROR(train_lm(with([](LmOptions& c) { c.block_size = 512; })),
                    "has 4000 tokens: its 90/10 split gives 3600 train and 400 val tokens, and each needs more than "
                    "--block-size 512");
  EXPECT_KILN_ERROR(train_lm(with([](LmOptions& c) { c.tokenizer = "word"; })),
                    "--tokenizer must be char, byte or bpe, got 'word'");
  EXPECT_KILN_ERROR(train_lm(with([](LmOptions& c) { c.n_head = 3; })), "--n-embd 32 is not a multiple of --n-head 3");
  EXPECT_KILN_ERROR(train_lm(with([](LmOptions& c) { c.iters = 0; })), "--iters must be positive, got 0");
  EXPECT_KILN_ERROR(train_lm(with([](LmOptions& c) { c.warmup = 20; })), "--warmup must be in [0, --iters = 20), got 20");
  EXPECT_KILN_ERROR(train_lm(with([](LmOptions& c) { c.min_lr = 1; })), "--min-lr must be in [0, --lr = 0.01], got 1");
  EXPECT_KILN_ERROR(train_lm(with([](LmOptions& c) { c.eval_iters = 0; })), "--eval-iters must be positive, got 0");
  EXPECT_KILN_ERROR(train_lm(with([](LmOptions& c) { c.resume = "latest"; })), "--resume latest: no checkpoint in");
  // A text that is not UTF-8 cannot be read by characters (bytes can).
  std::ofstream(dir + "/bad.txt", std::ios::binary) << std::string(200, 'a') + "\xff" + std::string(200, 'b');
  EXPECT_KILN_ERROR(train_lm(with([&](LmOptions& c) { c.data = dir + "/bad.txt"; })), "not valid UTF-8");

  // A resume with other flags names the one that differs.
  LmResult r = train_lm(o);
  EXPECT_KILN_ERROR(train_lm(with([&](LmOptions& c) {
                      c.resume = r.checkpoint;
                      c.iters = 30;
                    })),
                    "the checkpoint was trained with iters 20, this run asks for 30");
  EXPECT_KILN_ERROR(train_lm(with([&](LmOptions& c) {
                      c.resume = r.checkpoint;
                      c.n_embd = 64;
                    })),
                    "the checkpoint was trained with n_embd 32, this run asks for 64");
  EXPECT_KILN_ERROR(load_lm(dir + "/nothing"), "[load_lm] " + dir + "/nothing: no such file or folder");
  EXPECT_KILN_ERROR(load_lm(data), "slice.txt");  // not a checkpoint
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace kiln::app
