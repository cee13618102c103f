// Tokenizers: BPE merges, encodings and GPT-2 chunks against the plain Python
// reference (tests/goldens/tokenizer_bpe.json, tools/goldens/bpe.py); round
// trips of random bytes; the JSON form, files and their damage; the char and
// byte tokenizers; TokenDataset over any tokenizer; tinyshakespeare at 4k.
#include "kiln/data/tokenizer.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <random>

#include "kiln/core/crc32c.h"
#include "kiln/data/bpe_tokenizer.h"
#include "kiln/data/dataloader.h"
#include "kiln/data/text.h"
#include "tests/support/data_testing.h"

namespace kiln::data {
namespace {

namespace fs = std::filesystem;
using testing::golden;

std::string unhex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) out += char(std::stoi(hex.substr(i, 2), nullptr, 16));
  return out;
}

std::vector<BpeTokenizer::Merge> merges_of(const nlohmann::json& j) {
  std::vector<BpeTokenizer::Merge> out;
  for (const auto& m : j) out.emplace_back(m[0].get<int32_t>(), m[1].get<int32_t>());
  return out;
}

std::string random_bytes(std::mt19937& rng, size_t n) {
  std::string s(n, '\0');
  for (char& c : s) c = char(rng() & 0xFF);
  return s;
}

std::string shakespeare() {
  const char* env = std::getenv("KILN_TEXT_DATA_DIR");
  return (fs::path(env && *env ? env : KILN_SHARED_DATA_DIR) / "tinyshakespeare.txt").string();
}

TEST(BpeGolden, Gpt2ChunksMatchTheRegex) {
  // The hand-written splitter against Python's re with the same byte classes.
  for (const auto& c : golden("tokenizer_bpe")["split"]) {
    const std::string text = unhex(c["text"]);
    std::vector<std::string> want;
    for (const auto& h : c["chunks"]) want.push_back(unhex(h));
    std::vector<std::string> got;
    for (std::string_view v : split_gpt2(text)) got.emplace_back(v);
    EXPECT_EQ(got, want) << "text hex " << c["text"];
  }
  // A few by hand, to read.
  const auto chunks = [](std::string_view s) {
    std::vector<std::string> out;
    for (std::string_view v : split_gpt2(s)) out.emplace_back(v);
    return out;
  };
  EXPECT_EQ(chunks("Hello  world's 42!\n"), (std::vector<std::string>{"Hello", " ", " world", "'s", " 42", "!", "\n"}));
  EXPECT_EQ(chunks("caf\xc3\xa9 \xff\xfe"), (std::vector<std::string>{"caf\xc3\xa9", " \xff\xfe"}));
  EXPECT_TRUE(split_gpt2("").empty());
}

TEST(BpeGolden, MergesAndEncodingsMatchThePythonReference) {
  for (const auto& c : golden("tokenizer_bpe")["cases"]) {
    SCOPED_TRACE(c["name"].get<std::string>());
    const Pretokenizer pre = pretokenizer_from_string(c["pretokenizer"], "test");
    const BpeTokenizer bpe =
        BpeTokenizer::train(unhex(c["train"]), {.vocab_size = c["vocab_size"].get<int64_t>(), .pretokenizer = pre});
    EXPECT_EQ(bpe.merges(), merges_of(c["merges"]));
    EXPECT_EQ(bpe.vocab_size(), 256 + int64_t(c["merges"].size()));
    EXPECT_EQ(bpe.pretokenizer(), pre);
    for (const auto& e : c["encode"]) {
      const std::string text = unhex(e["text"]);
      const std::vector<int64_t> ids = bpe.encode(text);
      EXPECT_EQ(ids, e["ids"].get<std::vector<int64_t>>()) << "text hex " << e["text"].get<std::string>().substr(0, 80);
      EXPECT_EQ(bpe.decode(ids), text);
    }
  }
}

