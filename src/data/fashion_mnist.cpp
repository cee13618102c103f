// FashionMNIST: reads and validates the gzipped IDX files (big-endian header,
// then u8 pixels or labels) and keeps the set as two in-memory tensors.
//
// IDX layout: images: magic 0x00000803, count, rows, cols (u32 big-endian),
// then count * rows * cols u8 pixels, row-major; labels: magic 0x00000801,
// count, then count u8 labels.
#include "kiln/data/fashion_mnist.h"

#include <fmt/format.h>
#include <sys/mman.h>
#include <zlib.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <tuple>

#include "kiln/core/error.h"
#include "src/data/batch_checks.h"

namespace kiln::data {
namespace {

constexpr const char* kOp = "FashionMNIST";
constexpr const char* kDebianRoot = "/usr/share/datasets/fashion-mnist";
constexpr uint32_t kImagesMagic = 0x00000803, kLabelsMagic = 0x00000801;
constexpr int64_t kSide = 28, kClasses = 10;

// One gzip file read front to back; every short read is an error naming the file.
class GzReader {
 public:
  explicit GzReader(const std::string& path) : path_(path) {
    KILN_CHECK(std::filesystem::is_regular_file(path), kOp,
               "{} not found: install the Debian package dataset-fashion-mnist (sudo apt-get install "
               "dataset-fashion-mnist) or pass the folder holding the IDX files",
               path);
    file_ = gzopen(path.c_str(), "rb");
    KILN_CHECK(file_ != nullptr, kOp, "cannot open {}: {}", path, std::strerror(errno));
    gzbuffer(file_, 1 << 18);
  }
  ~GzReader() {
    if (file_) gzclose(file_);
  }
  GzReader(const GzReader&) = delete;
  GzReader& operator=(const GzReader&) = delete;

  // Reads exactly n bytes of decompressed data into dst.
  void read(void* dst, size_t n, const char* what) {
    auto* out = static_cast<char*>(dst);
    size_t done = 0;
    while (done < n) {
      // gzread takes an unsigned count: at most 1 GiB a call.
      int got = gzread(file_, out + done, unsigned(std::min(n - done, size_t(1) << 30)));
      if (got <= 0) {
        int code = 0;
        const char* msg = gzerror(file_, &code);
        KILN_CHECK(got == 0 && code == Z_OK, kOp, "{} is corrupt or truncated ({}) while reading its {}", path_,
                   msg ? msg : "zlib error", what);
        KILN_FAIL(kOp, "{} is truncated: it ends after {} of the {} bytes of its {}", path_, done, n, what);
      }
      // gzread passes plain bytes through; the files must be gzip streams.
      if (!checked_gzip_) {
        KILN_CHECK(!gzdirect(file_), kOp, "{} is not a gzip file", path_);
        checked_gzip_ = true;
      }
      done += size_t(got);
    }
  }

  // Everything was read: no trailing bytes (a wrong count in the header).
  void expect_end(const char* what) {
    char extra;
    int got = gzread(file_, &extra, 1);
    KILN_CHECK(got == 0, kOp, "{} holds more bytes than its header's {} announces", path_, what);
  }

