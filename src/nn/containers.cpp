#include "kiln/nn/containers.h"

#include <fmt/format.h>

namespace kiln::nn {

namespace detail {

void throw_wrong_type(const char* op, const std::string& key, const Module& actual, const std::string& wanted) {
  KILN_FAIL(op, "child '{}' is a {}, not a {}", key, actual.type_name(), wanted);
}

}  // namespace detail

Tensor Sequential::forward(const Tensor& x) const {
  Tensor y = x;
  for (const auto& step : steps_) y = step(y);
  return y;
}

const std::shared_ptr<Module>& Sequential::child(size_t i) const {
  KILN_CHECK(i < modules_.size(), "Sequential", "index {} out of range for {} modules", i, modules_.size());
  return modules_[i];
}

Module& Sequential::operator[](size_t i) const { return *child(i); }

const std::shared_ptr<Module>& ModuleList::child(size_t i) const {
  KILN_CHECK(i < modules_.size(), "ModuleList", "index {} out of range for {} modules", i, modules_.size());
  return modules_[i];
}

Module& ModuleList::operator[](size_t i) const { return *child(i); }

bool ModuleDict::contains(const std::string& key) const {
  for (const auto& e : entries_)
    if (e.first == key) return true;
  return false;
}

const std::shared_ptr<Module>& ModuleDict::child(const std::string& key) const {
  for (const auto& e : entries_)
    if (e.first == key) return e.second;
  KILN_FAIL("ModuleDict", "no module named '{}' (keys: {})", key, fmt::join(keys(), ", "));
}

Module& ModuleDict::operator[](const std::string& key) const { return *child(key); }

std::vector<std::string> ModuleDict::keys() const {
  std::vector<std::string> out;
  for (const auto& e : entries_) out.push_back(e.first);
  return out;
}

}  // namespace kiln::nn
