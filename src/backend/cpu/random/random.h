// CPU kernels for random tensors. A draw reads the Philox word stream
// w_0, w_1, ... where w_j is word j % 4 of block first_block + j / 4 under
// key `seed`; each kernel documents which words an element consumes, so a
// value depends only on (seed, first_block, element index), never on threads.
#pragma once

#include <cstdint>

#include "kiln/core/tensor.h"

namespace kiln::backend::cpu {

/// Words of the stream used by a draw of n elements of `dtype`:
///   uniform   f32/bf16: 1 word per element;  f64: 2 words (53 bits).
///   normal    f32/bf16: 1 word per element (Box–Muller on word pairs
///             (2m, 2m+1) -> elements 2m, 2m+1);  f64: 2 words per element
///             (two 53-bit uniforms from words 4m..4m+3 -> elements 2m, 2m+1),
///             rounded up to whole pairs.
///   randint   1 word per element when high - low <= 2^32, else 2
///             (multiply-shift: the bias is below range / 2^32, resp. / 2^64).
///   bernoulli 1 word per element.
///   randperm  2 words per Fisher–Yates step (n - 1 steps).
int64_t uniform_words(DType dtype, int64_t n);
int64_t normal_words(DType dtype, int64_t n);
int64_t randint_words(uint64_t range, int64_t n);
inline int64_t randperm_words(int64_t n) { return n > 1 ? 2 * (n - 1) : 0; }
/// Blocks covering `words` words.
inline uint64_t blocks_for(int64_t words) { return uint64_t(words + 3) / 4; }

// All kernels write a contiguous floating (uniform, normal) or any-dtype
// (randint, bernoulli) tensor `out`.

/// out = low + (high - low) * U[0, 1), kept below high after rounding.
void uniform(const Tensor& out, double low, double high, uint64_t seed, uint64_t first_block);
/// out = mean + std * N(0, 1).
void normal(const Tensor& out, double mean, double std, uint64_t seed, uint64_t first_block);
/// out = low + uniform integer in [0, range), range >= 1.
void randint(const Tensor& out, int64_t low, uint64_t range, uint64_t seed, uint64_t first_block);
/// out = U < p for a contiguous floating `p` of out's numel; returns false
/// (out partly written) when some p lies outside [0, 1] or is NaN.
bool bernoulli(const Tensor& out, const Tensor& p, uint64_t seed, uint64_t first_block);
/// out = U < p for a scalar p in [0, 1].
void bernoulli(const Tensor& out, double p, uint64_t seed, uint64_t first_block);
/// A random permutation of 0..n-1 into contiguous i64 `out` (sequential
/// Fisher–Yates: step s swaps out[n-1-s] with a uniform index in [0, n-1-s]).
void randperm(const Tensor& out, uint64_t seed, uint64_t first_block);

namespace ref {
/// Word j of the stream, computed alone from Generator-style blocks.
uint32_t word(uint64_t seed, uint64_t first_block, int64_t j);
/// The plain element-by-element kernels the fast ones are tested against.
void uniform(const Tensor& out, double low, double high, uint64_t seed, uint64_t first_block);
void normal(const Tensor& out, double mean, double std, uint64_t seed, uint64_t first_block);
void randint(const Tensor& out, int64_t low, uint64_t range, uint64_t seed, uint64_t first_block);
void bernoulli(const Tensor& out, const Tensor& p, uint64_t seed, uint64_t first_block);
}  // namespace ref

}  // namespace kiln::backend::cpu
