// Containers (M4): Sequential, ModuleList, ModuleDict. Children are named
// "0", "1", ... (lists) or by key (dict), exactly as in PyTorch, so
// state-dict keys match ("layers.0.weight").
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "kiln/core/error.h"
#include "kiln/nn/module.h"

namespace kiln::nn {

namespace detail {
[[noreturn]] void throw_wrong_type(const char* op, const std::string& key, const Module& actual,
                                   const std::string& wanted);
}  // namespace detail

// Downcast a registered child; kiln::Error if it is another type.
template <ModuleType M>
Shared<M> cast_child(const char* op, const std::string& key, const std::shared_ptr<Module>& m) {
  auto typed = std::dynamic_pointer_cast<M>(m);
  if (!typed) detail::throw_wrong_type(op, key, *m, detail::pretty_type_name(typeid(M)));
  return typed;
}

// Applies its children in order to one value (spec 000: no RNG arguments; a
// stochastic layer in a Sequential uses its own stream, see Dropout).
//   nn::Sequential net(nn::Linear(784, 256, rngs), nn::ReLU(), nn::Linear(256, 10, rngs));
class Sequential : public Module {
 public:
  Sequential() = default;
  template <class... Ms>
  explicit Sequential(Ms&&... modules) {
    (push_back(std::forward<Ms>(modules)), ...);
  }

  // Each child's forward takes and returns one Tensor.
  template <class M>
  auto push_back(M&& module) {
    return push_back(share(std::forward<M>(module)));
  }
  template <ModuleType M>
  Shared<M> push_back(Shared<M> module) {
    // A requires-expression, not &M::forward: a forward overloaded on extra
    // arguments (Dropout's forward(x, rngs)) would make the pointer ambiguous.
    static_assert(requires(M& m, const Tensor& x) { { m.forward(x) } -> std::convertible_to<Tensor>; },
                  "a Sequential child needs Tensor forward(const Tensor&)");
    register_module(std::to_string(steps_.size()), module);
    modules_.push_back(module.ptr());
    steps_.push_back([m = module.get()](const Tensor& x) -> Tensor { return m->forward(x); });
    return module;
  }

  Tensor forward(const Tensor& x) const;

  size_t size() const { return steps_.size(); }
  Module& operator[](size_t i) const;
  template <ModuleType M>
  Shared<M> at(size_t i) const {
    return cast_child<M>("Sequential.at", std::to_string(i), child(i));
  }

 private:
  const std::shared_ptr<Module>& child(size_t i) const;
  std::vector<std::shared_ptr<Module>> modules_;
  std::vector<std::function<Tensor(const Tensor&)>> steps_;
};

// An indexed list of modules of any types; forward is yours to write.
class ModuleList : public Module {
 public:
  ModuleList() = default;

  template <class M>
  auto push_back(M&& module) {
    return push_back(share(std::forward<M>(module)));
  }
  template <ModuleType M>
  Shared<M> push_back(Shared<M> module) {
    register_module(std::to_string(modules_.size()), module);
    modules_.push_back(module.ptr());
    return module;
  }

  size_t size() const { return modules_.size(); }
  bool empty() const { return modules_.empty(); }
  Module& operator[](size_t i) const;
  template <ModuleType M>
  Shared<M> at(size_t i) const {
    return cast_child<M>("ModuleList.at", std::to_string(i), child(i));
  }
  auto begin() const { return modules_.begin(); }
  auto end() const { return modules_.end(); }

 private:
  const std::shared_ptr<Module>& child(size_t i) const;
  std::vector<std::shared_ptr<Module>> modules_;
};

// Modules by name, in insertion order.
class ModuleDict : public Module {
 public:
  ModuleDict() = default;

  template <class M>
  auto insert(const std::string& key, M&& module) {
    return insert(key, share(std::forward<M>(module)));
  }
  template <ModuleType M>
  Shared<M> insert(const std::string& key, Shared<M> module) {
    register_module(key, module);
    entries_.emplace_back(key, module.ptr());
    return module;
  }

  size_t size() const { return entries_.size(); }
  bool contains(const std::string& key) const;
  Module& operator[](const std::string& key) const;
  template <ModuleType M>
  Shared<M> at(const std::string& key) const {
    return cast_child<M>("ModuleDict.at", key, child(key));
  }
  std::vector<std::string> keys() const;
  auto begin() const { return entries_.begin(); }
  auto end() const { return entries_.end(); }

 private:
  const std::shared_ptr<Module>& child(const std::string& key) const;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> entries_;
};

}  // namespace kiln::nn
