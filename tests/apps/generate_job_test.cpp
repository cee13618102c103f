// `kiln generate`'s job on a tiny model trained by the lm job: the prompt
// then exactly max_new_tokens tokens, streamed; a seed gives one text;
// temperature 0 is greedy; bad prompts and checkpoints are named errors.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "apps/kiln/generate.h"
#include "apps/kiln/lm.h"
#include "tests/support/apps_testing.h"

namespace kiln::app {
namespace {

TEST(GenerateJob, StreamsSeededText) {
  std::string dir = kiln::testing::fresh_dir();
  std::string text;
  for (int i = 0; i < 60; ++i) text += "ROMEO:\nBut soft, what light through yonder window breaks?\n\n";
  std::ofstream(dir + "/text.txt", std::ios::binary) << text;
  std::ostringstream log;
  train_lm({.data = dir + "/text.txt", .n_layer = 1, .n_head = 2, .n_embd = 32, .block_size = 16, .iters = 200,
            .batch_size = 8, .lr = 1e-2, .min_lr = 1e-3, .warmup = 2, .eval_interval = 200, .eval_iters = 2,
            .out = dir + "/run", .log = &log, .tty = false});

  std::ostringstream out1, out2, out3;
  GenerateTextOptions o{.checkpoint = dir + "/run", .prompt = "ROMEO:", .max_new_tokens = 40, .seed = 5, .out = &out1};
  std::string a = generate_text(o);
  EXPECT_EQ(a.size(), 40u);  // characters of an ASCII vocabulary: one byte per token
  EXPECT_EQ(out1.str(), "ROMEO:" + a + "\n");
  o.out = &out2;
  EXPECT_EQ(generate_text(o), a);  // the seed fixes the draws
  // Greedy decoding of a model trained on one repeated line continues it
  // (block_size 16 is shorter than the line: the context slides).
  o.temperature = 0;
  o.out = &out3;
  std::string greedy = generate_text(o);
  EXPECT_EQ(greedy.substr(0, 8), "\nBut sof") << greedy;

  EXPECT_KILN_ERROR(generate_text({.checkpoint = dir + "/run", .prompt = "ROMEO\xc3\xa9", .out = &out3}),
                    "[kiln generate] --prompt: ");
  EXPECT_KILN_ERROR(generate_text({.checkpoint = dir + "/run", .prompt = "", .out = &out3}), "--prompt must not be empty");
  EXPECT_KILN_ERROR(generate_text({.checkpoint = dir + "/none", .out = &out3}), "no such file or folder");
  EXPECT_KILN_ERROR(generate_text({.checkpoint = dir + "/run", .prompt = "R", .top_p = 0, .out = &out3}),
                    "--top-p must be in (0, 1], got 0");
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace kiln::app
