// CRC32C: three interleaved crc32q streams on x86 (the instruction has a
// latency of 3 cycles and a throughput of 1, so one stream runs at a third of
// the possible speed), combined by shifting the first two streams' CRCs over
// the bytes that followed them; a slicing-by-1 table elsewhere.
#include "kiln/core/crc32c.h"

#include <array>
#include <cstring>
#include <vector>

#include "kiln/core/parallel.h"

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace kiln {
namespace {

constexpr uint32_t kPoly = 0x82F63B78u;  // reflected Castagnoli polynomial

constexpr std::array<uint32_t, 256> make_table() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ kPoly : c >> 1;
    t[i] = c;
  }
  return t;
}
constexpr std::array<uint32_t, 256> kTable = make_table();

// ---- GF(2) arithmetic to combine CRCs (the zlib crc32_combine method) ----

/// x^a * x^b mod P, with polynomials in reflected bit order.
uint32_t multiply(uint32_t a, uint32_t b) {
  uint32_t product = 0;
  for (uint32_t m = 1u << 31; m != 0; m >>= 1) {
    if (a & m) product ^= b;
    b = (b & 1) ? (b >> 1) ^ kPoly : b >> 1;
  }
  return product;
}

/// x^(8n) mod P: multiplying a CRC register by it appends n zero bytes.
uint32_t x_pow_8n(uint64_t n) {
  uint32_t result = 1u << 31;  // x^0
  uint32_t square = 1u << 23;  // x^8
  for (; n != 0; n >>= 1) {
    if (n & 1) result = multiply(result, square);
    square = multiply(square, square);
  }
  return result;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) uint32_t crc32c_sse42(const unsigned char* p, size_t n, uint32_t crc) {
  uint64_t c0 = crc;
  // Bytes until 8-byte alignment, one at a time.
  while (n > 0 && (reinterpret_cast<uintptr_t>(p) & 7) != 0) {
    c0 = _mm_crc32_u8(uint32_t(c0), *p++);
    --n;
  }
  // Three streams over consecutive blocks of `block` bytes each.
  constexpr size_t block = 4096;
  static const uint32_t shift = x_pow_8n(block);
  while (n >= 3 * block) {
    uint64_t c1 = 0, c2 = 0;
    for (size_t i = 0; i < block; i += 8) {
      uint64_t w0, w1, w2;
      std::memcpy(&w0, p + i, 8);
      std::memcpy(&w1, p + block + i, 8);
      std::memcpy(&w2, p + 2 * block + i, 8);
      c0 = _mm_crc32_u64(c0, w0);
      c1 = _mm_crc32_u64(c1, w1);
      c2 = _mm_crc32_u64(c2, w2);
    }
    // crc(A B) = crc(A) * x^(8|B|) xor crc_from_zero(B): the CRC registers are
    // linear, and streams 1 and 2 started from 0.
    c0 = multiply(uint32_t(c0), shift) ^ uint32_t(c1);
    c0 = multiply(uint32_t(c0), shift) ^ uint32_t(c2);
    p += 3 * block;
    n -= 3 * block;
  }
  for (; n >= 8; n -= 8, p += 8) {
    uint64_t w;
    std::memcpy(&w, p, 8);
    c0 = _mm_crc32_u64(c0, w);
  }
  for (; n > 0; --n) c0 = _mm_crc32_u8(uint32_t(c0), *p++);
  return uint32_t(c0);
}
#endif

}  // namespace

namespace detail {
uint32_t crc32c_portable(const void* data, size_t n, uint32_t crc) {
  const auto* p = static_cast<const unsigned char*>(data);
  uint32_t c = ~crc;
  for (size_t i = 0; i < n; ++i) c = kTable[(c ^ p[i]) & 0xff] ^ (c >> 8);
  return ~c;
}
}  // namespace detail

namespace {
uint32_t crc32c_serial(const void* data, size_t n, uint32_t crc) {
#if defined(__x86_64__)
  static const bool has_sse42 = __builtin_cpu_supports("sse4.2");
  if (has_sse42) return ~crc32c_sse42(static_cast<const unsigned char*>(data), n, ~crc);
#endif
  return detail::crc32c_portable(data, n, crc);
}
}  // namespace

uint32_t crc32c_combine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b) {
  return multiply(x_pow_8n(len_b), crc_a) ^ crc_b;
}

uint32_t crc32c(const void* data, size_t n, uint32_t crc) {
  constexpr size_t kParallelBytes = size_t(4) << 20;
  int64_t slices = effective_num_threads();
  if (n < kParallelBytes || slices < 2) return crc32c_serial(data, n, crc);
  // One slice per thread; the checksum is one value whatever the split.
  const auto* p = static_cast<const unsigned char*>(data);
  size_t slice = (n + size_t(slices) - 1) / size_t(slices);
  std::vector<uint32_t> part(static_cast<size_t>(slices));
  parallel_for(0, slices, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      size_t begin = size_t(i) * slice, end = std::min(n, begin + slice);
      part[size_t(i)] = begin < end ? crc32c_serial(p + begin, end - begin, 0) : 0;
    }
  });
  for (int64_t i = 0; i < slices; ++i) {
    size_t begin = size_t(i) * slice, end = std::min(n, begin + slice);
    if (begin < end) crc = crc32c_combine(crc, part[size_t(i)], end - begin);
  }
  return crc;
}

}  // namespace kiln
