// The typed reads of a Stateful's State: whole-string parses, errors naming the key.
#include "kiln/core/stateful.h"

#include <charconv>

#include "kiln/core/error.h"

namespace kiln {
namespace {

const std::string& state_text(const State& state, const std::string& key, const char* op) {
  auto it = state.find(key);
  KILN_CHECK(it != state.end(), op, "state has no '{}'", key);
  return it->second;
}

/// Parses all of `text` with from_chars; false on trailing junk or range errors.
template <class T>
bool parse_all(const std::string& text, T& out) {
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, out);
  return ec == std::errc() && ptr == end;
}

}  // namespace

int64_t state_i64(const State& state, const std::string& key, const char* op) {
  int64_t v;
  const std::string& text = state_text(state, key, op);
  KILN_CHECK(parse_all(text, v), op, "state '{}' is '{}', not an integer", key, text);
  return v;
}

uint64_t state_u64(const State& state, const std::string& key, const char* op) {
  uint64_t v;
  const std::string& text = state_text(state, key, op);
  KILN_CHECK(parse_all(text, v), op, "state '{}' is '{}', not a non-negative integer", key, text);
  return v;
}

double state_f64(const State& state, const std::string& key, const char* op) {
  const std::string& text = state_text(state, key, op);
  double v;  // from_chars also reads "inf", "-inf" and "nan", as fmt prints them
  KILN_CHECK(parse_all(text, v), op, "state '{}' is '{}', not a number", key, text);
  return v;
}

}  // namespace kiln
