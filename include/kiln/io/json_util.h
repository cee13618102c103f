// JSON helpers of kiln's file formats (checkpoints, the tokenizers' and model
// configs' JSON): a value quoted briefly in an error message, doubles that
// may be infinite or NaN, and a config field read into its typed member.
// Needs nlohmann_json; not in kiln.h.
#pragma once

#include <fmt/format.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "kiln/core/error.h"

namespace kiln::io::detail {

/// JSON has no inf or NaN: those doubles are written as the strings "inf",
/// "-inf", "nan" (a plateau scheduler's first best, a metric gone bad).
inline nlohmann::json double_to_json(double v) {
  if (std::isfinite(v)) return v;
  return std::isnan(v) ? "nan" : (v > 0 ? "inf" : "-inf");
}

/// The inverse: a JSON number, or one of those three strings; else nullopt.
inline std::optional<double> double_from_json(const nlohmann::json& j) {
  if (j.is_number()) return j.get<double>();
  if (!j.is_string()) return std::nullopt;
  const std::string& s = j.get_ref<const std::string&>();
  if (s == "inf") return INFINITY;
  if (s == "-inf") return -INFINITY;
  if (s == "nan") return NAN;
  return std::nullopt;
}

/// A JSON value for an error message, bounded: scalars as JSON (strings cut
/// at 60 characters), containers by kind and size. A bad value in a file may
/// be megabytes long or nested a million deep (the fuzzer's finding): dumping
/// it whole would flood the message or overflow the stack.
inline std::string brief(const nlohmann::json& j) {
  if (j.is_array()) {
    // Short arrays of scalars ([1, 2], a shape) in full.
    bool flat = j.size() <= 8;
    for (const auto& v : j) flat = flat && v.is_primitive();
    if (!flat) return fmt::format("an array of {}", j.size());
    std::string out = "[";
    for (const auto& v : j) out += (out.size() > 1 ? ", " : "") + brief(v);
    return out + "]";
  }
  if (j.is_object()) return fmt::format("an object of {} keys", j.size());
  if (j.is_string() && j.get_ref<const std::string&>().size() > 60)
    return nlohmann::json(j.get_ref<const std::string&>().substr(0, 60)).dump(-1, ' ', false,
                                                                             nlohmann::json::error_handler_t::replace) +
           "...";
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

/// One field of a config object (a model's config.json) read into its typed
/// member: the JSON kind must match the member's type, else a kiln::Error
/// naming `owner` and the field, with the value quoted briefly.
inline void read_config_field(const char* owner, const std::string& key, const nlohmann::json& v, int64_t& out) {
  KILN_CHECK(v.is_number_integer(), owner, "config field '{}' must be an integer, got {}", key, brief(v));
  out = v.get<int64_t>();
}
inline void read_config_field(const char* owner, const std::string& key, const nlohmann::json& v, double& out) {
  KILN_CHECK(v.is_number(), owner, "config field '{}' must be a number, got {}", key, brief(v));
  out = v.get<double>();
}
inline void read_config_field(const char* owner, const std::string& key, const nlohmann::json& v, bool& out) {
  KILN_CHECK(v.is_boolean(), owner, "config field '{}' must be true or false, got {}", key, brief(v));
  out = v.get<bool>();
}

}  // namespace kiln::io::detail