TEST(BpeTokenizer, SmallCasesByHand) {
  // "aaaaaa": (a, a) x5 -> 256; [256 256 256]: (256, 256) x2 -> 257;
  // [257 256] -> 258; one token left, so training stops at 259 < 300.
  const BpeTokenizer bpe = BpeTokenizer::train("aaaaaa", {.vocab_size = 300, .pretokenizer = Pretokenizer::none});
  EXPECT_EQ(bpe.merges(), (std::vector<BpeTokenizer::Merge>{{'a', 'a'}, {256, 256}, {257, 256}}));
  EXPECT_EQ(bpe.vocab_size(), 259);
  EXPECT_EQ(bpe.encode("aaaaaa"), (std::vector<int64_t>{258}));
  EXPECT_EQ(bpe.encode("aaaaa"), (std::vector<int64_t>{257, 'a'}));
  EXPECT_EQ(bpe.token(258), "aaaaaa");
  EXPECT_EQ(bpe.token('a'), "a");
  // Ties: every pair of "ba ab" occurs once, so the smallest (left, right)
  // goes first: (' ', 'a') -> 256; then "b a 256 b", whose smallest is ('a', 256).
  const BpeTokenizer ties = BpeTokenizer::train("ba ab", {.vocab_size = 258, .pretokenizer = Pretokenizer::none});
  EXPECT_EQ(ties.merges(), (std::vector<BpeTokenizer::Merge>{{' ', 'a'}, {'a', 256}}));
  // vocab_size 256: no merges, the bytes themselves.
  const BpeTokenizer bytes = BpeTokenizer::train("hello", {.vocab_size = 256});
  EXPECT_TRUE(bytes.merges().empty());
  EXPECT_EQ(bytes.encode("hi\xff"), (std::vector<int64_t>{'h', 'i', 255}));
  // Merges never cross the chunks of "gpt2": " b" never joins "a".
  const BpeTokenizer chunked = BpeTokenizer::train("a b a b a b", {.vocab_size = 300});
  for (const auto& [l, r] : chunked.merges()) EXPECT_NE(l, 'a') << "a merge starting with 'a' crosses a chunk";
  EXPECT_EQ(chunked.encode("a b"), (std::vector<int64_t>{'a', 256}));  // 256 = " b"
}

TEST(BpeTokenizer, RandomBytesRoundTrip) {
  // Any bytes, including invalid UTF-8 and bytes the training text never had.
  std::mt19937 rng(7);
  const std::string train_text = "the cat sat on the mat; the dog ate 42 bones\n" + random_bytes(rng, 2000);
  for (Pretokenizer pre : {Pretokenizer::gpt2, Pretokenizer::none}) {
    const BpeTokenizer bpe = BpeTokenizer::train(train_text, {.vocab_size = 400, .pretokenizer = pre});
    EXPECT_EQ(bpe.vocab_size(), 400);
    for (int k = 0; k < 200; ++k) {
      const std::string s = k % 2 ? random_bytes(rng, rng() % 300) : train_text.substr(rng() % 1000, rng() % 500);
      const std::vector<int64_t> ids = bpe.encode(s);
      ASSERT_EQ(bpe.decode(ids), s);
      for (int64_t id : ids) ASSERT_TRUE(id >= 0 && id < bpe.vocab_size());
    }
    EXPECT_TRUE(bpe.encode("").empty());
    EXPECT_EQ(bpe.decode(std::vector<int64_t>{}), "");
  }
}

