// What the CPU can do, and the kernel choices kiln made from it: decided once
// per process and reported, so that a figure or a failure can be read against
// the machine it came from (docs/performance.md, "Portable speed").
#pragma once

#include <string>

namespace kiln {

/// The vector instruction set kiln's own hand-written kernels run on: avx512
/// where the CPU has AVX-512 (F, BW, VL, DQ) and the build's KILN_ARCH
/// includes it (native on such a CPU, x86-64-v4), else avx2.
enum class KernelIsa { avx2, avx512 };
const char* name(KernelIsa isa);

/// How bf16 matrix products and convolutions run.
///   native: bf16 operands on bf16 dot-product instructions (AVX512-BF16 or
///           AMX), f32 accumulation.
///   f32:    bf16 storage, f32 arithmetic: operands widened to f32, the f32
///           kernel runs, the result is rounded to bf16 once. Same rounding
///           points as native; only the summation order differs. Chosen where
///           the CPU has no bf16 instructions, since oneDNN's fallback there
///           runs 10-30x slower than f32.
enum class Bf16Compute { native, f32 };
const char* name(Bf16Compute mode);

struct CpuInfo {
  std::string model;  // /proc/cpuinfo's "model name"
  bool avx2 = false, fma = false;
  bool avx512 = false;  // F, BW, VL and DQ: what kiln's AVX-512 kernels use
  bool avx512_bf16 = false, amx_bf16 = false;
  KernelIsa kernel_isa = KernelIsa::avx2;
  Bf16Compute bf16 = Bf16Compute::f32;

  /// One line: "AMD EPYC 7B13: avx2+fma; kernels avx2; bf16 computes in f32".
  std::string summary() const;
};

/// The machine and the choices, decided at the first call. Environment
/// overrides (read once): KILN_ISA=avx2|avx512 picks the kernels' ISA (avx512
/// only where available, see KernelIsa), KILN_BF16=native|f32 picks the bf16 mode
/// (native only where the CPU has bf16 instructions); oneDNN's own
/// ONEDNN_MAX_CPU_ISA / DNNL_MAX_CPU_ISA, when set below AVX512_CORE_BF16,
/// makes bf16 compute in f32 too (oneDNN would not use the instructions).
/// Unknown values are an Error naming the variable.
const CpuInfo& cpu_info();

namespace detail {
/// Tests only: run kernels on `isa` / bf16 in `mode` from now on (both must
/// be supported by the CPU, else an Error). Not thread-safe against running
/// kernels; the scoped guards in tests restore the previous choice.
void set_kernel_isa(KernelIsa isa);
void set_bf16_compute(Bf16Compute mode);
}  // namespace detail

}  // namespace kiln
