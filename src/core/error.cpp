// kiln::Error.
#include "kiln/core/error.h"

namespace kiln {

namespace {
std::string format_message(std::string_view op, const std::string& message) {
  std::string out;
  out.reserve(op.size() + message.size() + 3);
  out.append("[").append(op).append("] ").append(message);
  return out;
}
}  // namespace

Error::Error(std::string_view op, const std::string& message, const char* file, int line)
    : std::runtime_error(format_message(op, message)), op_(op), file_(file), line_(line) {}

}  // namespace kiln
