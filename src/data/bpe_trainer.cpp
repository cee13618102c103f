// BpeTokenizer::train: byte-pair merges learned with pair counts kept up to
// date merge by merge (no recount), over each distinct chunk once.
//
// NOTE [ BPE training ]
// The corpus is the distinct chunks, each with its count w (the number of
// times it occurs); with the pretokenizer "none" it is the whole text, w = 1.
// Their bytes sit end to end in one array of symbols linked as a list per
// chunk (sym, prev, next; a symbol merged into its left neighbour is -1).
// For every adjacent pair of ids, `pairs` keeps its count (the sum of w over
// its occurrences) and the positions where it has occurred (stale ones are
// skipped when read). A merge of (a, b) into id visits a's positions left to
// right and, at each live occurrence l a b r, moves w from (l, a) and (b, r)
// to (l, id) and (id, r): the work is proportional to the occurrences, not
// to the corpus. The most frequent pair comes from a max-heap of (count,
// pair) entries that are checked on the way out (lazy deletion): a pair whose
// count grew was pushed again after the merge; one whose count fell is pushed
// again with its count when its old entry surfaces. So the heap's first entry
// that matches its pair's count is the largest count, and among equal counts
// the smallest (left, right), as the Python reference picks it
// (tools/goldens/bpe.py).
#include <algorithm>
#include <queue>
#include <unordered_map>

#include "kiln/core/error.h"
#include "kiln/data/bpe_tokenizer.h"
#include "src/data/text_util.h"

namespace kiln::data {
namespace {

struct PairStats {
  int64_t count = 0;
  std::vector<int32_t> positions;  // where the pair starts or once started
};

struct HeapEntry {
  int64_t count;
  uint64_t key;  // detail::pair_key(left, right): comparing keys compares (left, right)
  // The priority_queue's top is the largest: the highest count, then the smallest pair.
  bool operator<(const HeapEntry& o) const { return count < o.count || (count == o.count && key > o.key); }
};

}  // namespace

BpeTokenizer BpeTokenizer::train(std::string_view text, const BpeOptions& options) {
  constexpr const char* op = "BpeTokenizer.train";
  KILN_CHECK(options.vocab_size >= 256, op, "vocab_size must be at least 256 (the byte values), got {}",
             options.vocab_size);
  KILN_CHECK(options.vocab_size <= INT32_MAX, op, "vocab_size {} is too large (at most {})", options.vocab_size,
             INT32_MAX);
  KILN_CHECK(!text.empty(), op, "the training text is empty");

  // The distinct chunks of two bytes or more (one byte holds no pair) and their counts.
  std::vector<std::pair<std::string_view, int64_t>> chunks;
  if (options.pretokenizer == Pretokenizer::gpt2) {
    std::unordered_map<std::string_view, int64_t> counts;
    for (std::string_view c : split_gpt2(text))
      if (c.size() >= 2) ++counts[c];
    chunks.assign(counts.begin(), counts.end());
    std::sort(chunks.begin(), chunks.end());  // an order independent of the hash table's
  } else {
    chunks.emplace_back(text, 1);
  }
  size_t total = 0;
  for (const auto& c : chunks) total += c.first.size();
  KILN_CHECK(total < size_t(INT32_MAX), op, "the distinct chunks hold {} bytes, more than {}", total, INT32_MAX - 1);

  std::vector<int32_t> sym(total), prev(total), next(total);
  std::vector<int64_t> weight(total);
  {
    int32_t at = 0;
    for (const auto& [chunk, count] : chunks) {
      const int32_t n = int32_t(chunk.size());
      for (int32_t i = 0; i < n; ++i) {
        sym[size_t(at + i)] = uint8_t(chunk[size_t(i)]);
        prev[size_t(at + i)] = i > 0 ? at + i - 1 : -1;
        next[size_t(at + i)] = i + 1 < n ? at + i + 1 : -1;
        weight[size_t(at + i)] = count;
      }
      at += n;
    }
  }
  std::unordered_map<uint64_t, PairStats> pairs;
  for (int32_t p = 0; p < int32_t(total); ++p) {
    if (next[size_t(p)] < 0) continue;
    PairStats& s = pairs[detail::pair_key(sym[size_t(p)], sym[size_t(next[size_t(p)])])];
    s.count += weight[size_t(p)];
    s.positions.push_back(p);
  }
  std::vector<HeapEntry> entries;
  entries.reserve(pairs.size());
  for (const auto& [key, s] : pairs) entries.push_back({s.count, key});
  std::priority_queue<HeapEntry> heap(std::less<HeapEntry>(), std::move(entries));

  std::vector<Merge> merges;
  std::vector<uint64_t> grown;  // pairs whose count rose during this merge
  const auto add = [&](uint64_t key, int64_t w) { pairs[key].count += w; };
  const auto add_at = [&](uint64_t key, int64_t w, int32_t p) {
    PairStats& s = pairs[key];
    s.count += w;
    s.positions.push_back(p);
    grown.push_back(key);
  };
  while (256 + int64_t(merges.size()) < options.vocab_size && !heap.empty()) {
    const HeapEntry top = heap.top();
    heap.pop();
    const auto it = pairs.find(top.key);
    const int64_t now = it == pairs.end() ? 0 : it->second.count;
    if (now != top.count) {
      if (now > 0 && now < top.count) heap.push({now, top.key});
      continue;
    }
    const int32_t a = int32_t(top.key >> 32), b = int32_t(top.key & 0xFFFFFFFFu);
    const int32_t id = 256 + int32_t(merges.size());
    merges.emplace_back(a, b);
    // Left to right, so that in "a a a" merging (a, a) takes the first two.
    std::vector<int32_t> positions = std::move(it->second.positions);
    std::sort(positions.begin(), positions.end());
    grown.clear();
    for (int32_t p : positions) {
      const int32_t q = next[size_t(p)];
      if (sym[size_t(p)] != a || q < 0 || sym[size_t(q)] != b) continue;  // no longer (a, b) here
      const int64_t w = weight[size_t(p)];
      const int32_t l = prev[size_t(p)], r = next[size_t(q)];
      if (l >= 0) {
        add(detail::pair_key(sym[size_t(l)], a), -w);
        add_at(detail::pair_key(sym[size_t(l)], id), w, l);
      }
      if (r >= 0) {
        add(detail::pair_key(b, sym[size_t(r)]), -w);
        add_at(detail::pair_key(id, sym[size_t(r)]), w, p);
      }
      sym[size_t(p)] = id;
      sym[size_t(q)] = -1;
      next[size_t(p)] = r;
      if (r >= 0) prev[size_t(r)] = p;
    }
    pairs.erase(top.key);
    std::sort(grown.begin(), grown.end());
    grown.erase(std::unique(grown.begin(), grown.end()), grown.end());
    for (uint64_t key : grown)
      if (const int64_t c = pairs[key].count; c > 0) heap.push({c, key});
  }
  return BpeTokenizer(std::move(merges), options.pretokenizer);
}

BpeTokenizer BpeTokenizer::train_file(const std::string& path, const BpeOptions& options) {
  constexpr const char* op = "BpeTokenizer.train_file";
  const std::string text = detail::read_file(op, path);
  KILN_CHECK(!text.empty(), op, "{} is empty", path);
  return train(text, options);
}

}  // namespace kiln::data
