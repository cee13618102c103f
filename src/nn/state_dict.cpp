#include "kiln/nn/state_dict.h"

#include "kiln/core/error.h"

namespace kiln::nn {

StateDict::StateDict(std::initializer_list<Item> items) {
  for (const auto& [key, value] : items) insert(key, value);
}

void StateDict::insert(std::string key, Tensor value) {
  KILN_CHECK(!contains(key), "StateDict", "duplicate key '{}'", key);
  index_.emplace(key, items_.size());
  items_.emplace_back(std::move(key), std::move(value));
}

void StateDict::insert_or_assign(const std::string& key, Tensor value) {
  auto it = index_.find(key);
  if (it == index_.end()) return insert(key, std::move(value));
  items_[it->second].second = std::move(value);
}

bool StateDict::erase(const std::string& key) {
  auto it = index_.find(key);
  if (it == index_.end()) return false;
  items_.erase(items_.begin() + std::ptrdiff_t(it->second));
  index_.clear();
  for (size_t i = 0; i < items_.size(); ++i) index_.emplace(items_[i].first, i);
  return true;
}

const Tensor* StateDict::find(const std::string& key) const {
  auto it = index_.find(key);
  return it == index_.end() ? nullptr : &items_[it->second].second;
}

const Tensor& StateDict::at(const std::string& key) const {
  const Tensor* t = find(key);
  KILN_CHECK(t != nullptr, "StateDict", "no key '{}'", key);
  return *t;
}

std::vector<std::string> StateDict::keys() const {
  std::vector<std::string> out;
  out.reserve(items_.size());
  for (const auto& item : items_) out.push_back(item.first);
  return out;
}

}  // namespace kiln::nn
