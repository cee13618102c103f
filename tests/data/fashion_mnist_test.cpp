// FashionMNIST: the real files (sizes, labels, pixel values, the normalisation
// constants computed from the data) and every kind of broken file written to a
// temporary folder, each refused with the file's name and the problem.
#include "kiln/data/fashion_mnist.h"

#include <gtest/gtest.h>
#include <zlib.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>

#include "kiln/data/dataloader.h"
#include "tests/support/data_testing.h"

namespace kiln::data {
namespace {

namespace fs = std::filesystem;

bool have_real_data() { return fs::exists(fs::path(FashionMNIST::default_root()) / "t10k-labels-idx1-ubyte.gz"); }

#define SKIP_WITHOUT_DATA()                                                       \
  if (!have_real_data())                                                          \
  GTEST_SKIP() << "no Fashion-MNIST files under " << FashionMNIST::default_root() \
               << " (tools/deps installs dataset-fashion-mnist)"

std::vector<int64_t> histogram(const Tensor& labels) {
  std::vector<int64_t> h(10, 0);
  for (int64_t y : labels.to_vector<int64_t>()) ++h[size_t(y)];
  return h;
}

// The raw pixel sum of image i, from the u8 images and from the f32 inputs
// (undoing the scaling to [0, 1]); they must agree.
int64_t pixel_sum(const FashionMNIST& ds, int64_t i) {
  const uint8_t* p = ds.images().data<uint8_t>() + i * 784;
  int64_t s = 0;
  for (int j = 0; j < 784; ++j) s += p[j];
  double from_inputs = 0;
  for (float v : ds.get(i).input.to_vector<float>()) from_inputs += double(v) * 255.0;
  EXPECT_EQ(std::llround(from_inputs), s) << "image " << i;
  return s;
}

TEST(FashionMNIST, TrainingSet) {
  SKIP_WITHOUT_DATA();
  auto start = std::chrono::steady_clock::now();
  FashionMNIST train(FashionMNIST::default_root(), true, {.normalize = false});
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  RecordProperty("load_seconds", std::to_string(seconds));
  std::printf("FashionMNIST train: loaded 60000 in %.3f s\n", seconds);
  EXPECT_TRUE(train.train());
  EXPECT_FALSE(train.normalize());
  ASSERT_EQ(train.size(), 60000);
  EXPECT_EQ(train.images().shape(), Shape({60000, 1, 28, 28}));
  EXPECT_EQ(train.images().dtype(), kU8);
  EXPECT_EQ(train.targets().shape(), Shape({60000}));
  EXPECT_EQ(train.targets().dtype(), kI64);
  std::vector<int64_t> first(train.targets().data<int64_t>(), train.targets().data<int64_t>() + 10);
  EXPECT_EQ(first, (std::vector<int64_t>{9, 0, 0, 3, 0, 2, 7, 2, 5, 5}));
  EXPECT_EQ(histogram(train.targets()), std::vector<int64_t>(10, 6000));
  EXPECT_EQ(FashionMNIST::classes()[size_t(train.get(0).target.item<int64_t>())], "Ankle boot");
  // Pixel values (from Python's gzip module): image 0 sums to 76247, its centre is 217.
  EXPECT_EQ(pixel_sum(train, 0), 76247);
  EXPECT_EQ(pixel_sum(train, 1), 84598);
  EXPECT_EQ(pixel_sum(train, 59999), pixel_sum(train, 59999));
  Example e = train.get(0);
  EXPECT_EQ(e.input.shape(), Shape({1, 28, 28}));
  EXPECT_EQ(e.target.shape(), Shape({}));
  EXPECT_FLOAT_EQ(e.input.to_vector<float>()[14 * 28 + 14], 217.0f / 255.0f);

  // kMean and kStd are this data's mean and (population) std of pixel / 255, to 4 places.
  const uint8_t* x = train.images().data<uint8_t>();
  int64_t sum = 0, sq = 0;
  const int64_t n = train.images().numel();
  for (int64_t i = 0; i < n; ++i) {
    sum += x[i];
    sq += int64_t(x[i]) * x[i];
  }
  const double mean = double(sum) / double(n) / 255.0;
  const double std = std::sqrt(double(sq) / double(n) / (255.0 * 255.0) - mean * mean);
  EXPECT_NEAR(mean, 0.286041, 1e-6);
  EXPECT_NEAR(std, 0.353024, 1e-6);
  EXPECT_NEAR(mean, FashionMNIST::kMean, 5e-5);
  EXPECT_NEAR(std, FashionMNIST::kStd, 5e-5);
}

TEST(FashionMNIST, TestSetNormalisedByDefault) {
  SKIP_WITHOUT_DATA();
  FashionMNIST test(FashionMNIST::default_root(), false);
  EXPECT_FALSE(test.train());
  ASSERT_EQ(test.size(), 10000);
  std::vector<int64_t> first(test.targets().data<int64_t>(), test.targets().data<int64_t>() + 5);
  EXPECT_EQ(first, (std::vector<int64_t>{9, 2, 1, 1, 6}));
  EXPECT_EQ(histogram(test.targets()), std::vector<int64_t>(10, 1000));
  // Pixel 0 (black) and image 0's centre (110) after (x / 255 - mean) / std.
  std::vector<float> img = test.get(0).input.to_vector<float>();
  EXPECT_EQ(img[0], (0.0f - 0.2860f) / 0.3530f);  // the same bits as the formula
  EXPECT_EQ(img[14 * 28 + 14], (110.0f / 255.0f - 0.2860f) / 0.3530f);

  // gather writes the same values as get, row by row.
  Batch b{empty({3, 1, 28, 28}), empty({3}, {.dtype = kI64})};
  std::vector<int64_t> idx{7, 0, 9999};
  test.gather(idx, b);
  EXPECT_EQ(b.target.to_vector<int64_t>(), (std::vector<int64_t>{6, 9, test.targets().to_vector<int64_t>()[9999]}));
  for (int64_t k = 0; k < 3; ++k)
    EXPECT_TRUE(testing::equal(b.input[k], test.get(idx[size_t(k)]).input)) << "row " << k;
  std::vector<int64_t> bad{3, 10000, 0};
  EXPECT_KILN_ERROR(test.gather(bad, b), "[FashionMNIST.gather] index 10000 is out of range for 10000 examples");
  Batch wrong{empty({3, 784}), empty({3}, {.dtype = kI64})};
  EXPECT_KILN_ERROR(test.gather(bad, wrong),
                    "[FashionMNIST.gather] the batch's input is [3, 784] f32, expected [3, 1, 28, 28] f32");
  EXPECT_KILN_ERROR(test.get(-1), "[FashionMNIST.get] index -1 is out of range for 10000 examples");
}

TEST(FashionMNIST, LimitKeepsTheFirstExamplesAndFeedsALoader) {
  SKIP_WITHOUT_DATA();
  auto small = std::make_shared<FashionMNIST>(FashionMNIST::default_root(), false, FashionMNISTOptions{.limit = 100});
  EXPECT_EQ(small->size(), 100);
  EXPECT_EQ(small->targets().to_vector<int64_t>()[3], 1);
  EXPECT_EQ(small->images().shape(), Shape({100, 1, 28, 28}));
  EXPECT_EQ(FashionMNIST(FashionMNIST::default_root(), false, {.limit = 20000}).size(), 10000);
  EXPECT_KILN_ERROR(FashionMNIST(FashionMNIST::default_root(), false, {.limit = -1}),
                    "[FashionMNIST] limit must be non-negative (0: all), got -1");
  DataLoader loader(small, {.batch_size = 64, .shuffle = false, .prefetch = 1});
  Batch b = *loader.next();
  EXPECT_EQ(b.input.shape(), Shape({64, 1, 28, 28}));
  EXPECT_EQ(b.target.to_vector<int64_t>()[4], 6);
  EXPECT_EQ(loader.next()->size(), 36);
}

TEST(FashionMNIST, DefaultRootAndClasses) {
  const char* old = std::getenv("KILN_FASHION_MNIST");
  std::string saved = old ? old : "";
  ::setenv("KILN_FASHION_MNIST", "/data/fm", 1);
  EXPECT_EQ(FashionMNIST::default_root(), "/data/fm");
  ::unsetenv("KILN_FASHION_MNIST");
  EXPECT_EQ(FashionMNIST::default_root(), "/usr/share/datasets/fashion-mnist");
  if (old) ::setenv("KILN_FASHION_MNIST", saved.c_str(), 1);
  EXPECT_EQ(FashionMNIST::classes(), (std::vector<std::string>{"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                                                               "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"}));
}

// ---- broken files, written to a fresh temporary folder ----

std::string be32(uint32_t v) { return {char(v >> 24), char(v >> 16), char(v >> 8), char(v)}; }

std::string images_idx(uint32_t count, uint32_t rows = 28, uint32_t cols = 28, uint32_t magic = 0x803) {
  std::string s = be32(magic) + be32(count) + be32(rows) + be32(cols);
  for (uint32_t i = 0; i < count * rows * cols; ++i) s += char(i % 251);
  return s;
}

std::string labels_idx(uint32_t count, uint32_t magic = 0x801) {
  std::string s = be32(magic) + be32(count);
  for (uint32_t i = 0; i < count; ++i) s += char(i % 10);
  return s;
}

std::string gzip(const std::string& bytes) {
  std::string out(compressBound(uLong(bytes.size())) + 64, '\0');
  z_stream z{};
  deflateInit2(&z, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY);  // +16: a gzip wrapper
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(bytes.data()));
  z.avail_in = uInt(bytes.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = uInt(out.size());
  EXPECT_EQ(deflate(&z, Z_FINISH), Z_STREAM_END);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

class FashionMNISTFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("kiln_fmnist_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const char* name) const { return (dir_ / name).string(); }
  void write(const std::string& images, const std::string& labels) {
    testing::write_bytes(path("t10k-images-idx3-ubyte.gz"), images);
    testing::write_bytes(path("t10k-labels-idx1-ubyte.gz"), labels);
  }
  FashionMNIST open() const { return FashionMNIST(dir_.string(), false, {.normalize = false}); }
  fs::path dir_;
};

TEST_F(FashionMNISTFiles, ASmallValidSetLoads) {
  write(gzip(images_idx(3)), gzip(labels_idx(3)));
  FashionMNIST ds = open();
  EXPECT_EQ(ds.size(), 3);
  EXPECT_EQ(ds.targets().to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 2}));
  std::vector<float> img1 = ds.get(1).input.to_vector<float>();
  EXPECT_FLOAT_EQ(img1[0], float(784 % 251) / 255.0f);
  EXPECT_FLOAT_EQ(img1[5], float((784 + 5) % 251) / 255.0f);
}

TEST_F(FashionMNISTFiles, MissingFolderOrFile) {
  EXPECT_KILN_ERROR(FashionMNIST("/nonexistent/fm"),
                    "[FashionMNIST] /nonexistent/fm/train-images-idx3-ubyte.gz not found: install the Debian package "
                    "dataset-fashion-mnist (sudo apt-get install dataset-fashion-mnist) or pass the folder holding "
                    "the IDX files");
  testing::write_bytes(path("t10k-images-idx3-ubyte.gz"), gzip(images_idx(3)));
  EXPECT_KILN_ERROR(open(), path("t10k-labels-idx1-ubyte.gz") + " not found");
}

// Issue 23: `--data FILE` reported "FILE/train-images-idx3-ubyte.gz not found".
TEST_F(FashionMNISTFiles, AFileInsteadOfTheFolderIsNamedAsSuch) {
  write(gzip(images_idx(3)), gzip(labels_idx(3)));
  const std::string file = path("t10k-images-idx3-ubyte.gz");
  EXPECT_KILN_ERROR(FashionMNIST(file, false), "[FashionMNIST] " + file + " is a file, not a folder: pass the folder "
                                                   "holding the four IDX files (train-images-idx3-ubyte.gz");
}

// A damaged count must not size a huge allocation before the data runs out.
TEST_F(FashionMNISTFiles, ACountTheFileCannotHoldIsRefusedBeforeAllocating) {
  std::string huge = images_idx(3).replace(4, 4, be32(0xFFFFFFF0u));
  std::string labels = labels_idx(3).replace(4, 4, be32(0xFFFFFFF0u));
  write(gzip(huge), gzip(labels));
  reset_peak_memory_stats();
  const MemoryStats before = memory_stats();
  EXPECT_KILN_ERROR(open(), path("t10k-images-idx3-ubyte.gz") + ": its header announces 4294967280 examples");
  EXPECT_LT(memory_stats().peak_bytes - before.current_bytes, int64_t(1) << 20);
}

TEST_F(FashionMNISTFiles, BadMagic) {
  write(gzip(images_idx(3, 28, 28, 0x801)), gzip(labels_idx(3)));
  EXPECT_KILN_ERROR(open(), path("t10k-images-idx3-ubyte.gz") +
                                " is not an IDX file of images: magic 0x00000801, expected 0x00000803");
  write(gzip(images_idx(3)), gzip(labels_idx(3, 0x803)));
  EXPECT_KILN_ERROR(open(), path("t10k-labels-idx1-ubyte.gz") +
                                " is not an IDX file of labels: magic 0x00000803, expected 0x00000801");
}

TEST_F(FashionMNISTFiles, WrongImageSize) {
  write(gzip(images_idx(3, 27, 28)), gzip(labels_idx(3)));
  EXPECT_KILN_ERROR(open(), path("t10k-images-idx3-ubyte.gz") + " holds 27x28 images, expected 28x28");
}

TEST_F(FashionMNISTFiles, CountMismatch) {
  write(gzip(images_idx(3)), gzip(labels_idx(2)));
  EXPECT_KILN_ERROR(open(), path("t10k-images-idx3-ubyte.gz") + " holds 3 images but " +
                                path("t10k-labels-idx1-ubyte.gz") + " holds 2 labels");
}

TEST_F(FashionMNISTFiles, HeaderCountDisagreesWithTheData) {
  // The header says 3 images, the data holds 2 (or 4).
  std::string two = images_idx(2).replace(4, 4, be32(3));
  write(gzip(two), gzip(labels_idx(3)));
  EXPECT_KILN_ERROR(
      open(), path("t10k-images-idx3-ubyte.gz") + " is truncated: it ends after 1568 of the 2352 bytes of its pixels");
  std::string four = images_idx(4).replace(4, 4, be32(3));
  write(gzip(four), gzip(labels_idx(3)));
  EXPECT_KILN_ERROR(open(), path("t10k-images-idx3-ubyte.gz") + " holds more bytes than its header's count announces");
}

TEST_F(FashionMNISTFiles, TruncatedGzip) {
  std::string gz = gzip(images_idx(3));
  write(gz.substr(0, gz.size() / 2), gzip(labels_idx(3)));
  EXPECT_KILN_ERROR(open(), path("t10k-images-idx3-ubyte.gz") + " is ");
  try {
    open();
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_TRUE(msg.find("truncated") != std::string::npos) << msg;
  }
}

TEST_F(FashionMNISTFiles, CorruptGzip) {
  std::string gz = gzip(images_idx(3));
  for (size_t i = 20; i < 40; ++i) gz[i] = char(~gz[i]);  // mangle the deflate stream
  write(gz, gzip(labels_idx(3)));
  EXPECT_KILN_ERROR(open(), path("t10k-images-idx3-ubyte.gz") + " is corrupt or truncated");
}

TEST_F(FashionMNISTFiles, NotGzip) {
  write(images_idx(3), gzip(labels_idx(3)));
  EXPECT_KILN_ERROR(open(), path("t10k-images-idx3-ubyte.gz") + " is not a gzip file");
}

TEST_F(FashionMNISTFiles, LabelOutOfRange) {
  std::string labels = labels_idx(3);
  labels[8 + 2] = char(12);
  write(gzip(images_idx(3)), gzip(labels));
  EXPECT_KILN_ERROR(open(), path("t10k-labels-idx1-ubyte.gz") + ": label 12 of example 2 is not a class (0..9)");
}

}  // namespace
}  // namespace kiln::data