TEST(BpeTokenizer, Errors) {
  EXPECT_KILN_ERROR(BpeTokenizer::train("hello", {.vocab_size = 255}),
                    "[BpeTokenizer.train] vocab_size must be at least 256 (the byte values), got 255");
  EXPECT_KILN_ERROR(BpeTokenizer::train("", {.vocab_size = 300}), "[BpeTokenizer.train] the training text is empty");
  const BpeTokenizer bpe = BpeTokenizer::train("hello hello", {.vocab_size = 260});
  EXPECT_KILN_ERROR(bpe.decode(std::vector<int64_t>{104, 260}),
                    "[BpeTokenizer.decode] id 260 at position 1 is outside the vocabulary [0, 260)");
  EXPECT_KILN_ERROR(bpe.decode(std::vector<int64_t>{-1}), "id -1 at position 0 is outside the vocabulary");
  EXPECT_KILN_ERROR(bpe.decode(zeros({2, 2}, {.dtype = kI64})),
                    "[BpeTokenizer.decode] ids must be a 1-D i64 tensor, got [2, 2] i64");
  EXPECT_KILN_ERROR(bpe.token(999), "[BpeTokenizer.token] id 999 is outside the vocabulary [0, 260)");
  EXPECT_KILN_ERROR(BpeTokenizer({{1, 2}, {256, 300}}), "[BpeTokenizer] merge 1 is [256, 300]: its ids must be in [0, 257)");
  EXPECT_KILN_ERROR(BpeTokenizer({{1, 2}, {3, 4}, {1, 2}}), "[BpeTokenizer] merge 2 [1, 2] repeats merge 0");
  EXPECT_KILN_ERROR(pretokenizer_from_string("bert", "kiln train lm"),
                    "[kiln train lm] pretokenizer must be \"gpt2\" or \"none\", got \"bert\"");
  EXPECT_KILN_ERROR(BpeTokenizer::train_file("/nonexistent/t.txt"),
                    "[BpeTokenizer.train_file] cannot read /nonexistent/t.txt: no such file");
}

TEST(TokenizerFiles, SaveLoadAndJson) {
  const std::string dir = testing::fresh_dir();
  const BpeTokenizer bpe = BpeTokenizer::train("low lower lowest newer newest", {.vocab_size = 265});
  const std::string path = dir + "/bpe.json";
  bpe.save(path);
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator()), 1);  // no temporary left
  const BpeTokenizer again = BpeTokenizer::load(path);
  EXPECT_EQ(again.merges(), bpe.merges());
  EXPECT_EQ(again.pretokenizer(), Pretokenizer::gpt2);
  std::unique_ptr<Tokenizer> any = load_tokenizer(path);
  EXPECT_EQ(any->name(), "bpe");
  EXPECT_EQ(any->encode("lowest newest"), bpe.encode("lowest newest"));
  // The form: the envelope, then the fields; the file is that line.
  const nlohmann::json j = nlohmann::json::parse(bpe.to_json());
  EXPECT_EQ(j["format"], "kiln.tokenizer");
  EXPECT_EQ(j["version"], 1);
  EXPECT_EQ(j["type"], "bpe");
  EXPECT_EQ(j["vocab_size"], 265);
  EXPECT_EQ(j["merges"][0], nlohmann::json::parse("[119, 101]"));  // "we", 4 times ("lo" 3)
  EXPECT_EQ(testing::read_bytes(path), bpe.to_json() + "\n");
  EXPECT_EQ(BpeTokenizer::from_json(bpe.to_json()).merges(), bpe.merges());
  const BpeTokenizer none({{'a', 'b'}}, Pretokenizer::none);
  EXPECT_EQ(BpeTokenizer::from_json(none.to_json()).pretokenizer(), Pretokenizer::none);

  const CharTokenizer chars = CharTokenizer::train("hello \xe2\x82\xac");
  chars.save(dir + "/chars.json");
  std::unique_ptr<Tokenizer> c = load_tokenizer(dir + "/chars.json");
  EXPECT_EQ(c->name(), "char");
  EXPECT_EQ(static_cast<const CharTokenizer&>(*c).vocab(), chars.vocab());
  EXPECT_EQ(nlohmann::json::parse(chars.to_json())["vocab"], " ehlo\xe2\x82\xac");
  EXPECT_EQ(tokenizer_from_json(ByteTokenizer().to_json())->vocab_size(), 256);
  EXPECT_EQ(ByteTokenizer().to_json(), R"({"format":"kiln.tokenizer","version":1,"type":"byte"})");
}

