// What a test of the kiln tool's jobs (apps/kiln) may use: every layer's
// headers and helpers, through rl's (tests/support/rl_testing.h), and the jobs'
// own headers, which the tests include themselves.
#pragma once

#include <fstream>
#include <sstream>
#include <string>

#include "tests/support/rl_testing.h"

namespace kiln::testing {

/// dir/slice.txt holding the first `bytes` of tiny Shakespeare (the shared
/// data folder), or a repetitive text of that length where it is absent; the
/// language-model jobs' tests train on it. Returns its path.
inline std::string corpus_slice(const std::string& dir, size_t bytes) {
  std::string text;
  std::ifstream in(std::string(KILN_SHARED_DATA_DIR) + "/tinyshakespeare.txt", std::ios::binary);
  if (in.good()) {
    std::ostringstream s;
    s << in.rdbuf();
    text = s.str().substr(0, bytes);
  }
  while (text.size() < bytes) text += "First Citizen:\nBefore we proceed any further, hear me speak.\n\n";
  text.resize(bytes);
  const std::string path = dir + "/slice.txt";
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

}  // namespace kiln::testing
