// libFuzzer target: Fashion-MNIST's gzipped IDX files (src/data/fashion_mnist.cpp).
// Input: a flags byte, a 2-byte little-endian length L, then L bytes of the
// images file and the rest as the labels file. Deflate's checksums would stop
// libFuzzer's mutations at the first byte, so the parts are IDX bytes that
// the harness gzips (flags bit 0 clear) or passes as they are (set: the
// reader must refuse a file that is not gzip). Flags bit 1: limit 2.
#include <zlib.h>

#include <cstdint>
#include <string>
#include <vector>

#include "kiln/core/allocator.h"
#include "kiln/data/fashion_mnist.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

std::string gzip(std::string_view raw) {
  z_stream z{};
  if (deflateInit2(&z, 1, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) kiln::fuzz::die("deflateInit2");
  std::string out(deflateBound(&z, uLong(raw.size())) + 32, '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(raw.data()));
  z.avail_in = uInt(raw.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = uInt(out.size());
  if (deflate(&z, Z_FINISH) != Z_STREAM_END) kiln::fuzz::die("deflate");
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 3) return 0;
  const uint8_t flags = data[0];
  const size_t split = std::min<size_t>(size - 3, size_t(data[1]) | size_t(data[2]) << 8);
  std::string_view images(reinterpret_cast<const char*>(data) + 3, split);
  std::string_view labels(reinterpret_cast<const char*>(data) + 3 + split, size - 3 - split);
  const std::string& dir = kiln::fuzz::scratch_dir();
  const bool raw = flags & 1;
  kiln::fuzz::write_file(dir + "/t10k-images-idx3-ubyte.gz", raw ? std::string(images) : gzip(images));
  kiln::fuzz::write_file(dir + "/t10k-labels-idx1-ubyte.gz", raw ? std::string(labels) : gzip(labels));

  kiln::fuzz::accepts([&] {
    kiln::data::FashionMNIST set(dir, /*train=*/false, {.limit = (flags & 2) ? 2 : 0});
    kiln::fuzz::require(!raw, "a file that is not gzip was accepted");
    kiln::fuzz::require(set.size() >= 0 && set.targets().numel() == set.size(), "size and targets disagree");
    for (int64_t i = 0; i < set.size(); ++i) {
      kiln::data::Example e = set.get(i);
      const int64_t label = e.target.item<int64_t>();
      kiln::fuzz::require(label >= 0 && label < 10, "a label outside 0..9 was accepted");
    }
  });
  // A path that names a file, not the folder: refused.
  kiln::fuzz::require(!kiln::fuzz::accepts([&] { kiln::data::FashionMNIST(dir + "/t10k-images-idx3-ubyte.gz", false); }),
                      "a file was accepted as the data set's folder");
  kiln::empty_cache();
  return 0;
}
