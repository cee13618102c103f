// Bounded numeric flags (apps/kiln/cli_numbers.h).
#include "apps/kiln/cli_numbers.h"

#include <fmt/format.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>

namespace kiln::app {

namespace {

// The range as a reader writes it: [1, 1000000], (0, inf).
std::string whole_range(long double lo, long double hi) {
  // Every flag's lower bound is 0 or more.
  return fmt::format("[{}, {}]", static_cast<unsigned long long>(lo), static_cast<unsigned long long>(hi));
}

std::string real_range(const RealRange& r) {
  auto bound = [](double v) { return std::isinf(v) ? std::string(v > 0 ? "inf" : "-inf") : fmt::format("{}", v); };
  return fmt::format("{}{}, {}{}", r.lo_open || std::isinf(r.lo) ? '(' : '[', bound(r.lo), bound(r.hi),
                     r.hi_open || std::isinf(r.hi) ? ')' : ']');
}

bool all_digits(const std::string& s) {
  return !s.empty() && s.find_first_not_of("0123456789") == std::string::npos;
}

}  // namespace

long double parse_whole(const std::string& flag, const std::string& text, long double lo, long double hi) {
  auto refuse = [&] {
    return CLI::ValidationError(
        fmt::format("{} must be a whole number in {}, got '{}'", flag, whole_range(lo, hi), text));
  };
  const std::string digits = !text.empty() && text[0] == '+' ? text.substr(1) : text;
  long double v = 0;
  if (all_digits(digits)) {
    errno = 0;
    const unsigned long long u = std::strtoull(digits.c_str(), nullptr, 10);
    if (errno == ERANGE) throw refuse();
    v = static_cast<long double>(u);  // exact: long double holds every 64-bit integer on x86-64
  } else {
    // 1e9, 64.0: exact whole numbers in another spelling.
    char* end = nullptr;
    errno = 0;
    v = std::strtold(text.c_str(), &end);
    if (text.empty() || end != text.c_str() + text.size() || errno == ERANGE || !std::isfinite(v) ||
        v != std::floor(v))
      throw refuse();
  }
  if (v < lo || v > hi) throw refuse();
  return v;
}

double parse_real(const std::string& flag, const std::string& text, RealRange r) {
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(text.c_str(), &end);
  const bool number = !text.empty() && end == text.c_str() + text.size() && std::isfinite(v);
  const bool in_range = (r.lo_open ? v > r.lo : v >= r.lo) && (r.hi_open ? v < r.hi : v <= r.hi);
  if (!number || !in_range)
    throw CLI::ValidationError(
        fmt::format("{} must be a finite number in {}, got '{}'", flag, real_range(r), text));
  return v;
}

CLI::Option* add_real(CLI::App* app, const std::string& flag, double& value, const std::string& help, RealRange range,
                      bool show_default) {
  CLI::Option* opt = app->add_option_function<std::string>(
      flag, [&value, flag, range](const std::string& text) { value = parse_real(flag, text, range); }, help);
  opt->type_name("REAL");
  if (show_default) opt->default_str(fmt::format("{}", value));
  return opt;
}

}  // namespace kiln::app
