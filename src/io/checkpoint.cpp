// Checkpoint: gathers the registered objects' state into one safetensors file
// and restores it all-or-nothing (docs/checkpoints.md).
//
// Loading runs in two passes. Pass 1 checks: the file (header, checksums,
// metadata), that every registered object has its part in the file, and each
// object against its part (Module::check_state_dict,
// Optimizer::check_state_dict). Pass 2 restores. The few restores that can
// still refuse a value (schedulers, Stateful objects: their checks live in
// their own load) run first, each after a snapshot of what it replaces, and
// are rolled back if a later one refuses; the model and optimizer copies,
// already checked, run last.
#include "kiln/io/checkpoint.h"

#include <nlohmann/json.hpp>
#include <fmt/ranges.h>

#include <algorithm>
#include <set>

#include "kiln/core/crc32c.h"
#include "kiln/core/error.h"
#include "kiln/io/safetensors.h"
#include "kiln/optim/optimizer.h"
#include "kiln/optim/scheduler.h"
#include "src/io/checkpoint_format.h"

namespace kiln::io {
namespace {

std::string join(const std::string& prefix, const std::string& name) {
  return prefix.empty() ? name : prefix + "." + name;
}

/// Whether tensor or generator `name` belongs to the part with `prefix`: it
/// starts with "<prefix>.", or, for the empty prefix, with no other part's.
bool belongs(const std::string& name, const std::string& prefix, const std::set<std::string>& prefixes) {
  if (!prefix.empty()) return name.rfind(prefix + ".", 0) == 0;
  for (const std::string& other : prefixes)
    if (!other.empty() && name.rfind(other + ".", 0) == 0) return false;
  return true;
}

/// The tensors of `all` that belong to `prefix`, with the prefix removed.
nn::StateDict take_prefix(const nn::StateDict& all, const std::string& prefix, const std::set<std::string>& prefixes) {
  nn::StateDict out;
  for (const auto& [key, value] : all)
    if (belongs(key, prefix, prefixes)) out.insert(prefix.empty() ? key : key.substr(prefix.size() + 1), value);
  return out;
}

/// Adapts two functions to Stateful.
class FunctionState : public Stateful {
 public:
  FunctionState(std::function<State()> get, std::function<void(const State&)> set)
      : get_(std::move(get)), set_(std::move(set)) {}
  State state() const override { return get_(); }
  void load_state(const State& s) override { set_(s); }

 private:
  std::function<State()> get_;
  std::function<void(const State&)> set_;
};

}  // namespace

struct Checkpoint::Parts {
  std::vector<std::pair<std::string, nn::Module*>> models;
  std::vector<std::pair<std::string, optim::Optimizer*>> optimizers;
  std::vector<std::pair<std::string, optim::LRScheduler*>> schedulers;
  std::vector<std::pair<std::string, Rngs*>> rngs;
  std::vector<std::pair<std::string, Stateful*>> states;
  std::vector<std::unique_ptr<Stateful>> owned;  // FunctionState adapters
  Progress* progress = nullptr;
  std::string config;

