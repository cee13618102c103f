#include "kiln/nn/module.h"

#include <cxxabi.h>

#include <cstdlib>
#include <ostream>
#include <sstream>
#include <typeinfo>
#include <unordered_set>

#include <fmt/format.h>

#include "kiln/core/error.h"
#include "kiln/core/grad_mode.h"
#include "kiln/ops/shape.h"

namespace kiln::nn {

namespace {

std::string join_path(const std::string& prefix, const std::string& name) {
  return prefix.empty() ? name : prefix + "." + name;
}

// Replaces what `dst` holds by `src`'s data (contiguous), keeping dst's identity:
// every handle to it (the module's member, the registry, an alias the user kept)
// sees the new dtype. Its grad no longer matches and is dropped.
void replace_data(const Tensor& dst, const Tensor& src) {
  Tensor c = src.contiguous();
  TensorImpl& d = *dst.impl();
  const TensorImpl& s = *c.impl();
  d.storage = s.storage;
  d.shape = s.shape;
  d.strides = s.strides;
  d.offset = s.offset;
  d.numel = s.numel;
  d.dtype = s.dtype;
  d.is_view = false;
  if (d.autograd) d.autograd->grad.reset();
}

}  // namespace

// ---------------------------------------------------------------- ParameterList

ParameterList::ParameterList(std::vector<Parameter> params) : params_(std::move(params)) {
  for (size_t i = 0; i < params_.size(); ++i) {
    KILN_CHECK(params_[i].defined(), "ParameterList", "parameter #{} is undefined", i);
    names_.push_back(fmt::format("#{}", i));
    seen_.push_back({params_[i].dtype(), params_[i].shape()});
  }
}

int64_t ParameterList::numel() const {
  int64_t n = 0;
  for (const Parameter& p : params_) n += p.numel();
  return n;
}

ParameterList ParameterList::filter(const std::function<bool(const std::string&, const Parameter&)>& keep) const {
  ParameterList out;
  out.watches_ = watches_;
  for (size_t i = 0; i < params_.size(); ++i)
    if (keep(names_[i], params_[i])) {
      out.params_.push_back(params_[i]);
      out.names_.push_back(names_[i]);
      out.seen_.push_back(seen_[i]);
    }
  return out;
}

void ParameterList::check(const char* op) const {
  for (const Watch& w : watches_)
    KILN_CHECK(w.version->load(std::memory_order_relaxed) == w.seen, op,
               "module '{}' was edited (a child, parameter or buffer registered, or a dtype cast) after its "
               "parameters were taken; state kept for the old structure would be stranded: create a new "
               "optimizer",
               w.path.empty() ? "<root>" : w.path);
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& v = params_[i].value();
    KILN_CHECK(v.dtype() == seen_[i].dtype && v.shape() == seen_[i].shape, op,
               "parameter '{}' is now {} but was {} {} when its parameters were taken: create a new optimizer",
               names_[i], describe(v), to_string(seen_[i].shape), name(seen_[i].dtype));
  }
}

// ---------------------------------------------------------------- Module

Module::Module() : version_(std::make_shared<std::atomic<uint64_t>>(0)) {}
Module::~Module() = default;
Module::Module(Module&&) noexcept = default;
Module& Module::operator=(Module&&) noexcept = default;

void Module::mark_edited() { version_->fetch_add(1, std::memory_order_relaxed); }

void Module::check_new_name(const char* op, const std::string& n) const {
  KILN_CHECK(!n.empty(), op, "name is empty");
  KILN_CHECK(n.find('.') == std::string::npos, op, "name '{}' contains '.' (paths are built with '.')", n);
  bool taken = false;
  for (const auto& e : params_) taken |= e.name == n;
  for (const auto& e : buffers_) taken |= e.name == n;
  for (const auto& e : children_) taken |= e.name == n;
  KILN_CHECK(!taken, op, "{} already has a child, parameter or buffer named '{}'", type_name(), n);
}

