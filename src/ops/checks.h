// Argument checks shared by the ops (each op validates before it allocates
// or writes anything; see docs/adding_an_op.md).
#pragma once

#include "kiln/core/backends.h"
#include "kiln/core/error.h"
#include "kiln/core/replay.h"
#include "kiln/core/tensor.h"

namespace kiln {

/// Throws "[op] <arg> is an undefined tensor" for a default-constructed Tensor,
/// and "[op] this build has no GPU backend: ..." for a tensor on a device this
/// build has no backend for (NOTE [Backend dispatch] in src/backend/backend.h).
inline void check_defined(const char* op, const Tensor& t, const char* arg = "input") {
  KILN_CHECK(t.defined(), op, "{} is an undefined tensor", arg);
  check_device(op, t.device());
  replay::note_op(op);  // names the op in a rejected recording (kiln/core/replay.h)
}

}  // namespace kiln
