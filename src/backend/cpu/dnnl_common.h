// What kiln's oneDNN kernels (matmul.cpp, conv.cpp) share: one engine and
// stream, the calling thread's OpenMP count, and a per-thread LRU of
// primitives keyed by geometry.
#pragma once

#include <omp.h>

#include <oneapi/dnnl/dnnl.hpp>

#include <cstdint>
#include <list>
#include <unordered_map>
#include <utility>

#include "kiln/core/parallel.h"

namespace kiln::backend::cpu::dnnl_common {

/// One CPU engine for the process.
dnnl::engine& engine();
/// One stream; CPU streams execute in the calling thread.
dnnl::stream& stream();

/// oneDNN's OpenMP code plans and runs with the calling thread's OpenMP
/// count. This sets it to n for the guard's lifetime and leaves it at kiln's
/// count afterwards, whatever it was before (someone else may have changed it).
class OmpThreads {
 public:
  explicit OmpThreads(int n) {
    if (omp_get_max_threads() != n) omp_set_num_threads(n);
  }
  ~OmpThreads() {
    const int kiln_count = get_num_threads();
    if (omp_get_max_threads() != kiln_count) omp_set_num_threads(kiln_count);
  }
  OmpThreads(const OmpThreads&) = delete;
  OmpThreads& operator=(const OmpThreads&) = delete;
};

/// FNV-1a over n 64-bit words (cache keys).
inline size_t hash_words(const int64_t* v, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; ++i) h = (h ^ uint64_t(v[i])) * 1099511628211ull;
  return size_t(h);
}

/// A least-recently-used map holding at most `capacity` entries; entries stay
/// at one address until evicted. One per thread: no locking.
template <class Key, class Entry, class Hash>
class LruCache {
 public:
  explicit LruCache(size_t capacity) : capacity_(capacity) {}

  Entry* find(const Key& k) {
    auto it = map_.find(k);
    if (it == map_.end()) {
      ++misses_;
      return nullptr;
    }
    ++hits_;
    lru_.splice(lru_.begin(), lru_, it->second);
    return &it->second->second;
  }
  Entry* insert(const Key& k, Entry e) {
    if (map_.size() >= capacity_) {
      map_.erase(lru_.back().first);
      lru_.pop_back();
    }
    lru_.emplace_front(k, std::move(e));
    map_[k] = lru_.begin();
    return &lru_.front().second;
  }
  int64_t hits() const { return hits_; }
  int64_t misses() const { return misses_; }
  int64_t size() const { return int64_t(map_.size()); }

 private:
  size_t capacity_;
  std::list<std::pair<Key, Entry>> lru_;
  std::unordered_map<Key, typename std::list<std::pair<Key, Entry>>::iterator, Hash> map_;
  int64_t hits_ = 0, misses_ = 0;
};

}  // namespace kiln::backend::cpu::dnnl_common