TEST(TokenizerFiles, DamagedFilesAreNamedErrors) {
  const std::string dir = testing::fresh_dir();
  const BpeTokenizer bpe = BpeTokenizer::train("low lower lowest newer newest", {.vocab_size = 265});
  const std::string good = bpe.to_json();
  const std::string p = dir + "/t.json";
  const auto load = [&](const std::string& text) {
    testing::write_bytes(p, text);
    return BpeTokenizer::load(p);
  };
  const auto replaced = [&](const std::string& from, const std::string& to) {
    std::string s = good;
    const size_t at = s.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    return s.replace(at, from.size(), to);
  };
  // Cut short anywhere: never a tokenizer.
  for (size_t n : {size_t(0), size_t(1), good.size() / 3, good.size() / 2, good.size() - 1})
    EXPECT_KILN_ERROR(load(good.substr(0, n)), "[BpeTokenizer.load] " + p + ": not valid JSON (cut short or damaged)");
  // A merge changed (still well-formed): the checksum.
  EXPECT_KILN_ERROR(load(replaced("[119,101]", "[119,102]")), "the merges do not match their crc32c");
  EXPECT_KILN_ERROR(load(replaced("\"vocab_size\":265", "\"vocab_size\":266")),
                    "\"vocab_size\" 266 does not match 256 + 9 merges");
  EXPECT_KILN_ERROR(load(replaced("\"version\":1", "\"version\":2")), "format version 2 is not one this kiln reads (1)");
  EXPECT_KILN_ERROR(load(replaced("\"format\":\"kiln.tokenizer\"", "\"format\":\"x\"")),
                    "not a kiln tokenizer: \"format\" is \"x\", expected \"kiln.tokenizer\"");
  EXPECT_KILN_ERROR(load(replaced("\"type\":\"bpe\"", "\"type\":\"wordpiece\"")),
                    "unknown tokenizer type \"wordpiece\" (byte, char or bpe)");
  EXPECT_KILN_ERROR(load(replaced("\"pretokenizer\":\"gpt2\"", "\"pretokenizer\":\"gpt3\"")),
                    ": [BpeTokenizer] pretokenizer must be \"gpt2\" or \"none\", got \"gpt3\"");
  EXPECT_KILN_ERROR(load(replaced("[119,101]", "[119,-1]")), "merge 0 is [119, -1], expected a pair of token ids");
  EXPECT_KILN_ERROR(load(replaced("[119,101]", "[119]")), "merge 0 is [119], expected a pair of token ids");
  EXPECT_KILN_ERROR(load(replaced("\"crc32c\"", "\"crc\"")), "no \"crc32c\"");
  EXPECT_KILN_ERROR(load(replaced("{", "{\"extra\":1,")), "unexpected key \"extra\" in a bpe tokenizer");
  EXPECT_KILN_ERROR(load("[1, 2]"), "expected a JSON object, got [1, 2]");
  EXPECT_KILN_ERROR(load(ByteTokenizer().to_json()), "holds a \"byte\" tokenizer, not a \"bpe\" one");
  // A merge list that passes the checksum but not the rules: the constructor's check, named.
  const int32_t twice[] = {1, 2, 1, 2};
  const std::string forged = fmt::format(
      R"({{"format":"kiln.tokenizer","version":1,"type":"bpe","pretokenizer":"gpt2","vocab_size":258,)"
      R"("merges":[[1,2],[1,2]],"crc32c":{}}})",
      crc32c(twice, sizeof twice));
  EXPECT_KILN_ERROR(BpeTokenizer::from_json(forged), "[BpeTokenizer.from_json] [BpeTokenizer] merge 1 [1, 2] repeats merge 0");
  EXPECT_KILN_ERROR(BpeTokenizer::load(dir + "/missing.json"), "[BpeTokenizer.load] cannot read " + dir + "/missing.json");
  EXPECT_KILN_ERROR(tokenizer_from_json("{\"format\":\"kiln.tokenizer\",\"version\":1}"), "[tokenizer_from_json] no \"type\"");
  // Random damage (one byte changed, or the text cut and a byte appended):
  // always a kiln::Error, never a crash nor a different tokenizer.
  std::mt19937 rng(3);
  for (int k = 0; k < 2000; ++k) {
    std::string s = good;
    if (k % 2) s[rng() % s.size()] = char(rng() & 0xFF);
    else s = s.substr(0, rng() % s.size()) + char(rng() & 0xFF);
    if (s == good) continue;
    try {
      std::unique_ptr<Tokenizer> t = tokenizer_from_json(s);
      ADD_FAILURE() << "damaged text loaded as a " << t->name() << " tokenizer: " << s;
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()).rfind("[tokenizer_from_json] ", 0), 0u) << e.what();
    }
  }
  // The char vocabulary: its checksum and its order.
  std::string chars = CharTokenizer::train("abc").to_json();
  EXPECT_KILN_ERROR(tokenizer_from_json(chars.replace(chars.find("\"abc\""), 5, "\"abd\"")),
                    "[tokenizer_from_json] the characters do not match their crc32c");
}

