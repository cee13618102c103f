// Run-time choice between the two copies of a per-ISA kernel (NOTE [Per-ISA
// kernels] in CMakeLists.txt): the files of every isa/ folder under
// src/backend/cpu define their kernels in namespace
// kiln::backend::cpu::KILN_ISA_NS, which the build sets to avx512 or avx2.
#pragma once

#include "kiln/core/cpu_info.h"

/// KILN_ISA_CALL(fn, args...): avx512::fn(args...) or avx2::fn(args...) (the
/// copies in the calling namespace's avx512 and avx2 namespaces), for the
/// kernel ISA in use (kiln::cpu_info().kernel_isa).
#define KILN_ISA_CALL(fn, ...)                                                                             \
  (::kiln::cpu_info().kernel_isa == ::kiln::KernelIsa::avx512 ? avx512::fn(__VA_ARGS__) : avx2::fn(__VA_ARGS__))

/// Declares the same functions in both copies' namespaces, inside the
/// enclosing one: namespace kiln::backend::cpu { KILN_ISA_DECLARE(void f(int);) }
#define KILN_ISA_DECLARE(...) \
  namespace avx512 {          \
  __VA_ARGS__                 \
  }                           \
  namespace avx2 {            \
  __VA_ARGS__                 \
  }
