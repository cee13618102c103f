// CRC32C (kiln/core/crc32c.h): the standard check values, the SSE4.2 path
// against the table, continuing and combining, and the parallel slices.
#include "kiln/core/crc32c.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "kiln/core/parallel.h"

namespace kiln {
namespace {

TEST(Crc32c, KnownValuesAndTheFastPathMatchesTheTable) {
  EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u);  // the standard check value (RFC 3720 / iSCSI)
  EXPECT_EQ(crc32c("", 0), 0u);
  std::string zeros(32, '\0');
  EXPECT_EQ(crc32c(zeros.data(), 32), 0x8A9136AAu);  // RFC 3720 B.4: 32 bytes of zeros
  std::string ones(32, '\xff');
  EXPECT_EQ(crc32c(ones.data(), 32), 0x62A8AB43u);  // RFC 3720 B.4: 32 bytes of 0xff

  std::mt19937 rng(0);
  std::vector<unsigned char> buf(40000);
  for (auto& b : buf) b = static_cast<unsigned char>(rng());
  // Lengths around the 3 x 4096-byte interleaved blocks, at every alignment.
  for (size_t n : {size_t(0), size_t(1), size_t(7), size_t(8), size_t(100), size_t(12287), size_t(12288),
                   size_t(12289), size_t(30000), size_t(39990)})
    for (size_t offset = 0; offset < 8; ++offset)
      ASSERT_EQ(crc32c(buf.data() + offset, n), detail::crc32c_portable(buf.data() + offset, n)) << n << " " << offset;
  // Continuing from a previous CRC, or combining two, equals one pass.
  EXPECT_EQ(crc32c(buf.data() + 5000, 20000, crc32c(buf.data(), 5000)), crc32c(buf.data(), 25000));
  EXPECT_EQ(crc32c_combine(crc32c(buf.data(), 5000), crc32c(buf.data() + 5000, 20000), 20000),
            crc32c(buf.data(), 25000));
}

TEST(Crc32c, ParallelSlicesGiveTheSameChecksumAsOnePass) {
  std::vector<unsigned char> big((size_t(5) << 20) + 3);  // above the 4 MiB parallel threshold
  std::mt19937 rng(1);
  for (auto& b : big) b = static_cast<unsigned char>(rng());
  uint32_t expected = detail::crc32c_portable(big.data(), big.size());
  int saved = get_num_threads();
  for (int threads : {1, 2, 3}) {
    set_num_threads(threads);
    EXPECT_EQ(crc32c(big.data(), big.size()), expected) << threads << " threads";
    EXPECT_EQ(crc32c(big.data() + 1, big.size() - 1, crc32c(big.data(), 1)), expected) << threads << " threads";
  }
  set_num_threads(saved);
}

}  // namespace
}  // namespace kiln