  /// Names are unique per kind; prefixes of tensors must not nest ("a" and "a.b").
  template <class T>
  void add(std::vector<std::pair<std::string, T*>>& list, const char* kind, std::string name, T* object) {
    for (const auto& [n, o] : list)
      KILN_CHECK(n != name, "Checkpoint", "two {}s named '{}': give each its own name", kind, name);
    list.emplace_back(std::move(name), object);
  }
  std::set<std::string> tensor_prefixes() const {
    std::set<std::string> out;
    for (const auto& [p, m] : models) out.insert(p);
    for (const auto& [p, o] : optimizers) out.insert(p);
    return out;
  }
};

Checkpoint::Checkpoint() : parts_(std::make_unique<Parts>()) {}
Checkpoint::~Checkpoint() = default;
Checkpoint::Checkpoint(Checkpoint&&) noexcept = default;
Checkpoint& Checkpoint::operator=(Checkpoint&&) noexcept = default;

/// A new tensor prefix must differ from the others and not nest in one
/// ("a" and "a.b"): every tensor name then belongs to exactly one part.
void check_new_prefix(const std::set<std::string>& taken, const std::string& prefix) {
  for (const std::string& t : taken) {
    KILN_CHECK(t != prefix, "Checkpoint", "prefix '{}' is already taken by another model or optimizer", prefix);
    bool nested = !t.empty() && !prefix.empty() && (prefix.rfind(t + ".", 0) == 0 || t.rfind(prefix + ".", 0) == 0);
    KILN_CHECK(!nested, "Checkpoint", "prefix '{}' nests with prefix '{}': choose prefixes that do not", prefix, t);
  }
}

Checkpoint& Checkpoint::model(nn::Module& module, std::string prefix) {
  check_new_prefix(parts_->tensor_prefixes(), prefix);
  parts_->add(parts_->models, "model", std::move(prefix), &module);
  return *this;
}

Checkpoint& Checkpoint::optimizer(optim::Optimizer& opt, std::string prefix) {
  KILN_CHECK(!prefix.empty(), "Checkpoint", "an optimizer needs a non-empty prefix (its tensors are '<prefix>.step', ...)");
  check_new_prefix(parts_->tensor_prefixes(), prefix);
  parts_->add(parts_->optimizers, "optimizer", std::move(prefix), &opt);
  return *this;
}

Checkpoint& Checkpoint::scheduler(optim::LRScheduler& sched, std::string name) {
  parts_->add(parts_->schedulers, "scheduler", std::move(name), &sched);
  return *this;
}

Checkpoint& Checkpoint::rngs(Rngs& rngs, std::string name) {
  parts_->add(parts_->rngs, "rngs", std::move(name), &rngs);
  return *this;
}

Checkpoint& Checkpoint::progress(Progress& progress) {
  parts_->progress = &progress;
  return *this;
}

Checkpoint& Checkpoint::state(std::string name, Stateful& object) {
  parts_->add(parts_->states, "state", std::move(name), &object);
  return *this;
}

Checkpoint& Checkpoint::state(std::string name, std::function<State()> get, std::function<void(const State&)> set) {
  KILN_CHECK(get && set, "Checkpoint", "state '{}': both functions are needed", name);
  parts_->owned.push_back(std::make_unique<FunctionState>(std::move(get), std::move(set)));
  return state(std::move(name), *parts_->owned.back());
}

Checkpoint& Checkpoint::config(std::string json) {
  KILN_CHECK(nlohmann::json::accept(json), "Checkpoint", "config is not valid JSON: {}",
             json.size() > 80 ? json.substr(0, 80) + "..." : json);
  parts_->config = std::move(json);
  return *this;
}

void Checkpoint::save(const std::string& path) const {
  constexpr const char* op = "Checkpoint.save";
  const Parts& p = *parts_;
  detail::CheckpointMeta meta;
  nn::StateDict tensors;
  // Each name must come back to its part on load: a model's child named like
  // an optimizer's prefix ("optim.weight") would be read as optimizer state.
  const std::set<std::string> prefixes = p.tensor_prefixes();
  auto put = [&](const std::string& key, const Tensor& value, const char* kind, const std::string& owner) {
    KILN_CHECK(belongs(key, owner, prefixes), op,
               "{}: tensor '{}' of {} '{}' starts with another part's prefix; give that part another prefix", path,
               key, kind, owner);
    tensors.insert(key, value);
  };
  for (const auto& [prefix, m] : p.models) {
    meta.models.push_back(prefix);
    for (const auto& [key, value] : m->state_dict()) put(join(prefix, key), value, "model", prefix);
    for (const auto& [name, gen] : m->named_generators()) meta.generators[join(prefix, name)] = gen->state();
  }
  for (const auto& [prefix, o] : p.optimizers) {
    meta.optimizers[prefix] = o->name();
    for (const auto& [key, value] : o->state_dict()) put(prefix + "." + key, value, "optimizer", prefix);
  }
  for (const auto& [name, s] : p.schedulers) meta.schedulers[name] = s->state_dict();
  for (const auto& [name, r] : p.rngs) meta.rngs[name] = r->state();
  for (const auto& [name, s] : p.states) meta.states[name] = s->state();
  if (p.progress) {
    meta.has_progress = true;
    meta.progress = *p.progress;
  }
  meta.config = p.config;
  // The checksum of the bytes the file will hold: the row-major values
  // (snapshots are contiguous already; contiguous() then copies nothing).
  for (const auto& [key, value] : tensors) {
    Tensor c = value.contiguous();
    meta.crc32c[key] = crc32c(c.data_ptr(), size_t(c.nbytes()));
  }
  std::vector<detail::TensorSignature> signatures;
  for (const auto& [key, value] : tensors) signatures.push_back({key, value.dtype(), value.shape()});
  save_safetensors(path, tensors, detail::to_metadata(meta, signatures));
}

void Checkpoint::load(const std::string& path) {
  constexpr const char* op = "Checkpoint.load";
  Parts& p = *parts_;
  auto fail = [&](const std::string& part, const std::string& message) {
    throw Error(op, fmt::format("{}: {}: {} (nothing was loaded)", path, part, message));
  };
  // A part's own check failed: keep its message, prefixed by file and part.
  auto check = [&](const std::string& part, auto&& fn) {
    try {
      fn();
    } catch (const Error& e) {
      fail(part, e.what());
    }
  };

  // ---- pass 1: check ----
  auto file = std::make_shared<const detail::FileBytes>(detail::FileBytes::open(op, path));
  detail::Header header = detail::read_header(op, path, *file);
  detail::CheckpointMeta meta = detail::parse_metadata(op, path, header);
  detail::verify_checksums(op, path, *file, header, meta);
  bool plain = meta.format_version == 0;
  if (plain && (!p.optimizers.empty() || !p.schedulers.empty() || !p.rngs.empty() || !p.states.empty() || p.progress))
    fail("file", "a plain safetensors file (no kiln metadata) holds only weights, but this checkpoint also restores "
                 "an optimizer, scheduler, random streams, progress or state");

  nn::StateDict all;
  // Tensors that alias the file's bytes: the restores below copy each value
  // once, from the file into the model or the optimizer's state.
  for (const detail::Entry& e : header.entries) all.insert(e.name, detail::alias_tensor(op, path, file, header, e));
  // Prefixes in the file: a tensor belongs to the part whose prefix it starts with.
  std::set<std::string> file_prefixes(meta.models.begin(), meta.models.end());
  for (const auto& [prefix, name] : meta.optimizers) file_prefixes.insert(prefix);
  for (const std::string& prefix : p.tensor_prefixes()) file_prefixes.insert(prefix);

  std::vector<nn::StateDict> model_parts, optim_parts;
  for (const auto& [prefix, m] : p.models) {
    std::string part = fmt::format("model '{}'", prefix);
    if (!plain && std::find(meta.models.begin(), meta.models.end(), prefix) == meta.models.end())
      fail(part, fmt::format("not in the file (its models: '{}')", fmt::join(meta.models, "', '")));
    model_parts.push_back(take_prefix(all, prefix, file_prefixes));
    check(part, [&] { m->check_state_dict(model_parts.back()); });
    if (plain) continue;
    // The generators of the model and of the file must be the same set.
    std::set<std::string> names;
    for (const auto& [name, gen] : m->named_generators()) {
      names.insert(join(prefix, name));
      if (!meta.generators.count(join(prefix, name)))
        fail(part, fmt::format("the file has no state for generator '{}'", join(prefix, name)));
    }
    for (const auto& [name, st] : meta.generators)
      if (belongs(name, prefix, file_prefixes) && !names.count(name))
        fail(part, fmt::format("the file has generator '{}', which the model does not have", name));
  }
  for (const auto& [prefix, o] : p.optimizers) {
    std::string part = fmt::format("optimizer '{}'", prefix);
    auto it = meta.optimizers.find(prefix);
    if (it == meta.optimizers.end()) fail(part, "the file has no optimizer state under this prefix");
    if (it->second != o->name())
      fail(part, fmt::format("the file holds the state of {}, not of {}", it->second, o->name()));
    optim_parts.push_back(take_prefix(all, prefix, file_prefixes));
    check(part, [&] { o->check_state_dict(optim_parts.back()); });
  }
  for (const auto& [name, s] : p.schedulers)
    if (!meta.schedulers.count(name)) fail(fmt::format("scheduler '{}'", name), "not in the file");
  for (const auto& [name, r] : p.rngs)
    if (!meta.rngs.count(name)) fail(fmt::format("rngs '{}'", name), "not in the file");
  for (const auto& [name, s] : p.states)
    if (!meta.states.count(name)) fail(fmt::format("state '{}'", name), "not in the file");
  if (p.progress && !meta.has_progress) fail("progress", "not in the file");

  // ---- pass 2: restore ----
  // Schedulers and states check inside their own load: snapshot, load, and
  // undo the ones done if a later one refuses.
  std::vector<std::function<void()>> undo;
  try {
    for (const auto& [name, s] : p.schedulers) {
      optim::SchedulerState before = s->state_dict();
      check(fmt::format("scheduler '{}'", name), [&] { s->load_state_dict(meta.schedulers.at(name)); });
      undo.push_back([s = s, before] { s->load_state_dict(before); });
    }
    for (const auto& [name, s] : p.states) {
      State before = s->state();
      check(fmt::format("state '{}'", name), [&] { s->load_state(meta.states.at(name)); });
      undo.push_back([s = s, before] { s->load_state(before); });
    }
  } catch (...) {
    for (auto it = undo.rbegin(); it != undo.rend(); ++it) (*it)();
    throw;
  }
  for (size_t i = 0; i < p.models.size(); ++i) {
    auto& [prefix, m] = p.models[i];
    m->load_state_dict(model_parts[i]);
    if (!plain)
      for (const auto& [name, gen] : m->named_generators()) gen->set_state(meta.generators.at(join(prefix, name)));
  }
  for (size_t i = 0; i < p.optimizers.size(); ++i) p.optimizers[i].second->load_state_dict(optim_parts[i]);
  for (const auto& [name, r] : p.rngs) r->set_state(meta.rngs.at(name));
  if (p.progress) *p.progress = meta.progress;
}

}  // namespace kiln::io
