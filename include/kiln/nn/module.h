// nn::Module: the base of every layer and model (SPECS §1, spec 000 "Modules").
//
//   struct Mlp : nn::Module {
//     nn::Shared<nn::Linear> fc1, fc2;
//     explicit Mlp(const nn::Init& init)
//         : fc1(register_module("fc1", nn::Linear(784, 256, init))),
//           fc2(register_module("fc2", nn::Linear(256, 10, init))) {}
//     Tensor forward(const Tensor& x) const { return fc2(relu(fc1(x))); }  // const, as every layer's
//   };
//
// A module registers its children, parameters and buffers by name in its
// constructor. register_module takes the child by value and returns a
// Shared<M>: shared ownership, called like the module (`fc1(x)` calls
// fc1->forward(x)). Registering the same Shared<M> in two places shares its
// weights; every traversal de-duplicates by identity (M3). Names are the
// canonical dotted paths of the traversal ("blocks.0.attn.qkv.weight"), equal to
// PyTorch's keys for the same structure (M5). Modules are movable, not copyable:
// sharing is always explicit.
#pragma once

#include <atomic>
#include <concepts>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <typeinfo>
#include <utility>
#include <vector>

#include "kiln/core/generator.h"
#include "kiln/core/tensor.h"
#include "kiln/nn/parameter.h"
#include "kiln/nn/state_dict.h"

namespace kiln::nn {

class Module;

namespace detail {
// "Linear" for kiln::nn::Linear: the demangled name without kiln's namespaces.
std::string pretty_type_name(const std::type_info& type);
}  // namespace detail

template <class M>
concept ModuleType = std::derived_from<M, Module>;

// Shared ownership of a module, called like it.
template <class M>
class Shared {
 public:
  Shared() = default;
  Shared(std::shared_ptr<M> p) : p_(std::move(p)) {}  // NOLINT: a Shared is a shared_ptr with a call operator
  template <class D>
    requires std::convertible_to<D*, M*>
  Shared(const Shared<D>& other) : p_(other.ptr()) {}  // NOLINT: upcast

  M* operator->() const { return p_.get(); }
  M& operator*() const { return *p_; }
  M* get() const { return p_.get(); }
  const std::shared_ptr<M>& ptr() const { return p_; }
  explicit operator bool() const { return p_ != nullptr; }

  template <class... Args>
  decltype(auto) operator()(Args&&... args) const {
    return p_->forward(std::forward<Args>(args)...);
  }

 private:
  std::shared_ptr<M> p_;
};

// A new module moved into shared ownership (what registering by value does).
template <class M>
Shared<std::remove_cvref_t<M>> share(M&& module) {
  static_assert(!std::is_lvalue_reference_v<M>, "pass a new module by value, or a Shared<M> to share one");
  static_assert(ModuleType<std::remove_cvref_t<M>>, "not a module");
  return Shared<std::remove_cvref_t<M>>(std::make_shared<std::remove_cvref_t<M>>(std::move(module)));
}

// A top-level model with a call operator: auto model = nn::make<Mlp>(rngs); model(x).
template <ModuleType M, class... Args>
Shared<M> make(Args&&... args) {
  return Shared<M>(std::make_shared<M>(std::forward<Args>(args)...));
}

// The parameters of a module, live (handles to the module's own slots, M6), with
// the names and the structure they were taken from. An optimizer keeps one and
// calls check() before each step: a structural edit of the module (a child,
// parameter or buffer registered later, a dtype cast) or a parameter whose
// dtype or shape changed would strand the optimizer's state, so it is an error
// (M9) instead of silent misbehaviour.
class ParameterList {
 public:
  ParameterList() = default;
  // Not bound to a module: check() compares dtypes and shapes only.
  ParameterList(std::vector<Parameter> params);  // NOLINT: {p1, p2} reads naturally

  size_t size() const { return params_.size(); }
  bool empty() const { return params_.empty(); }
  const Parameter& operator[](size_t i) const { return params_[i]; }
  auto begin() const { return params_.begin(); }
  auto end() const { return params_.end(); }
  const std::vector<Parameter>& params() const { return params_; }
  const std::vector<std::string>& names() const { return names_; }
  int64_t numel() const;