 private:
  std::string path_;
  gzFile file_ = nullptr;
  bool checked_gzip_ = false;
};

uint32_t big_endian(const unsigned char* p) {
  return uint32_t(p[0]) << 24 | uint32_t(p[1]) << 16 | uint32_t(p[2]) << 8 | uint32_t(p[3]);
}

std::string join(const std::string& root, const char* name) { return (std::filesystem::path(root) / name).string(); }

struct Header {
  uint32_t magic = 0, count = 0, rows = 0, cols = 0;
};

Header read_header(GzReader& in, const std::string& path, uint32_t magic, const char* what) {
  const int words = magic == kImagesMagic ? 4 : 2;
  unsigned char raw[16];
  in.read(raw, size_t(words) * 4, "header");
  Header h{big_endian(raw), big_endian(raw + 4)};
  KILN_CHECK(h.magic == magic, kOp, "{} is not an IDX file of {}: magic 0x{:08x}, expected 0x{:08x}", path, what,
             h.magic, magic);
  if (words == 4) {
    h.rows = big_endian(raw + 8);
    h.cols = big_endian(raw + 12);
    KILN_CHECK(h.rows == kSide && h.cols == kSide, kOp, "{} holds {}x{} images, expected {}x{}", path, h.rows, h.cols,
               kSide, kSide);
  }
  return h;
}

// `nbytes` of fresh memory as a CPU Storage. Large blocks are mapped with
// transparent huge pages advised: first-touch page faults are most of the cost
// of reading the data set on a VM (47 MB in 4 KiB pages took as long as inflating it).
std::shared_ptr<Storage> huge_page_storage(size_t nbytes) {
  if (nbytes < (size_t(4) << 20)) return std::make_shared<Storage>(nbytes, kCPU);
  void* p = ::mmap(nullptr, nbytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return std::make_shared<Storage>(nbytes, kCPU);
  ::madvise(p, nbytes, MADV_HUGEPAGE);  // advice only: without THP, plain pages
  auto unmap = [](void* data, void* ctx) { ::munmap(data, reinterpret_cast<size_t>(ctx)); };
  return std::make_shared<Storage>(p, nbytes, kCPU, unmap, reinterpret_cast<void*>(nbytes));
}

// images [n, 1, 28, 28] u8, labels [n] i64.
std::pair<Tensor, Tensor> load(const std::string& root, bool train, int64_t limit) {
  KILN_CHECK(limit >= 0, kOp, "limit must be non-negative (0: all), got {}", limit);
  std::error_code ec;
  KILN_CHECK(!std::filesystem::exists(root, ec) || std::filesystem::is_directory(root, ec), kOp,
             "{} is a file, not a folder: pass the folder holding the four IDX files ({}, {}, {}, {})", root,
             "train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz", "t10k-images-idx3-ubyte.gz",
             "t10k-labels-idx1-ubyte.gz");
  const std::string images_path = join(root, train ? "train-images-idx3-ubyte.gz" : "t10k-images-idx3-ubyte.gz");
  const std::string labels_path = join(root, train ? "train-labels-idx1-ubyte.gz" : "t10k-labels-idx1-ubyte.gz");
  GzReader images(images_path), labels(labels_path);
  Header ih = read_header(images, images_path, kImagesMagic, "images");
  Header lh = read_header(labels, labels_path, kLabelsMagic, "labels");
  KILN_CHECK(ih.count == lh.count, kOp, "{} holds {} images but {} holds {} labels", images_path, ih.count, labels_path,
             lh.count);
  const bool all = limit == 0 || limit >= int64_t(ih.count);
  const int64_t n = all ? int64_t(ih.count) : limit;
  // A damaged count must not size the tensors: deflate expands at most ~1032
  // times, so a file holds no more than that many bytes per compressed byte.
  for (const auto& [path, bytes] : {std::pair{&images_path, n * kSide * kSide}, std::pair{&labels_path, n}}) {
    const int64_t most = 1032 * int64_t(std::filesystem::file_size(*path)) + 1024;
    KILN_CHECK(bytes <= most, kOp, "{}: its header announces {} examples ({} bytes), more than a file of its size "
               "can hold: the header is damaged", *path, n, bytes);
  }

  // Pixels are inflated straight into the tensor (most of the time: ~0.3 s for
  // the 26 MB training file); the whole file when all are kept, so a count
  // that disagrees with the data is caught.
  const Shape shape{n, 1, kSide, kSide};
  Tensor x = Tensor::make_view(huge_page_storage(size_t(n * kSide * kSide)), shape, contiguous_strides(shape), 0, kU8);
  images.read(x.data_ptr(), size_t(x.nbytes()), "pixels");
  if (all) images.expect_end("count");

  std::vector<unsigned char> label_bytes(static_cast<size_t>(n));
  labels.read(label_bytes.data(), label_bytes.size(), "labels");
  if (all) labels.expect_end("count");
  Tensor y = Tensor::empty({n}, kI64);
  int64_t* yp = y.data<int64_t>();
  for (int64_t i = 0; i < n; ++i) {
    KILN_CHECK(label_bytes[size_t(i)] < kClasses, kOp, "{}: label {} of example {} is not a class (0..9)", labels_path,
               int(label_bytes[size_t(i)]), i);
    yp[i] = label_bytes[size_t(i)];
  }
  return {std::move(x), std::move(y)};
}

// One example's 784 pixels to inputs: p / 255, then (x - mean) / std, in f32
// as torchvision's ToTensor + Normalize. Two divisions rather than a 256-entry
// table: the loop vectorises (u8 -> f32, divps) and is about twice as fast as
// the table's scalar loads, with the same bits.
void convert(const uint8_t* src, float* dst, bool normalize) {
  constexpr int64_t n = kSide * kSide;
  if (normalize) {
    for (int64_t i = 0; i < n; ++i) dst[i] = (float(src[i]) / 255.0f - FashionMNIST::kMean) / FashionMNIST::kStd;
  } else {
    for (int64_t i = 0; i < n; ++i) dst[i] = float(src[i]) / 255.0f;
  }
}

}  // namespace

FashionMNIST::FashionMNIST(const std::string& root, bool train, FashionMNISTOptions options)
    : root_(root), train_(train), normalize_(options.normalize) {
  std::tie(images_, targets_) = load(root, train, options.limit);
}

Example FashionMNIST::get(int64_t index) const {
  KILN_CHECK(index >= 0 && index < size(), "FashionMNIST.get", "index {} is out of range for {} examples", index,
             size());
  Tensor input = Tensor::empty({1, kSide, kSide}, kF32);
  convert(images_.data<uint8_t>() + index * kSide * kSide, input.data<float>(), normalize_);
  return {input, Tensor::make_view(targets_.storage(), {}, {}, index, kI64)};
}

void FashionMNIST::gather(std::span<const int64_t> indices, Batch& out) const {
  constexpr const char* op = "FashionMNIST.gather";
  const int64_t n = int64_t(indices.size()), size = this->size();
  static constexpr int64_t kRow[] = {1, kSide, kSide};
  check_batch_part(op, "input", out.input, n, kRow, kF32);
  check_batch_part(op, "target", out.target, n, {}, kI64);
  const uint8_t* src = images_.data<uint8_t>();
  const int64_t* labels = targets_.data<int64_t>();
  float* dst = out.input.data<float>();
  int64_t* tgt = out.target.data<int64_t>();
  for (int64_t k = 0; k < n; ++k) {
    const int64_t i = indices[size_t(k)];
    KILN_CHECK(i >= 0 && i < size, op, "index {} is out of range for {} examples", i, size);
    convert(src + i * kSide * kSide, dst + k * kSide * kSide, normalize_);
    tgt[k] = labels[i];
  }
}

std::string FashionMNIST::default_root() {
  const char* env = std::getenv("KILN_FASHION_MNIST");
  return env && *env ? std::string(env) : std::string(kDebianRoot);
}

const std::vector<std::string>& FashionMNIST::classes() {
  static const std::vector<std::string> names{"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                                              "Sandal",      "Shirt",   "Sneaker",  "Bag",   "Ankle boot"};
  return names;
}

}  // namespace kiln::data
