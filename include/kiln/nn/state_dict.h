// StateDict: an ordered name -> Tensor map, the currency of module weights,
// checkpoints and model files. Keys are canonical dotted paths
// ("blocks.0.attn.qkv.weight"); order is insertion order (PyTorch's order for the
// same module structure).
#pragma once

#include <cstddef>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "kiln/core/tensor.h"

namespace kiln::nn {

class StateDict {
 public:
  using Item = std::pair<std::string, Tensor>;

  StateDict() = default;
  StateDict(std::initializer_list<Item> items);

  // Throws kiln::Error if `key` is already present: two tensors never share a name.
  void insert(std::string key, Tensor value);
  // Replaces the value of an existing key (keeping its position) or appends.
  void insert_or_assign(const std::string& key, Tensor value);
  bool erase(const std::string& key);

  bool contains(const std::string& key) const { return index_.count(key) != 0; }
  const Tensor* find(const std::string& key) const;
  // Throws kiln::Error("[StateDict] no key 'x'") when absent.
  const Tensor& at(const std::string& key) const;

  size_t size() const { return items_.size(); }
  bool empty() const { return items_.empty(); }
  std::vector<std::string> keys() const;
  auto begin() const { return items_.begin(); }
  auto end() const { return items_.end(); }

 private:
  std::vector<Item> items_;
  std::unordered_map<std::string, size_t> index_;  // key -> position in items_
};

}  // namespace kiln::nn