TEST(CharTokenizer, SortedVocabularyAndErrors) {
  // "añb€añ\n": vocabulary by code point: \n a b ñ €.
  const CharTokenizer t = CharTokenizer::train("a\xc3\xb1" "b\xe2\x82\xac" "a\xc3\xb1\n");
  EXPECT_EQ(t.vocab(), (std::vector<std::string>{"\n", "a", "b", "\xc3\xb1", "\xe2\x82\xac"}));
  EXPECT_EQ(t.vocab_size(), 5);
  EXPECT_EQ(t.name(), "char");
  EXPECT_EQ(t.encode("\xe2\x82\xac" "ab"), (std::vector<int64_t>{4, 1, 2}));
  EXPECT_EQ(t.decode(t.encode("b\xc3\xb1\xc3\xb1")), "b\xc3\xb1\xc3\xb1");
  EXPECT_EQ(t.token(3), "\xc3\xb1");
  EXPECT_KILN_ERROR(t.encode("abz"), "[CharTokenizer.encode] character 'z' (U+007A) at position 2 is not in the vocabulary");
  EXPECT_KILN_ERROR(t.encode("a\xff"), "[CharTokenizer.encode] the text is not valid UTF-8: byte 0xff at offset 1");
  EXPECT_KILN_ERROR(t.decode(std::vector<int64_t>{0, 5}),
                    "[CharTokenizer.decode] id 5 at position 1 is outside the vocabulary [0, 5)");
  EXPECT_KILN_ERROR(CharTokenizer::train(""), "[CharTokenizer.train] the text is empty");
  EXPECT_KILN_ERROR(CharTokenizer::train("ab\xc0\xaf"), "[CharTokenizer.train] the text is not valid UTF-8: byte 0xc0 at offset 2");
  EXPECT_KILN_ERROR(CharTokenizer({U'b', U'a'}), "[CharTokenizer] characters must be distinct and in increasing code point order");
  EXPECT_KILN_ERROR(CharTokenizer({U'a', char32_t(0xD800)}), "[CharTokenizer] character U+D800 at 1 is not a Unicode scalar value");

  // By name, as a command line picks one.
  EXPECT_EQ(train_tokenizer("char", "hello")->vocab_size(), 4);
  EXPECT_EQ(train_tokenizer("byte", "hello")->vocab_size(), 256);
  EXPECT_EQ(train_tokenizer("bpe", "hello hello", {.vocab_size = 258})->vocab_size(), 258);
  EXPECT_KILN_ERROR(train_tokenizer("word", "hello"), "[train_tokenizer] unknown tokenizer 'word' (byte, char or bpe)");

  const ByteTokenizer bytes;
  EXPECT_EQ(bytes.encode("\xff" "A"), (std::vector<int64_t>{255, 65}));
  EXPECT_EQ(bytes.decode(std::vector<int64_t>{0, 255}), std::string("\x00\xff", 2));
  EXPECT_KILN_ERROR(bytes.decode(std::vector<int64_t>{256}), "[ByteTokenizer.decode] id 256 at position 0 is outside the vocabulary [0, 256)");
}

