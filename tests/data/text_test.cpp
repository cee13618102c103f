// ByteDataset and CharDataset (ByteTokenizer and CharTokenizer over a file,
// tests/data/tokenizer_test.cpp): exact tokens of small files, the UTF-8 checks,
// and tinyshakespeare (65 characters, the char-rnn vocabulary) when present.
#include "kiln/data/text.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "kiln/data/dataloader.h"
#include "kiln/io/read_file.h"
#include "tests/support/data_testing.h"

namespace kiln::data {
namespace {

namespace fs = std::filesystem;

// $KILN_TEXT_DATA_DIR, else ../shared/data beside the checkout.
std::string shakespeare() {
  const char* env = std::getenv("KILN_TEXT_DATA_DIR");
  return (fs::path(env && *env ? env : KILN_SHARED_DATA_DIR) / "tinyshakespeare.txt").string();
}

class TextFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("kiln_text_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string file(const std::string& bytes, const char* name = "t.txt") {
    std::string p = (dir_ / name).string();
    testing::write_bytes(p, bytes);
    return p;
  }
  fs::path dir_;
};

std::vector<int64_t> values(const Tensor& t) { return t.to_vector<int64_t>(); }

TEST_F(TextFiles, BytesInNonOverlappingWindowsWithShiftedTargets) {
  ByteDataset ds(file("hello world\n"), 4);  // 12 tokens: (12 - 1) / 4 = 2 windows
  EXPECT_EQ(ds.size(), 2);
  EXPECT_EQ(ds.seq_len(), 4);
  EXPECT_EQ(ds.vocab_size(), 256);
  EXPECT_EQ(ds.tokens().numel(), 12);
  Example e0 = ds.get(0), e1 = ds.get(1);
  EXPECT_EQ(values(e0.input), (std::vector<int64_t>{'h', 'e', 'l', 'l'}));
  EXPECT_EQ(values(e0.target), (std::vector<int64_t>{'e', 'l', 'l', 'o'}));
  EXPECT_EQ(ByteDataset::decode(e1.input), "o wo");
  EXPECT_EQ(ByteDataset::decode(e1.target), " wor");
  EXPECT_KILN_ERROR(ds.get(2), "[ByteDataset.get] index 2 is out of range for 2 examples");
  EXPECT_EQ(ByteDataset::encode("\xff"
                                "A"),
            (std::vector<int64_t>{255, 65}));
  EXPECT_KILN_ERROR(ByteDataset::decode(std::vector<int64_t>{65, 256}),
                    "[ByteTokenizer.decode] id 256 at position 1 is outside the vocabulary [0, 256)");

  Batch out{empty({2, 4}, {.dtype = kI64}), empty({2, 4}, {.dtype = kI64})};
  std::vector<int64_t> idx{1, 0};
  ds.gather(idx, out);
  EXPECT_EQ(ByteDataset::decode(out.input.flatten()), "o wohell");
  EXPECT_EQ(ByteDataset::decode(out.target.flatten()), " worello");
  std::vector<int64_t> bad{1, 2};
  EXPECT_KILN_ERROR(ds.gather(bad, out), "[ByteDataset.gather] index 2 is out of range for 2 examples");
  Batch wrong{empty({2, 5}, {.dtype = kI64}), empty({2, 4}, {.dtype = kI64})};
  EXPECT_KILN_ERROR(ds.gather(idx, wrong), "[ByteDataset.gather] the batch's input is [2, 5] i64, expected [2, 4] i64");

  // Exactly seq_len + 1 tokens: one window.
  EXPECT_EQ(ByteDataset(file("abcde"), 4).size(), 1);
  EXPECT_EQ(ByteDataset(file("abcdefghi"), 4).size(), 2);

  // A loader batches windows: input and target [B, seq_len].
  auto shared = std::make_shared<ByteDataset>(file("0123456789abcdefghij"), 3);  // 19 / 3 = 6 windows
  DataLoader loader(shared, {.batch_size = 4, .shuffle = false, .prefetch = 1});
  Batch b = *loader.next();
  EXPECT_EQ(b.input.shape(), Shape({4, 3}));
  EXPECT_EQ(ByteDataset::decode(b.input.flatten()), "0123456789ab");
  EXPECT_EQ(ByteDataset::decode(b.target.flatten()), "123456789abc");
  Batch last = *loader.next();
  EXPECT_EQ(ByteDataset::decode(last.input.flatten()), "cdefgh");
  EXPECT_EQ(ByteDataset::decode(last.target.flatten()), "defghi");
}

TEST_F(TextFiles, CharactersAreCodePointsNumberedBySortedVocabulary) {
  // "añb€añ\n": 7 characters, 11 bytes; vocabulary by code point: \n a b ñ €.
  CharDataset ds(file("a\xc3\xb1"
                      "b\xe2\x82\xac"
                      "a\xc3\xb1\n"),
                 2);
  EXPECT_EQ(ds.vocab(), (std::vector<std::string>{"\n", "a", "b", "\xc3\xb1", "\xe2\x82\xac"}));
  EXPECT_EQ(ds.vocab_size(), 5);
  EXPECT_EQ(values(ds.tokens()), (std::vector<int64_t>{1, 3, 2, 4, 1, 3, 0}));
  EXPECT_EQ(ds.size(), 3);  // (7 - 1) / 2
  EXPECT_EQ(values(ds.get(1).input), (std::vector<int64_t>{2, 4}));
  EXPECT_EQ(values(ds.get(1).target), (std::vector<int64_t>{4, 1}));
  EXPECT_EQ(ds.decode(ds.get(2).target), "\xc3\xb1\n");
  EXPECT_EQ(ds.encode("\xe2\x82\xac"
                      "ab"),
            (std::vector<int64_t>{4, 1, 2}));
  EXPECT_EQ(ds.decode(ds.encode("b\xc3\xb1\xc3\xb1")), "b\xc3\xb1\xc3\xb1");
  EXPECT_KILN_ERROR(ds.encode("abz"),
                    "[CharTokenizer.encode] character 'z' (U+007A) at position 2 is not in the vocabulary");
  EXPECT_KILN_ERROR(ds.encode("a\xff"), "[CharTokenizer.encode] the text is not valid UTF-8: byte 0xff at offset 1");
  EXPECT_KILN_ERROR(ds.decode(std::vector<int64_t>{0, 5}),
                    "[CharTokenizer.decode] id 5 at position 1 is outside the vocabulary [0, 5)");
  EXPECT_KILN_ERROR(ds.decode(zeros({2, 2}, {.dtype = kI64})), "ids must be a 1-D i64 tensor, got [2, 2] i64");

  // A 4-byte character (U+1F600) is one token.
  CharDataset emoji(file("x\xf0\x9f\x98\x80x"), 1);
  EXPECT_EQ(emoji.vocab(), (std::vector<std::string>{"x", "\xf0\x9f\x98\x80"}));
  EXPECT_EQ(values(emoji.tokens()), (std::vector<int64_t>{0, 1, 0}));
}

// Issue 23: `train lm --data /dev/zero` read until the kernel killed it at
// 23.5 GB. Readers stop at a documented limit (kiln/io/read_file.h).
TEST_F(TextFiles, ReadsStopAtTheirLimit) {
  // /dev/zero never ends: the read stops one chunk past the limit.
  EXPECT_KILN_ERROR(io::read_file("reader", "/dev/zero", 100000, "a test"),
                    "[reader] cannot read /dev/zero: it is larger than the 97.7 KiB (100000 bytes) limit of a test");
  const std::string f = file("0123456789");
  EXPECT_EQ(io::read_file("reader", f, 10, "a test"), "0123456789");
  EXPECT_KILN_ERROR(io::read_file("reader", f, 9, "a test"), "it is larger than the 9 bytes (9 bytes) limit");
  EXPECT_EQ(io::read_file("reader", file(""), 0, "a test"), "");
  EXPECT_KILN_ERROR(io::read_file("reader", dir_.string(), 10, "a test"),
                    "[reader] cannot read " + dir_.string() + ": it is a folder, not a file");
  // A text data set over 1 GiB is refused before a byte is read (a sparse file: no disk used).
  const std::string big = (dir_ / "big.txt").string();
  { std::ofstream(big) << "x"; }
  std::filesystem::resize_file(big, uintmax_t(io::kMaxTextBytes) + 1);
  EXPECT_KILN_ERROR(ByteDataset(big, 8), "[ByteDataset] cannot read " + big +
                                             ": it is larger than the 1 GiB (1073741824 bytes) limit of a text data set");
  EXPECT_KILN_ERROR(CharDataset(big, 8), "limit of a text data set");
  std::filesystem::remove(big);
}

TEST_F(TextFiles, BadFilesAndArguments) {
  const std::string missing = (dir_ / "nope.txt").string();
  EXPECT_KILN_ERROR(CharDataset(missing, 8), "[CharDataset] cannot read " + missing + ": no such file");
  EXPECT_KILN_ERROR(ByteDataset(missing, 8), "[ByteDataset] cannot read " + missing + ": no such file");
  EXPECT_KILN_ERROR(ByteDataset(dir_.string(), 8), "[ByteDataset] cannot read " + dir_.string() + ": it is a folder, not a file");
  const std::string shorty = file("abcd");
  EXPECT_KILN_ERROR(ByteDataset(shorty, 4), "[ByteDataset] " + shorty + " holds 4 bytes, fewer than seq_len + 1 = 5");
  // 4 characters in 8 bytes: CharDataset counts characters.
  const std::string wide = file("\xc3\xb1\xc3\xb1\xc3\xb1\xc3\xb1");
  EXPECT_KILN_ERROR(CharDataset(wide, 4), wide + " holds 4 characters, fewer than seq_len + 1 = 5");
  EXPECT_EQ(ByteDataset(wide, 4).size(), 1);
  EXPECT_KILN_ERROR(ByteDataset(shorty, 0), "[ByteDataset] seq_len must be positive, got 0");
  EXPECT_KILN_ERROR(CharDataset(shorty, -3), "[CharDataset] seq_len must be positive, got -3");

  // Invalid UTF-8, each named by its first bad byte.
  const std::pair<std::string, std::string> bad[] = {
      {std::string("abc\xff") + "defgh", "byte 0xff at offset 3"},             // never valid
      {std::string("ab\x80") + "cdefgh", "byte 0x80 at offset 2"},             // stray continuation
      {std::string("abcdefg\xc3"), "byte 0xc3 at offset 7"},                   // truncated at the end
      {std::string("a\xc0\xaf") + "bcdefg", "byte 0xc0 at offset 1"},          // overlong '/'
      {std::string("a\xed\xa0\x80") + "bcdefg", "byte 0xed at offset 1"},      // a surrogate, U+D800
      {std::string("a\xf4\x90\x80\x80") + "bcdefg", "byte 0xf4 at offset 1"},  // beyond U+10FFFF
  };
  for (const auto& [bytes, where] : bad) {
    const std::string p = file(bytes);
    EXPECT_KILN_ERROR(CharDataset(p, 2), "[CharDataset] " + p + ": [CharTokenizer.train] the text is not valid UTF-8: " + where);
    EXPECT_EQ(ByteDataset(p, 2).vocab_size(), 256);  // any bytes are fine as bytes
  }
}

TEST(TinyShakespeare, CharAndByteLevel) {
  const std::string path = shakespeare();
  if (!fs::exists(path)) GTEST_SKIP() << "no " << path << " (set KILN_TEXT_DATA_DIR)";
  auto chars = std::make_shared<CharDataset>(path, 64);
  EXPECT_EQ(chars->vocab_size(), 65);
  std::string joined;
  for (const std::string& c : chars->vocab()) joined += c;
  EXPECT_EQ(joined, "\n !$&',-.3:;?ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz");
  EXPECT_EQ(chars->tokens().numel(), 1115394);
  EXPECT_EQ(chars->size(), 17428);  // (1115394 - 1) / 64
  Example e = chars->get(0);
  std::vector<int64_t> first = values(e.input);
  EXPECT_EQ(std::vector<int64_t>(first.begin(), first.begin() + 10),
            (std::vector<int64_t>{18, 47, 56, 57, 58, 1, 15, 47, 58, 47}));
  EXPECT_EQ(chars->decode(e.input), "First Citizen:\nBefore we proceed any further, hear me speak.\n\nAl");
  EXPECT_EQ(chars->decode(e.target), "irst Citizen:\nBefore we proceed any further, hear me speak.\n\nAll");
  EXPECT_EQ(chars->encode("First"), (std::vector<int64_t>{18, 47, 56, 57, 58}));

  ByteDataset bytes(path, 64);
  EXPECT_EQ(bytes.size(), 17428);
  EXPECT_EQ(ByteDataset::decode(bytes.get(17427).input), chars->decode(chars->get(17427).input));

  DataLoader loader(chars, {.batch_size = 32, .seed = 1});
  EXPECT_EQ(loader.size(), 545);  // ceil(17428 / 32)
  Batch b = *loader.next();
  EXPECT_EQ(b.input.shape(), Shape({32, 64}));
  EXPECT_EQ(b.target.shape(), Shape({32, 64}));
  // Row k's target is its input shifted by one.
  std::vector<int64_t> in = values(b.input[5]), tgt = values(b.target[5]);
  EXPECT_TRUE(std::equal(in.begin() + 1, in.end(), tgt.begin()));
}

}  // namespace
}  // namespace kiln::data
