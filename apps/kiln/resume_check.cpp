// check_resume (apps/kiln/resume_check.h): compare, refuse or record.
#include "apps/kiln/resume_check.h"

#include <fmt/format.h>
#include <fmt/ostream.h>

#include <algorithm>
#include <ostream>

#include "kiln/core/error.h"

namespace kiln::app {

using nlohmann::json;

namespace {

// "--batch-size", "batch-size" and "batch_size" all name the key batch_size.
std::string key_of(std::string name) {
  name.erase(0, name.find_first_not_of('-'));
  std::replace(name.begin(), name.end(), '-', '_');
  return name;
}

bool overridden(const std::vector<std::string>& overrides, const std::string& key) {
  return std::any_of(overrides.begin(), overrides.end(),
                     [&](const std::string& o) { return o == "all" || key_of(o) == key; });
}

}  // namespace

std::string flag_of(const std::string& key) {
  if (key == "tokens") return "--data";  // the text's length in tokens
  std::string flag = "--" + key;
  std::replace(flag.begin(), flag.end(), '_', '-');
  return flag;
}

json check_resume(const std::string& op, const std::string& checkpoint, const json& saved, const json& wanted,
                  const std::vector<std::string>& overrides, const json& saved_history, int64_t step,
                  std::ostream& log) {
  json history = saved_history.is_array() ? saved_history : json::array();
  for (const auto& [key, value] : wanted.items()) {
    const bool present = saved.is_object() && saved.contains(key);
    if (present && saved[key] == value) continue;
    const std::string before = present ? saved[key].dump() : "(none)";
    KILN_CHECK(overridden(overrides, key), op,
               "--resume {}: the checkpoint was trained with {} {}, this run asks for {} ({}); pass --override {} to "
               "continue with the new value, or resume with the old one",
               checkpoint, key, before, value.dump(), flag_of(key), key);
    history.push_back({{"name", key}, {"from", present ? saved[key] : json()}, {"to", value}, {"step", step}});
    fmt::print(log, "--override: {} {} -> {} from step {}\n", key, before, value.dump(), step);
  }
  return history;
}

}  // namespace kiln::app