TEST(TokenDataset, WindowsOfAnyTokenizer) {
  const std::string dir = testing::fresh_dir();
  const std::string path = dir + "/t.txt";
  testing::write_bytes(path, "the cat and the hat and the bat\n");
  auto bpe = std::make_shared<BpeTokenizer>(BpeTokenizer::train("the cat and the hat and the bat\n", {.vocab_size = 264}));
  TokenDataset ds(path, bpe, 3);
  const std::vector<int64_t> ids = bpe->encode(testing::read_bytes(path));
  EXPECT_EQ(ds.tokens().to_vector<int64_t>(), ids);
  EXPECT_EQ(ds.vocab_size(), 264);
  EXPECT_EQ(ds.size(), (int64_t(ids.size()) - 1) / 3);
  EXPECT_EQ(ds.get(1).input.to_vector<int64_t>(), std::vector<int64_t>(ids.begin() + 3, ids.begin() + 6));
  EXPECT_EQ(ds.get(1).target.to_vector<int64_t>(), std::vector<int64_t>(ids.begin() + 4, ids.begin() + 7));
  EXPECT_EQ(ds.decode(ds.tokens()), "the cat and the hat and the bat\n");
  EXPECT_EQ(ds.tokenizer()->name(), "bpe");
  // A split of the same encoding, e.g. 90/10.
  TokenDataset head(std::vector<int64_t>(ids.begin(), ids.end() - 4), bpe, 2), tail(std::vector<int64_t>(ids.end() - 4, ids.end()), bpe, 2);
  EXPECT_EQ(head.decode(head.tokens()) + tail.decode(tail.tokens()), "the cat and the hat and the bat\n");
  EXPECT_EQ(tail.size(), 1);
  DataLoader loader(std::make_shared<TokenDataset>(path, bpe, 2), {.batch_size = 2, .shuffle = false, .prefetch = 1});
  EXPECT_EQ(loader.next()->input.shape(), Shape({2, 2}));

  EXPECT_KILN_ERROR(TokenDataset(std::vector<int64_t>{1, 264}, bpe, 1),
                    "[TokenDataset] token 264 at position 1 is outside the bpe vocabulary [0, 264)");
  EXPECT_KILN_ERROR(TokenDataset(std::vector<int64_t>{1, 2}, bpe, 2),
                    "[TokenDataset] the token sequence holds 2 tokens, fewer than seq_len + 1 = 3");
  EXPECT_KILN_ERROR(TokenDataset(path, nullptr, 2), "[TokenDataset] the tokenizer is null");
  auto chars = std::make_shared<CharTokenizer>(CharTokenizer::train("abc"));
  EXPECT_KILN_ERROR(TokenDataset(path, chars, 2), "[TokenDataset] " + path +
                                                      ": [CharTokenizer.encode] character 't' (U+0074) at position 0 is not in the vocabulary");
}

TEST(TinyShakespeare, Bpe4k) {
  const std::string path = shakespeare();
  if (!fs::exists(path)) GTEST_SKIP() << "no " << path << " (set KILN_TEXT_DATA_DIR)";
  const BpeTokenizer bpe = BpeTokenizer::train_file(path, {.vocab_size = 4096});
  EXPECT_EQ(bpe.vocab_size(), 4096);
  const std::string text = testing::read_bytes(path);
  const std::vector<int64_t> ids = bpe.encode(text);
  EXPECT_EQ(bpe.decode(ids), text);
  // About 3.2 bytes a token at 4k (344,092 tokens).
  EXPECT_LT(double(ids.size()), 0.35 * double(text.size()));
  EXPECT_GT(double(ids.size()), 0.25 * double(text.size()));
  EXPECT_EQ(bpe.decode(bpe.encode(" the")), " the");
  EXPECT_EQ(bpe.encode(" the").size(), 1u);
  TokenDataset ds(path, std::make_shared<BpeTokenizer>(bpe), 64);
  EXPECT_EQ(ds.tokens().numel(), int64_t(ids.size()));
}

}  // namespace
}  // namespace kiln::data
