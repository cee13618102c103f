// CPU cat (row blocks copied with memcpy), triangles and one-hot.
#include <cstring>

#include "src/backend/cpu/copy/copy.h"
#include "src/backend/cpu/dispatch.h"
#include "src/backend/cpu/index/index.h"
#include "src/backend/cpu/loops.h"

namespace kiln::backend::cpu {

namespace {
// Bytes below which a memcpy loop stays on one thread.
constexpr int64_t kCopyGrainBytes = 1 << 18;
}  // namespace

void cat(const std::vector<Tensor>& xs, int64_t dim, const Tensor& out) {
  // out viewed as [outer, total, inner]; input i fills columns
  // [start_i, start_i + size_i) of every outer row: one block of
  // size_i * inner contiguous elements per row.
  const Shape& s = out.shape();
  const int64_t outer = numel(std::span<const int64_t>(s).first(size_t(dim)));
  const int64_t inner = numel(std::span<const int64_t>(s).subspan(size_t(dim) + 1));
  const int64_t item = out.itemsize(), out_row = s[size_t(dim)] * inner * item;
  struct Block {
    const char* src;
    int64_t bytes;   // per outer row
    int64_t start;   // byte offset inside an out row
  };
  std::vector<Block> blocks;
  int64_t start = 0;
  for (const Tensor& x : xs) {
    int64_t size = x.shape()[size_t(dim)];
    if (x.numel() > 0) {
      if (x.dtype() == out.dtype() && x.is_contiguous()) {
        blocks.push_back({static_cast<const char*>(x.data_ptr()), size * inner * item, start * inner * item});
      } else {
        // Converting or strided inputs go through the strided copy engine.
        Tensor dst = Tensor::make_view(out.storage(), x.shape(), out.strides(),
                                       out.storage_offset() + start * out.strides()[size_t(dim)], out.dtype());
        copy(x, dst);
      }
    }
    start += size;
  }
  if (blocks.empty()) return;
  char* base = static_cast<char*>(out.data_ptr());
  if (outer == 1) {
    // One block per input: split large blocks over the pool.
    for (const Block& b : blocks)
      parallel_for(0, b.bytes, kCopyGrainBytes, [&](int64_t lo, int64_t hi) {
        std::memcpy(base + b.start + lo, b.src + lo, size_t(hi - lo));
      });
    return;
  }
  parallel_for(0, outer, std::max<int64_t>(1, kCopyGrainBytes / std::max<int64_t>(out_row, 1)),
               [&](int64_t lo, int64_t hi) {
                 for (int64_t o = lo; o < hi; ++o)
                   for (const Block& b : blocks) std::memcpy(base + o * out_row + b.start, b.src + o * b.bytes, size_t(b.bytes));
               });
}

void triangle(const Tensor& x, int64_t k, bool lower, const Tensor& out) {
  // Rows of the last two dims [R, C]; a zero of every dtype is all-zero bits,
  // so the kernel moves bytes and needs no dtype dispatch.
  const int64_t R = x.shape()[size_t(x.dim() - 2)], C = x.shape()[size_t(x.dim() - 1)];
  if (out.numel() == 0) return;
  const bool copied = !x.is_contiguous();
  if (copied) copy(x, out);  // then zero in place
  const char* src = static_cast<const char*>(copied ? out.data_ptr() : x.data_ptr());
  char* dst = static_cast<char*>(out.data_ptr());
  const int64_t item = out.itemsize(), rows = out.numel() / C;
  parallel_for(0, rows, std::max<int64_t>(1, kCopyGrainBytes / (C * item)), [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      int64_t i = r % R;
      // Columns kept: lower [0, i + k + 1), upper [i + k, C).
      int64_t a = lower ? 0 : std::clamp<int64_t>(i + k, 0, C);
      int64_t b = lower ? std::clamp<int64_t>(i + k + 1, 0, C) : C;
      char* o = dst + r * C * item;
      const char* in = src + r * C * item;
      if (!copied && b > a) std::memcpy(o + a * item, in + a * item, size_t((b - a) * item));
      std::memset(o, 0, size_t(a * item));
      std::memset(o + b * item, 0, size_t((C - b) * item));
    }
  });
}

void one_hot(const Tensor& indices, const Tensor& out) {
  const int64_t C = out.shape().back(), n = indices.numel();
  int64_t* o = out.data<int64_t>();
  std::memset(o, 0, size_t(out.nbytes()));
  if (C == 0) return;
  StridedLoop<1> L = make_loop<1>({&indices});
  dispatch_only<int32_t, int64_t>(indices.dtype(), [&](auto itag) {
    using I = typename decltype(itag)::type;
    // Row r of out gets its 1 at column indices[r] (indices in row-major order).
    parallel_for(0, n, kParallelGrain, [&](int64_t lo, int64_t hi) {
      int64_t r = lo;
      auto fn = [&](std::array<char*, 1> p, std::array<int64_t, 1> s, int64_t m) {
        for (int64_t j = 0; j < m; ++j, ++r) o[r * C + int64_t(*reinterpret_cast<const I*>(p[0] + j * s[0]))] = 1;
      };
      run_range<1>(L, lo, hi, fn);
    });
  });
}

}  // namespace kiln::backend::cpu