void Module::add_child(std::string n, std::shared_ptr<Module> module) {
  check_new_name("register_module", n);
  KILN_CHECK(module != nullptr, "register_module", "module '{}' is null", n);
  for (const auto& [path, m] : module->named_modules())
    KILN_CHECK(m != this, "register_module", "registering '{}' would make {} its own descendant (at '{}')", n,
               type_name(), path);
  children_.push_back({std::move(n), std::move(module)});
  mark_edited();
}

Parameter Module::register_parameter(std::string n, const Tensor& value, bool decay) {
  return register_parameter(std::move(n), Parameter(value, decay));
}

Parameter Module::register_parameter(std::string n, Parameter param) {
  check_new_name("register_parameter", n);
  KILN_CHECK(param.defined(), "register_parameter", "parameter '{}' is undefined", n);
  params_.push_back({std::move(n), param});
  mark_edited();
  return param;
}

Tensor Module::register_buffer(std::string n, const Tensor& value, bool persistent) {
  check_new_name("register_buffer", n);
  KILN_CHECK(value.defined(), "register_buffer", "buffer '{}' is an undefined tensor", n);
  Tensor b = value.detach();
  buffers_.push_back({std::move(n), b, persistent});
  mark_edited();
  return b;
}

// Calls fn(path, module) depth first: once per module (dedup) or once per path;
// only on this module unless recurse.
template <class Fn>
void Module::walk(Fn&& fn, bool dedup, bool recurse) const {
  std::unordered_set<const Module*> seen;
  std::function<void(const std::string&, const Module&)> visit = [&](const std::string& path, const Module& m) {
    if (dedup && !seen.insert(&m).second) return;
    fn(path, m);
    if (recurse)
      for (const auto& c : m.children_) visit(join_path(path, c.name), *c.module);
  };
  visit({}, *this);
}

std::vector<std::pair<std::string, Module*>> Module::named_modules() const {
  std::vector<std::pair<std::string, Module*>> out;
  walk([&](const std::string& path, const Module& m) { out.emplace_back(path, const_cast<Module*>(&m)); }, true);
  return out;
}

std::vector<std::pair<std::string, Module*>> Module::named_children() const {
  std::vector<std::pair<std::string, Module*>> out;
  std::unordered_set<const Module*> seen;
  for (const auto& c : children_)
    if (seen.insert(c.module.get()).second) out.emplace_back(c.name, c.module.get());
  return out;
}

std::vector<std::pair<std::string, Parameter>> Module::named_parameters(bool recurse) const {
  std::vector<std::pair<std::string, Parameter>> out;
  std::unordered_set<const void*> seen;
  auto take = [&](const std::string& path, const Module& m) {
    for (const auto& e : m.params_)
      if (seen.insert(e.param.id()).second) out.emplace_back(join_path(path, e.name), e.param);
  };
  walk(take, true, recurse);
  return out;
}

ParameterList Module::parameters(bool recurse) const {
  ParameterList list;
  for (auto& [n, p] : named_parameters(recurse)) {
    list.seen_.push_back({p.dtype(), p.shape()});
    list.params_.push_back(std::move(p));
    list.names_.push_back(std::move(n));
  }
  auto watch = [&](const std::string& path, const Module& m) {
    list.watches_.push_back({m.version_, m.version_->load(std::memory_order_relaxed), path});
  };
  walk(watch, true, recurse);
  return list;
}

std::vector<std::pair<std::string, Tensor>> Module::named_buffers(bool recurse) const {
  std::vector<std::pair<std::string, Tensor>> out;
  std::unordered_set<const TensorImpl*> seen;
  auto take = [&](const std::string& path, const Module& m) {
    for (const auto& e : m.buffers_)
      if (seen.insert(e.value.impl()).second) out.emplace_back(join_path(path, e.name), e.value);
  };
  walk(take, true, recurse);
  return out;
}

