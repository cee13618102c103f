// BpeTokenizer: the GPT-2 pre-tokenization rule on byte classes, encoding by
// merge rank, and the JSON form. Training is src/data/bpe_trainer.cpp.
#include "kiln/data/bpe_tokenizer.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <functional>

#include "kiln/core/crc32c.h"
#include "kiln/core/error.h"
#include "kiln/io/read_file.h"
#include "src/data/text_util.h"
#include "src/data/tokenizer_json.h"

namespace kiln::data {

using nlohmann::json;

// ---- pre-tokenization ----

const char* to_string(Pretokenizer p) { return p == Pretokenizer::gpt2 ? "gpt2" : "none"; }

Pretokenizer pretokenizer_from_string(const std::string& name, const char* op) {
  if (name == "gpt2") return Pretokenizer::gpt2;
  if (name == "none") return Pretokenizer::none;
  KILN_FAIL(op, "pretokenizer must be \"gpt2\" or \"none\", got \"{}\"", name);
}

namespace {

// The byte classes of split_gpt2, standing in for \p{L}, \p{N}, \s and the rest.
enum ByteClass : uint8_t { kLetter, kDigit, kSpace, kPunct };

constexpr std::array<uint8_t, 256> kClasses = [] {
  std::array<uint8_t, 256> c{};
  for (int b = 0; b < 256; ++b) {
    if ((b >= 'A' && b <= 'Z') || (b >= 'a' && b <= 'z') || b >= 0x80) c[size_t(b)] = kLetter;
    else if (b >= '0' && b <= '9') c[size_t(b)] = kDigit;
    else if (b == ' ' || b == '\t' || b == '\n' || b == '\v' || b == '\f' || b == '\r') c[size_t(b)] = kSpace;
    else c[size_t(b)] = kPunct;
  }
  return c;
}();

inline uint8_t byte_class(char c) { return kClasses[uint8_t(c)]; }

// The length of the contraction ('s 't 'm 'd 're 've 'll) at s[i] == '\'', else 0.
size_t contraction(std::string_view s, size_t i) {
  if (i + 1 >= s.size()) return 0;
  const char a = s[i + 1];
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
  if (i + 2 >= s.size()) return 0;
  const char b = s[i + 2];
  return (a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l') ? 3 : 0;
}

}  // namespace

std::vector<std::string_view> split_gpt2(std::string_view s) {
  std::vector<std::string_view> out;
  out.reserve(s.size() / 4);
  const size_t n = s.size();
  // The end of the run of class c starting at j.
  const auto run = [&](size_t j, uint8_t c) {
    while (j < n && byte_class(s[j]) == c) ++j;
    return j;
  };
  for (size_t i = 0; i < n;) {
    // The regex's alternatives in order; the first that matches at i wins.
    const uint8_t c = byte_class(s[i]);
    size_t end;
    if (const size_t k = s[i] == '\'' ? contraction(s, i) : 0) {
      end = i + k;  // 's|'t|'re|'ve|'m|'ll|'d
    } else if (c != kSpace) {
      end = run(i + 1, c);  // \p{L}+, \p{N}+, [^\s\p{L}\p{N}]+ without the space
    } else if (s[i] == ' ' && i + 1 < n && byte_class(s[i + 1]) != kSpace) {
      end = run(i + 2, byte_class(s[i + 1]));  // the same runs after one space
    } else {
      // \s+(?!\S): a whitespace run, less its last byte when a word follows
      // (that byte starts the next chunk); \s+ when the run is one byte.
      const size_t j = run(i + 1, kSpace);
      end = j == n || j - i == 1 ? j : j - 1;
    }
    out.push_back(s.substr(i, end - i));
    i = end;
  }
  return out;
}

// ---- encoding ----

namespace {

// Reused buffers of encode_chunk: a chunk's symbols as a linked list (sym -1:
// merged into its left neighbour) and a min-heap of (rank << 32 | position).
struct ChunkScratch {
  std::vector<int32_t> sym, next, prev;
  std::vector<uint64_t> heap;
};

// Applies the merges to one chunk, lowest rank first and, within a rank,
// leftmost first: the same result as repeatedly merging every occurrence,
// left to right, of the lowest-ranked pair present (what the Python reference
// does), since merging rank r only creates pairs of higher ranks.
void encode_chunk(const std::unordered_map<uint64_t, int32_t>& ranks, std::string_view chunk, ChunkScratch& s,
                  std::vector<int32_t>& out) {
  const int32_t n = int32_t(chunk.size());
  if (n == 1 || ranks.empty()) {
    for (char c : chunk) out.push_back(uint8_t(c));
    return;
  }
  s.sym.resize(size_t(n));
  s.next.resize(size_t(n));
  s.prev.resize(size_t(n));
  s.heap.clear();
  for (int32_t i = 0; i < n; ++i) {
    s.sym[size_t(i)] = uint8_t(chunk[size_t(i)]);
    s.prev[size_t(i)] = i - 1;
    s.next[size_t(i)] = i + 1 < n ? i + 1 : -1;
  }
  const auto rank_at = [&](int32_t p) -> int64_t {  // rank of the pair starting at p, or -1
    const int32_t q = s.next[size_t(p)];
    if (q < 0) return -1;
    const auto it = ranks.find(detail::pair_key(s.sym[size_t(p)], s.sym[size_t(q)]));
    return it == ranks.end() ? -1 : it->second;
  };
  const std::greater<uint64_t> min_first;
  const auto push = [&](int32_t p) {
    if (const int64_t r = rank_at(p); r >= 0) {
      s.heap.push_back(uint64_t(r) << 32 | uint32_t(p));
      std::push_heap(s.heap.begin(), s.heap.end(), min_first);
    }
  };
  for (int32_t i = 0; i + 1 < n; ++i)
    if (const int64_t r = rank_at(i); r >= 0) s.heap.push_back(uint64_t(r) << 32 | uint32_t(i));
  std::make_heap(s.heap.begin(), s.heap.end(), min_first);
  while (!s.heap.empty()) {
    std::pop_heap(s.heap.begin(), s.heap.end(), min_first);
    const uint64_t e = s.heap.back();
    s.heap.pop_back();
    const int32_t r = int32_t(e >> 32), p = int32_t(e & 0xFFFFFFFFu);
    // Stale entries: p was merged away, or its pair changed since the push
    // (a rank names one pair, so an equal rank means the same pair).
    if (s.sym[size_t(p)] < 0 || rank_at(p) != r) continue;
    const int32_t q = s.next[size_t(p)];
    s.sym[size_t(p)] = 256 + r;
    s.sym[size_t(q)] = -1;
    s.next[size_t(p)] = s.next[size_t(q)];
    if (s.next[size_t(p)] >= 0) s.prev[size_t(s.next[size_t(p)])] = p;
    if (s.prev[size_t(p)] >= 0) push(s.prev[size_t(p)]);
    push(p);
  }
  for (int32_t p = 0; p >= 0; p = s.next[size_t(p)]) out.push_back(s.sym[size_t(p)]);
}

uint32_t merges_crc(const std::vector<BpeTokenizer::Merge>& merges) {
  // The pairs as little-endian i32 (this machine's order; kiln needs little-endian).
  std::vector<int32_t> flat;
  flat.reserve(merges.size() * 2);
  for (const auto& [l, r] : merges) flat.insert(flat.end(), {l, r});
  return crc32c(flat.data(), flat.size() * sizeof(int32_t));
}

}  // namespace

BpeTokenizer::BpeTokenizer(std::vector<Merge> merges, Pretokenizer pretokenizer)
    : Tokenizer("BpeTokenizer"), merges_(std::move(merges)), pretokenizer_(pretokenizer) {
  constexpr const char* op = "BpeTokenizer";
  KILN_CHECK(merges_.size() <= size_t(INT32_MAX - 256), op, "{} merges are too many (at most {})", merges_.size(),
             INT32_MAX - 256);
  tokens_.resize(256 + merges_.size());
  for (int i = 0; i < 256; ++i) tokens_[size_t(i)] = std::string(1, char(uint8_t(i)));
  ranks_.reserve(merges_.size());
  for (size_t r = 0; r < merges_.size(); ++r) {
    const auto [left, right] = merges_[r];
    const int64_t below = 256 + int64_t(r);
    KILN_CHECK(left >= 0 && left < below && right >= 0 && right < below, op,
               "merge {} is [{}, {}]: its ids must be in [0, {}) (the tokens made before it)", r, left, right, below);
    const auto [it, fresh] = ranks_.emplace(detail::pair_key(left, right), int32_t(r));
    KILN_CHECK(fresh, op, "merge {} [{}, {}] repeats merge {}", r, left, right, it->second);
    tokens_[size_t(below)] = tokens_[size_t(left)] + tokens_[size_t(right)];
  }
}

std::vector<int64_t> BpeTokenizer::encode(std::string_view text) const {
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 2);
  ChunkScratch scratch;
  if (pretokenizer_ == Pretokenizer::none) {
    KILN_CHECK(text.size() < size_t(INT32_MAX), "BpeTokenizer.encode",
               "a text of {} bytes is too long for the pretokenizer \"none\" (at most {})", text.size(), INT32_MAX - 1);
    if (!text.empty()) encode_chunk(ranks_, text, scratch, ids);
  } else {
    // Chunks repeat (" the", " and"): each distinct one is merged once, its
    // ids kept at cache[chunk] = {offset, length} in `cached`.
    std::unordered_map<std::string_view, std::pair<size_t, size_t>> cache;
    std::vector<int32_t> cached;
    for (std::string_view chunk : split_gpt2(text)) {
      if (chunk.size() == 1) {
        ids.push_back(uint8_t(chunk[0]));
        continue;
      }
      auto [it, fresh] = cache.try_emplace(chunk);
      if (fresh) {
        KILN_CHECK(chunk.size() < size_t(INT32_MAX), "BpeTokenizer.encode", "a chunk of {} bytes is too long",
                   chunk.size());
        const size_t start = cached.size();
        encode_chunk(ranks_, chunk, scratch, cached);
        it->second = {start, cached.size() - start};
      }
      ids.insert(ids.end(), cached.begin() + ptrdiff_t(it->second.first),
                 cached.begin() + ptrdiff_t(it->second.first + it->second.second));
    }
  }
  return std::vector<int64_t>(ids.begin(), ids.end());
}

// ---- the JSON form ----

std::string BpeTokenizer::to_json() const {
  nlohmann::ordered_json j = detail::tokenizer_json("bpe");
  j["pretokenizer"] = to_string(pretokenizer_);
  j["vocab_size"] = vocab_size();
  json merges = json::array();
  for (const auto& [l, r] : merges_) merges.push_back({l, r});
  j["merges"] = std::move(merges);
  j["crc32c"] = merges_crc(merges_);
  return j.dump();
}

namespace detail {

BpeTokenizer bpe_from_json(const TokenizerJsonReader& r, const json& j) {
  const std::string& name = r.string(j.at("pretokenizer"), "pretokenizer");
  const Pretokenizer pretokenizer = r.build([&] { return pretokenizer_from_string(name, "BpeTokenizer"); });
  const json& list = j.at("merges");
  if (!list.is_array()) r.fail("\"merges\" is {}, expected an array of [left, right] id pairs", io::detail::brief(list));
  std::vector<BpeTokenizer::Merge> merges;
  merges.reserve(list.size());
  for (size_t i = 0; i < list.size(); ++i) {
    const json& m = list[i];
    const bool ok = m.is_array() && m.size() == 2 && m[0].is_number_unsigned() && m[1].is_number_unsigned() &&
                    m[0].get<uint64_t>() < uint64_t(INT32_MAX) && m[1].get<uint64_t>() < uint64_t(INT32_MAX);
    if (!ok) r.fail("merge {} is {}, expected a pair of token ids [left, right]", i, io::detail::brief(m));
    merges.emplace_back(int32_t(m[0].get<uint64_t>()), int32_t(m[1].get<uint64_t>()));
  }
  const uint64_t vocab_size = r.u64(j.at("vocab_size"), "vocab_size");
  if (vocab_size != 256 + merges.size())
    r.fail("\"vocab_size\" {} does not match 256 + {} merges (the file is cut short or damaged)", vocab_size,
           merges.size());
  r.check_crc(j, merges_crc(merges), "merges");
  return r.build([&] { return BpeTokenizer(std::move(merges), pretokenizer); });
}

}  // namespace detail

namespace {

BpeTokenizer only_bpe(const detail::TokenizerJsonReader& r, std::string_view text) {
  std::unique_ptr<Tokenizer> t = detail::from_json(r, text);
  auto* bpe = dynamic_cast<BpeTokenizer*>(t.get());
  if (!bpe) r.fail("holds a \"{}\" tokenizer, not a \"bpe\" one", t->name());
  return std::move(*bpe);
}

}  // namespace

std::unique_ptr<Tokenizer> train_tokenizer(const std::string& name, std::string_view text, const BpeOptions& bpe) {
  if (name == "byte") return std::make_unique<ByteTokenizer>();
  if (name == "char") return std::make_unique<CharTokenizer>(CharTokenizer::train(text));
  if (name == "bpe") return std::make_unique<BpeTokenizer>(BpeTokenizer::train(text, bpe));
  KILN_FAIL("train_tokenizer", "unknown tokenizer '{}' (byte, char or bpe)", name);
}

BpeTokenizer BpeTokenizer::from_json(std::string_view json) { return only_bpe({"BpeTokenizer.from_json", ""}, json); }

BpeTokenizer BpeTokenizer::load(const std::string& path) {
  constexpr const char* op = "BpeTokenizer.load";
  return only_bpe({op, path}, io::read_file(op, path, io::kMaxJsonBytes, "a tokenizer JSON file"));
}

}  // namespace kiln::data
