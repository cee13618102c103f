// Test-only seam of src/io/safetensors.cpp (not installed, not in kiln.h): lets a
// test make save_safetensors fail after its temporary file is fully written, to
// check that the failure removes the temporary and leaves the target untouched.
#pragma once

#include <functional>
#include <string>

namespace kiln::io::detail {

/// Called by save_safetensors with the temporary file's path after the file is
/// written, fsynced and closed, right before it is renamed over the target. A
/// hook that throws aborts the save. An empty function removes the hook. Not
/// thread-safe: set it only while no save runs.
void set_save_hook(std::function<void(const std::string& temp_path)> hook);

}  // namespace kiln::io::detail