std::vector<Tensor> Module::buffers(bool recurse) const {
  std::vector<Tensor> out;
  for (auto& [n, b] : named_buffers(recurse)) out.push_back(std::move(b));
  return out;
}

int64_t Module::num_parameters() const { return parameters().numel(); }

StateDict Module::state_dict() const {
  NoGradGuard no_grad;
  StateDict out;
  walk(
      [&](const std::string& path, const Module& m) {
        for (const auto& e : m.params_) out.insert(join_path(path, e.name), e.param.value().detach().clone());
        for (const auto& e : m.buffers_)
          if (e.persistent) out.insert(join_path(path, e.name), e.value.clone());
      },
      false);
  return out;
}

struct Module::LoadPlan {
  struct Target {
    Tensor dst, src;
  };
  std::vector<Target> targets;
  LoadResult result;
};

Module::LoadPlan Module::plan_load(const StateDict& state, const LoadOptions& options) const {
  LoadPlan plan;
  LoadResult& result = plan.result;
  std::vector<std::string> mismatched;
  std::unordered_set<std::string> expected;

  auto match = [&](const std::string& key, const Module& owner, const std::string& local, const Tensor& dst) {
    expected.insert(key);
    const Tensor* src = state.find(key);
    if (!src) return result.missing_keys.push_back(key);
    KILN_CHECK(src->defined(), "load_state_dict", "'{}' is an undefined tensor", key);
    Tensor value = options.torch_layout ? owner.from_torch(local, *src) : *src;
    if (value.shape() != dst.shape() || value.dtype() != dst.dtype())
      return mismatched.push_back(fmt::format("'{}' expects {} but the state has {}", key, describe(dst), describe(value)));
    plan.targets.push_back({dst, value});
  };
  walk(
      [&](const std::string& path, const Module& m) {
        for (const auto& e : m.params_) match(join_path(path, e.name), m, e.name, e.param.value());
        for (const auto& e : m.buffers_)
          if (e.persistent) match(join_path(path, e.name), m, e.name, e.value);
      },
      false);
  for (const auto& [key, value] : state)
    if (!expected.count(key)) result.unexpected_keys.push_back(key);

  auto list = [](const std::vector<std::string>& keys) {
    std::string s;
    for (const auto& k : keys) s += (s.empty() ? "" : ", ") + k;
    return s;
  };
  std::string problems;
  if (!mismatched.empty()) problems += "mismatched: " + list(mismatched);
  // Strict: every missing key is an error except the known-optional ones.
  std::vector<std::string> required_missing;
  const std::unordered_set<std::string> optional(options.optional_keys.begin(), options.optional_keys.end());
  for (const auto& key : result.missing_keys)
    if (!optional.count(key)) required_missing.push_back(key);
  if (options.strict && !required_missing.empty())
    problems += (problems.empty() ? "" : "; ") + std::string("missing keys: ") + list(required_missing);
  if (options.strict && !result.unexpected_keys.empty())
    problems += (problems.empty() ? "" : "; ") + std::string("unexpected keys: ") + list(result.unexpected_keys);
  KILN_CHECK(problems.empty(), "load_state_dict", "{} not loaded, nothing was changed: {}", type_name(), problems);
  return plan;
}

LoadResult Module::check_state_dict(const StateDict& state, const LoadOptions& options) const {
  return plan_load(state, options).result;
}

LoadResult Module::load_state_dict(const StateDict& state, const LoadOptions& options) {
  LoadPlan plan = plan_load(state, options);
  NoGradGuard no_grad;
  for (const auto& t : plan.targets) copy_(t.dst, t.src);
  return plan.result;
}

std::vector<std::pair<std::string, Generator*>> Module::named_generators() {
  std::vector<std::pair<std::string, Generator*>> out;
  walk(
      [&](const std::string& path, const Module& m) {
        for (auto& [name, gen] : const_cast<Module&>(m).own_generators()) out.emplace_back(join_path(path, name), gen);
      },
      true);
  return out;
}

