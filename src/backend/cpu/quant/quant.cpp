// Run-time choice of the quantized products' kernel copy (quant.h).
#include "src/backend/cpu/quant/quant.h"

#include <atomic>

#include "src/backend/cpu/quant/isa/quant.h"

namespace kiln::backend::cpu {

namespace {

std::atomic<bool> g_vnni_allowed{true};

// cpuid's avx512_vnni (GCC's __builtin_cpu_supports reads it), decided once.
bool cpu_has_avx512_vnni() {
  static const bool has = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512vnni") != 0;
  }();
  return has;
}

}  // namespace

bool q4_0_uses_vnni() {
  return cpu_info().kernel_isa == KernelIsa::avx512 && avx512::q4_0_vnni_compiled() && cpu_has_avx512_vnni() &&
         g_vnni_allowed.load(std::memory_order_relaxed);
}

const char* quant_kernel_name() {
  return cpu_info().kernel_isa == KernelIsa::avx2 ? "avx2" : q4_0_uses_vnni() ? "avx512-vnni" : "avx512";
}

namespace detail {
bool set_quant_vnni_allowed(bool allowed) { return g_vnni_allowed.exchange(allowed); }
}  // namespace detail

void q8_0_matmul(const int8_t* codes, const float* scales, int64_t rows, int64_t cols, const float* x,
                 int64_t batch, float* y) {
  KILN_ISA_CALL(q8_0_matmul, codes, scales, rows, cols, x, batch, y);
}

void q4_0_matmul(const uint8_t* codes, const float* scales, int64_t rows, int64_t cols, const float* x,
                 int64_t batch, float* y) {
  KILN_ISA_CALL(q4_0_matmul, codes, scales, rows, cols, x, batch, y, q4_0_uses_vnni());
}

}  // namespace kiln::backend::cpu
