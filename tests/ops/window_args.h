// Reading conv/pool arguments from golden files (tools/goldens/conv.py writes
// a size as an int or an [h, w] pair), shared by conv_test and pool_test.
#pragma once

#include <nlohmann/json.hpp>

#include "kiln/ops/conv.h"

namespace kiln::testing {

inline Size2 size2(const nlohmann::json& j) {
  return j.is_array() ? Size2(j[0].get<int64_t>(), j[1].get<int64_t>()) : Size2(j.get<int64_t>());
}
inline int64_t int1(const nlohmann::json& j) { return j.is_array() ? j[0].get<int64_t>() : j.get<int64_t>(); }

}  // namespace kiln::testing
