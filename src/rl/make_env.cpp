// make_vector_env: one table from names to kiln's native environments.
#include "kiln/rl/make_env.h"

#include <fmt/format.h>

#include "kiln/core/error.h"
#include "kiln/rl/cartpole.h"
#include "kiln/rl/pendulum.h"

namespace kiln::rl {

namespace {

struct Entry {
  const char* id;  // Gymnasium's
  const char* short_name;
  std::unique_ptr<VectorEnv> (*make)(int64_t num_envs);
};

constexpr Entry kEnvs[] = {
    {"CartPole-v1", "cartpole", [](int64_t e) -> std::unique_ptr<VectorEnv> { return std::make_unique<CartPole>(e); }},
    {"Pendulum-v1", "pendulum", [](int64_t e) -> std::unique_ptr<VectorEnv> { return std::make_unique<Pendulum>(e); }},
};

}  // namespace

std::unique_ptr<VectorEnv> make_vector_env(const std::string& name, int64_t num_envs) {
  for (const Entry& e : kEnvs)
    if (name == e.id || name == e.short_name) return e.make(num_envs);
  std::string known;
  for (const Entry& e : kEnvs) known += fmt::format("{}{} ({})", known.empty() ? "" : ", ", e.id, e.short_name);
  KILN_FAIL("make_vector_env", "unknown environment '{}'; known: {}", name, known);
}

std::vector<std::string> vector_env_names() {
  std::vector<std::string> out;
  for (const Entry& e : kEnvs) out.push_back(e.id);
  return out;
}

}  // namespace kiln::rl
