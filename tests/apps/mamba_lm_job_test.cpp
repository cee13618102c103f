// `kiln train lm --arch mamba3 --tokenizer byte` and `kiln generate` from its
// checkpoint (issue 25): a tiny Mamba-3 byte model learns a repeated text,
// resumes to exactly the parameters of an uninterrupted run, loads back as a
// MambaLM and generates through its recurrent step.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "apps/kiln/generate.h"
#include "kiln/io/checkpoint.h"
#include "tests/apps/lm_testing.h"
#include "tests/support/apps_testing.h"

namespace kiln::app {
namespace {

LmOptions tiny_mamba(const std::string& data, const std::string& out, std::ostream* log) {
  LmOptions o = tiny_lm(data, out, log);
  o.tokenizer = "byte";
  o.n_embd = 16;
  o.arch = "mamba3";
  o.d_state = 16;
  o.headdim = 8;
  return o;
}

std::string repeated_text(const std::string& dir) {
  std::string text;
  for (int i = 0; i < 60; ++i) text += "ROMEO:\nBut soft, what light through yonder window breaks?\n\n";
  std::ofstream(dir + "/text.txt", std::ios::binary) << text;
  return dir + "/text.txt";
}

TEST(MambaLmJob, LearnsResumesExactlyAndGenerates) {
  std::string dir = kiln::testing::fresh_dir();
  const std::string data = repeated_text(dir);
  std::ostringstream log;
  LmOptions whole = tiny_mamba(data, dir + "/whole", &log);
  LmResult a = train_lm(whole);
  EXPECT_EQ(a.iters, 20);
  EXPECT_LT(a.val_loss, std::log(256.0) - 1.0) << log.str();
  EXPECT_NE(log.str().find("mamba3: 1 layers"), std::string::npos) << log.str();

  // Resume from the step-10 checkpoint in another folder: the same parameters bit for bit.
  LmOptions part = whole;
  part.out = dir + "/part";
  std::filesystem::create_directories(part.out + "/checkpoints");
  const std::string step10 = dir + "/whole/checkpoints/step-10.safetensors";
  ASSERT_EQ(io::read_checkpoint_info(step10).progress.global_step, 10) << log.str();
  std::filesystem::copy_file(a.csv, part.out + "/metrics.csv");
  part.resume = step10;
  LmResult b = train_lm(part);
  EXPECT_EQ(b.iters, 20);
  EXPECT_EQ(b.val_loss, a.val_loss);
  LanguageModel ma = load_lm(a.checkpoint), mb = load_lm(b.checkpoint);
  ASSERT_TRUE(ma.mamba && mb.mamba);
  EXPECT_FALSE(ma.model);
  EXPECT_EQ(ma.tokenizer->name(), "byte");
  auto sa = ma.mamba->state_dict(), sb = mb.mamba->state_dict();
  ASSERT_EQ(sa.size(), sb.size());
  for (const auto& [k, v] : sa) EXPECT_TRUE(kiln::testing::equal(sb.at(k), v)) << k;

  // Generation through step: the prompt, then exactly max_new_tokens bytes; a seed gives one text.
  std::ostringstream out1, out2;
  GenerateTextOptions g{.checkpoint = dir + "/whole", .prompt = "ROMEO:", .max_new_tokens = 30, .seed = 5,
                        .out = &out1};
  const std::string t1 = generate_text(g);
  EXPECT_EQ(t1.size(), 30u);
  EXPECT_EQ(out1.str(), "ROMEO:" + t1 + "\n");
  g.out = &out2;
  EXPECT_EQ(generate_text(g), t1);

  // A mamba3 flag the model cannot take is a named error.
  LmOptions bad = tiny_mamba(data, dir + "/bad", &log);
  bad.headdim = 5;
  EXPECT_KILN_ERROR(train_lm(bad), "--arch mamba3");
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace kiln::app