Module& Module::train(bool on) {
  walk([&](const std::string&, const Module& m) { const_cast<Module&>(m).training_ = on; }, true);
  return *this;
}

Module& Module::apply(const std::function<void(Module&)>& fn) {
  std::unordered_set<const Module*> seen;
  std::function<void(Module&)> visit = [&](Module& m) {
    if (!seen.insert(&m).second) return;
    for (auto& c : m.children_) visit(*c.module);
    fn(m);
  };
  visit(*this);
  return *this;
}

Module& Module::to(DType dtype) {
  KILN_CHECK(is_floating(dtype), "Module.to", "can only cast to a floating dtype, got {}", name(dtype));
  NoGradGuard no_grad;
  // Check and cast tensors once each, even when shared.
  std::unordered_set<const TensorImpl*> done;
  apply([&](Module& m) {
    bool edited = false;
    auto cast = [&](const Tensor& t) {
      if (!is_floating(t.dtype()) || t.dtype() == dtype || !done.insert(t.impl()).second) return;
      replace_data(t, t.to(dtype));
      edited = true;
    };
    for (auto& e : m.params_) cast(e.param.value());
    for (auto& e : m.buffers_) cast(e.value);
    if (edited) m.mark_edited();
  });
  return *this;
}

Module& Module::set_compute_dtype(DType dtype) {
  KILN_CHECK(is_floating(dtype), "Module.set_compute_dtype", "compute dtype must be floating (bf16, f32, f64), got {}",
             name(dtype));
  apply([&](Module& m) { m.compute_dtype_ = dtype; });
  return *this;
}

Tensor Module::to_compute(const Tensor& t) const {
  if (!compute_dtype_ || !t.defined() || !is_floating(t.dtype()) || t.dtype() == *compute_dtype_) return t;
  return kiln::to(t, *compute_dtype_);  // differentiable: the grad comes back in t's dtype
}

Tensor Module::to_precise(const Tensor& t, DType dtype) const {
  if (!compute_dtype_ || !t.defined() || !is_floating(t.dtype()) || t.dtype() == dtype) return t;
  return kiln::to(t, dtype);
}

Module& Module::zero_grad() {
  for (const auto& [n, p] : named_parameters()) p.value().set_grad(Tensor());
  return *this;
}

Module& Module::requires_grad_(bool on) {
  for (const auto& [n, p] : named_parameters()) p.requires_grad_(on);
  return *this;
}

std::string detail::pretty_type_name(const std::type_info& type) {
  const char* mangled = type.name();
  int status = 0;
  char* demangled = abi::__cxa_demangle(mangled, nullptr, nullptr, &status);
  std::string n = status == 0 && demangled ? demangled : mangled;
  std::free(demangled);
  for (const char* ns : {"kiln::nn::", "(anonymous namespace)::"})
    for (size_t at; (at = n.find(ns)) != std::string::npos;) n.erase(at, std::string(ns).size());
  return n;
}

std::string Module::type_name() const { return detail::pretty_type_name(typeid(*this)); }

Tensor Module::from_torch(const std::string&, const Tensor& value) const { return value; }

std::string Module::repr() const {
  std::ostringstream os;
  std::function<void(const Module&, int)> print = [&](const Module& m, int indent) {
    os << m.type_name() << "(" << m.extra_repr();
    if (m.children_.empty()) {
      os << ")";
      return;
    }
    os << "\n";
    for (const auto& c : m.children_) {
      os << std::string(size_t(indent + 2), ' ') << "(" << c.name << "): ";
      print(*c.module, indent + 2);
      os << "\n";
    }
    os << std::string(size_t(indent), ' ') << ")";
  };
  print(*this, 0);
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const Module& module) { return os << module.repr(); }

}  // namespace kiln::nn
