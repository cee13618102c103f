// --memory-budget SIZE for the training jobs (SPECS X5, train::fit_to_memory):
// "256M", "1G", "1.5GiB", "300000000" (bytes) or "auto" (the cgroup limit and
// MemAvailable). The job picks its batch with three probe steps.
#pragma once

#include <cstdint>
#include <string>

namespace kiln::app {

/// Bytes of a --memory-budget value; 0 for "auto". kiln::Error "[op]
/// --memory-budget ..." for anything else.
int64_t parse_memory_budget(const std::string& op, const std::string& text);

}  // namespace kiln::app
