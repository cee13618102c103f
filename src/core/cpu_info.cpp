// CPU features from cpuid (GCC's __builtin_cpu_supports), the model name from
// /proc/cpuinfo, and the kernel choices made from them once per process.
#include "kiln/core/cpu_info.h"

#include <cpuid.h>

#include <cstdlib>
#include <fstream>
#include <string_view>

#include "kiln/core/error.h"

namespace kiln {

namespace {

std::string model_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) != 0) continue;
    auto colon = line.find(':');
    if (colon == std::string::npos) break;
    auto start = line.find_first_not_of(" \t", colon + 1);
    return start == std::string::npos ? std::string() : line.substr(start);
  }
  return "unknown x86-64";
}

// AMX-BF16: CPUID.(EAX=7, ECX=0):EDX bit 22 (GCC 12's __builtin_cpu_supports
// does not know "amx-bf16"), usable only when the OS enabled the tile state
// (XCR0 bits 17 and 18); Linux grants it per process on request, which oneDNN
// makes, so the CPUID bit is what decides whether oneDNN can use it.
bool cpu_has_amx_bf16() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
  return (d >> 22) & 1u;
}

// oneDNN's ISA cap (its documented variables): bf16 instructions are used only
// when the cap admits AVX512_CORE_BF16 or later.
bool onednn_cap_admits_bf16() {
  const char* cap = std::getenv("ONEDNN_MAX_CPU_ISA");
  if (!cap) cap = std::getenv("DNNL_MAX_CPU_ISA");
  if (!cap || !*cap) return true;
  std::string_view v(cap);
  return v == "ALL" || v == "AVX512_CORE_BF16" || v == "AVX512_CORE_FP16" || v == "AVX512_CORE_AMX" ||
         v == "AVX512_CORE_AMX_FP16";
}

// The AVX-512 copies of the per-ISA kernels exist only when the build's
// baseline (KILN_ARCH) has AVX-512 (NOTE [Per-ISA kernels] in CMakeLists.txt);
// this file is compiled with that baseline.
#ifdef __AVX512F__
constexpr bool kBuiltWithAvx512 = true;
#else
constexpr bool kBuiltWithAvx512 = false;
#endif

bool supports(KernelIsa isa, const CpuInfo& c) { return isa == KernelIsa::avx2 || (c.avx512 && kBuiltWithAvx512); }

const char* why_no_avx512(const CpuInfo& c) {
  return c.avx512 ? "this build's KILN_ARCH has no AVX-512" : "this CPU has no AVX-512";
}
bool supports(Bf16Compute mode, const CpuInfo& c) {
  return mode == Bf16Compute::f32 || ((c.avx512_bf16 || c.amx_bf16) && onednn_cap_admits_bf16());
}

CpuInfo detect() {
  CpuInfo c;
  __builtin_cpu_init();
  c.model = model_name();
  c.avx2 = __builtin_cpu_supports("avx2");
  c.fma = __builtin_cpu_supports("fma");
  c.avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  c.avx512_bf16 = c.avx512 && __builtin_cpu_supports("avx512bf16");
  c.amx_bf16 = cpu_has_amx_bf16();
  c.kernel_isa = supports(KernelIsa::avx512, c) ? KernelIsa::avx512 : KernelIsa::avx2;
  c.bf16 = supports(Bf16Compute::native, c) ? Bf16Compute::native : Bf16Compute::f32;

  if (const char* v = std::getenv("KILN_ISA"); v && *v) {
    std::string_view s(v);
    KILN_CHECK(s == "avx2" || s == "avx512", "cpu_info", "KILN_ISA must be avx2 or avx512, got '{}'", s);
    KernelIsa want = s == "avx2" ? KernelIsa::avx2 : KernelIsa::avx512;
    KILN_CHECK(supports(want, c), "cpu_info", "KILN_ISA=avx512 but {}", why_no_avx512(c));
    c.kernel_isa = want;
  }
  if (const char* v = std::getenv("KILN_BF16"); v && *v) {
    std::string_view s(v);
    KILN_CHECK(s == "native" || s == "f32", "cpu_info", "KILN_BF16 must be native or f32, got '{}'", s);
    Bf16Compute want = s == "native" ? Bf16Compute::native : Bf16Compute::f32;
    KILN_CHECK(supports(want, c), "cpu_info",
               "KILN_BF16=native but this CPU ({}) has no bf16 instructions usable by oneDNN", c.model);
    c.bf16 = want;
  }
  return c;
}

CpuInfo& info() {
  static CpuInfo c = detect();
  return c;
}

}  // namespace

const char* name(KernelIsa isa) { return isa == KernelIsa::avx512 ? "avx512" : "avx2"; }
const char* name(Bf16Compute mode) { return mode == Bf16Compute::native ? "native" : "f32"; }

std::string CpuInfo::summary() const {
  std::string isa = avx512 ? "avx512" : avx2 ? "avx2" : "sse";
  if (fma && !avx512) isa += "+fma";
  if (avx512_bf16) isa += "+avx512_bf16";
  if (amx_bf16) isa += "+amx_bf16";
  return fmt::format("{}: {}; kernels {}; bf16 {}", model, isa, name(kernel_isa),
                     bf16 == Bf16Compute::native ? "native" : "computes in f32");
}

const CpuInfo& cpu_info() { return info(); }

namespace detail {

void set_kernel_isa(KernelIsa isa) {
  KILN_CHECK(supports(isa, info()), "set_kernel_isa", "{} kernels are not available: {}", name(isa),
             why_no_avx512(info()));
  info().kernel_isa = isa;
}

void set_bf16_compute(Bf16Compute mode) {
  KILN_CHECK(supports(mode, info()), "set_bf16_compute", "this CPU ({}) has no bf16 instructions usable by oneDNN",
             info().model);
  info().bf16 = mode;
}

}  // namespace detail

}  // namespace kiln