  // The parameters for which keep(name, param) holds, with their names and
  // the same edit watch: how optimizer groups are built from one model,
  //   auto all = model.parameters();
  //   auto head = all.filter([](const std::string& n, const Parameter&) { return n.starts_with("head."); });
  ParameterList filter(const std::function<bool(const std::string&, const Parameter&)>& keep) const;

  void check(const char* op) const;

 private:
  friend class Module;
  struct Seen {
    DType dtype;
    Shape shape;
  };
  struct Watch {
    std::shared_ptr<const std::atomic<uint64_t>> version;
    uint64_t seen;
    std::string path;  // of the module watched, for the message
  };
  std::vector<Parameter> params_;
  std::vector<std::string> names_;  // "#i" when unbound
  std::vector<Seen> seen_;
  std::vector<Watch> watches_;
};

struct LoadOptions {
  // Missing or unexpected keys are errors. Shape and dtype mismatches are
  // errors either way (as in PyTorch).
  bool strict = true;
  // The state dict comes from PyTorch: layers whose layout differs from
  // PyTorch's convert (ConvTranspose weights [I, O, ...] -> kiln's [O, I, ...]).
  bool torch_layout = false;
  // Keys the state may lack even when strict (a buffer added in a later
  // version, an optional head): a missing one keeps the module's value and is
  // listed in LoadResult::missing_keys, not an error. Full dotted keys.
  //   model.load_state_dict(sd, {.optional_keys = {"bn.num_batches_tracked"}});
  std::vector<std::string> optional_keys{};
};

struct LoadResult {
  std::vector<std::string> missing_keys;
  std::vector<std::string> unexpected_keys;
};

class Module {
 public:
  Module();
  virtual ~Module();
  Module(Module&&) noexcept;
  Module& operator=(Module&&) noexcept;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // ---- registration (in the constructor; later calls are structural edits) ----
  // Names are non-empty, contain no '.', and are unique within the module.
  template <class M>
  auto register_module(std::string name, M&& module) {
    return register_module(std::move(name), share(std::forward<M>(module)));
  }
  template <ModuleType M>
  Shared<M> register_module(std::string name, Shared<M> module) {
    add_child(std::move(name), module.ptr());
    return module;
  }
  // `value` becomes a leaf requiring grad; decay = false for biases and norm scales (M11).
  Parameter register_parameter(std::string name, const Tensor& value, bool decay = true);
  Parameter register_parameter(std::string name, Parameter param);  // shares an existing one (tied weights)
  // State that never gets gradients and is not in the optimizer or the parameter
  // count (M2); in the state dict unless persistent = false. Returned handle is
  // the registered tensor itself (updated in place, e.g. running statistics).
  Tensor register_buffer(std::string name, const Tensor& value, bool persistent = true);

  // ---- traversal (M5, M6): depth-first in registration order ----
  std::vector<std::pair<std::string, Parameter>> named_parameters(bool recurse = true) const;
  ParameterList parameters(bool recurse = true) const;
  std::vector<std::pair<std::string, Tensor>> named_buffers(bool recurse = true) const;
  std::vector<Tensor> buffers(bool recurse = true) const;
  // Includes this module as "" first, as PyTorch does.
  std::vector<std::pair<std::string, Module*>> named_modules() const;
  std::vector<std::pair<std::string, Module*>> named_children() const;
  int64_t num_parameters() const;  // elements of the de-duplicated parameters

  // ---- state (M7) ----
  // Parameters and persistent buffers under every path (a shared module appears
  // under each of its paths, as in PyTorch), as detached copies.
  StateDict state_dict() const;
  // Checks every key, shape and dtype before copying anything; on error the
  // module is untouched and the message names each offending key.
  LoadResult load_state_dict(const StateDict& state, const LoadOptions& options = {});
  // The checks of load_state_dict without the copy: throws what it would throw,
  // returns what it would return. Lets a checkpoint validate every part first.
  LoadResult check_state_dict(const StateDict& state, const LoadOptions& options = {}) const;

