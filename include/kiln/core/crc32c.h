// CRC32C (Castagnoli, polynomial 0x1EDC6F41 reflected = 0x82F63B78): the
// per-tensor checksum of kiln's checkpoints and tokenizer files (core: io and
// data both check it). Same values as iSCSI / ext4 /
// Python's `crc32c` package: crc32c("123456789") = 0xE3069283.
#pragma once

#include <cstddef>
#include <cstdint>

namespace kiln {

/// The CRC32C of `n` bytes, continuing from `crc` (the result of a previous
/// call over the preceding bytes; 0 to start). Uses the SSE4.2 crc32
/// instruction when the CPU has it, else a table; from 4 MiB up, the slices
/// of kiln's threads run in parallel and are combined.
uint32_t crc32c(const void* data, size_t n, uint32_t crc = 0);

/// The CRC32C of A followed by B from crc32c(A), crc32c(B) and B's length
/// (zlib's crc32_combine, for this polynomial).
uint32_t crc32c_combine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b);

namespace detail {
/// The table version, always (tests compare the two).
uint32_t crc32c_portable(const void* data, size_t n, uint32_t crc = 0);
}  // namespace detail

}  // namespace kiln
