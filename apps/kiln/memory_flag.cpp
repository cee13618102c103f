#include "apps/kiln/memory_flag.h"

#include <cctype>
#include <cmath>
#include <cstdlib>

#include "kiln/core/error.h"

namespace kiln::app {

int64_t parse_memory_budget(const std::string& op, const std::string& text) {
  if (text == "auto") return 0;
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  std::string unit(end ? end : "");
  for (char& c : unit) c = char(std::toupper(static_cast<unsigned char>(c)));
  double scale = 0;
  if (unit.empty() || unit == "B") scale = 1;
  else if (unit == "K" || unit == "KB" || unit == "KIB") scale = 1024.0;
  else if (unit == "M" || unit == "MB" || unit == "MIB") scale = 1024.0 * 1024;
  else if (unit == "G" || unit == "GB" || unit == "GIB") scale = 1024.0 * 1024 * 1024;
  else if (unit == "T" || unit == "TB" || unit == "TIB") scale = 1024.0 * 1024 * 1024 * 1024;
  const double bytes = value * scale;
  KILN_CHECK(end != text.c_str() && scale > 0 && std::isfinite(bytes) && bytes >= 1 && bytes < 9.0e18, op,
             "--memory-budget must be a size such as 256M, 1G or 300000000 (bytes), or auto; got '{}'", text);
  return int64_t(bytes);
}

}  // namespace kiln::app
