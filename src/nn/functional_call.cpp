// ParameterSubstitution: checks every substitute, then swaps the parameters'
// values in and, on destruction, back.
#include "kiln/nn/functional_call.h"

#include <unordered_map>

#include "kiln/core/error.h"

namespace kiln::nn {

ParameterSubstitution::ParameterSubstitution(const Module& module, const StateDict& params, const char* op) {
  std::unordered_map<std::string, Parameter> by_name;
  for (auto& [name, p] : module.named_parameters()) by_name.emplace(name, p);
  // All checks first: a bad key must not leave half the parameters swapped.
  std::vector<std::pair<Parameter, Tensor>> plan;
  plan.reserve(params.size());
  for (const auto& [key, value] : params) {
    auto it = by_name.find(key);
    KILN_CHECK(it != by_name.end(), op, "'{}' is not a parameter of {} (buffers are not substituted)", key,
               module.type_name());
    const Parameter& p = it->second;
    KILN_CHECK(value.defined(), op, "'{}' is an undefined tensor", key);
    KILN_CHECK(value.shape() == p.shape() && value.dtype() == p.dtype(), op,
               "'{}' is {} but the parameter is {}", key, describe(value), describe(p.value()));
    plan.emplace_back(p, value);
  }
  originals_.reserve(plan.size());
  for (auto& [p, value] : plan) originals_.emplace_back(p, p.exchange_value(value));  // reserved: no throw
}

ParameterSubstitution::~ParameterSubstitution() {
  for (auto& [p, value] : originals_) p.exchange_value(std::move(value));
}

}  // namespace kiln::nn