  // The random generators the modules own (Dropout's mask stream), under
  // "<module path>.<name>": not tensors, so not in the state dict, but saved by
  // checkpoints so that training resumes with the same masks (I3).
  std::vector<std::pair<std::string, Generator*>> named_generators();

  // ---- modes and bulk edits ----
  Module& train(bool on = true);  // recursive; does not touch grad mode (M8)
  Module& eval() { return train(false); }
  bool is_training() const { return training_; }
  Module& apply(const std::function<void(Module&)>& fn);  // children first, then this
  Module& to(DType dtype);  // casts floating parameters and buffers in place (a structural edit)
  Module& zero_grad();      // clears every parameter's grad
  Module& requires_grad_(bool on = true);  // false freezes every parameter

  // ---- mixed precision (M12; spec 001 ACT_DT) ----
  // The dtype this module and every descendant compute in: their activation-flow
  // dtype. On an f32 model, set_compute_dtype(kBF16) gives bf16 activations with
  // f32 master weights: matmul/conv layers (Linear, Conv*, MultiheadAttention,
  // TransformerBlock) cast their input and parameters with to() at the top of
  // forward and return bf16; Embedding returns its gathered rows in bf16; norms
  // compute in their parameters' dtype (f32) and return the compute dtype.
  // to() is differentiable, so f32 gradients reach the f32 parameters: the
  // optimizer, its state and the state dict do not change. Not a structural
  // edit. Returns *this. See docs/mixed_precision.md.
  Module& set_compute_dtype(DType dtype);
  // The dtype set by set_compute_dtype (on this module or an ancestor, at the
  // time of the call), or nullopt: the layer computes in its parameters' dtype
  // and casts nothing (the default).
  std::optional<DType> compute_dtype() const { return compute_dtype_; }
  // t cast to the compute dtype (differentiably); t itself when none is set,
  // when t is undefined or not floating, or when it has that dtype already. The
  // one place a layer casts its input and parameters.
  Tensor to_compute(const Tensor& t) const;
  // For a layer that computes in its parameters' dtype `dtype` (a norm): t cast
  // to `dtype` when a compute dtype is set (a bf16 activation is upcast), else t.
  Tensor to_precise(const Tensor& t, DType dtype) const;

  // "Linear", "Mlp": for printing and messages.
  virtual std::string type_name() const;
  // Constructor arguments, for printing: "in_features=784, out_features=256, bias=true".
  virtual std::string extra_repr() const { return {}; }
  // A PyTorch-style tree of the module and its children.
  std::string repr() const;

  // The generators this module itself owns (not its children's), by name.
  virtual std::vector<std::pair<std::string, Generator*>> own_generators() { return {}; }

  // How this module's own tensor `name` from a PyTorch state dict maps to kiln's
  // layout (LoadOptions::torch_layout). Identity unless the layouts differ.
  virtual Tensor from_torch(const std::string& name, const Tensor& value) const;

 protected:
  // Counts a structural edit; registration does it already.
  void mark_edited();

 private:
  struct ParamEntry {
    std::string name;
    Parameter param;
  };
  struct BufferEntry {
    std::string name;
    Tensor value;
    bool persistent;
  };
  struct ChildEntry {
    std::string name;
    std::shared_ptr<Module> module;
  };

  void add_child(std::string name, std::shared_ptr<Module> module);
  void check_new_name(const char* op, const std::string& name) const;
  template <class Fn>
  void walk(Fn&& fn, bool dedup, bool recurse = true) const;
  struct LoadPlan;
  LoadPlan plan_load(const StateDict& state, const LoadOptions& options) const;

  std::vector<ParamEntry> params_;
  std::vector<BufferEntry> buffers_;
  std::vector<ChildEntry> children_;
  bool training_ = true;
  std::optional<DType> compute_dtype_;  // set_compute_dtype; nullopt: the parameters' dtype
  std::shared_ptr<std::atomic<uint64_t>> version_;
};

std::ostream& operator<<(std::ostream& os, const Module& module);

}  // namespace kiln::nn
