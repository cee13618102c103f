// The Tensor handle: metadata, element access on any layout, host buffers.
#include <cstring>

#include "tests/support/ops_testing.h"

namespace kiln {
namespace {

using namespace testing;

TEST(Tensor, Metadata) {
  Tensor t = Tensor::empty({2, 3, 4}, kF64);
  EXPECT_TRUE(t.defined());
  EXPECT_EQ(t.shape(), (Shape{2, 3, 4}));
  EXPECT_EQ(t.dim(), 3);
  EXPECT_EQ(t.ndim(), 3);
  EXPECT_EQ(t.numel(), 24);
  EXPECT_EQ(t.size(-1), 4);
  EXPECT_EQ(t.size(0), 2);
  EXPECT_EQ(t.strides(), (Strides{12, 4, 1}));
  EXPECT_EQ(t.stride(-2), 4);
  EXPECT_EQ(t.storage_offset(), 0);
  EXPECT_EQ(t.dtype(), kF64);
  EXPECT_EQ(t.device(), kCPU);
  EXPECT_EQ(t.itemsize(), 8);
  EXPECT_EQ(t.nbytes(), 192);
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_FALSE(t.is_view());
  EXPECT_TRUE(t.is_leaf());
  EXPECT_FALSE(t.requires_grad());
  EXPECT_FALSE(t.grad().defined());
  EXPECT_GE(t.storage()->nbytes(), 192u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data_ptr()) % 64, 0u);
  EXPECT_FALSE(Tensor().defined());
}

TEST(Tensor, MetadataErrors) {
  Tensor t = zeros({2, 3});
  EXPECT_KILN_ERROR(t.size(2), "[size] dim 2 out of range for a tensor with 2 dims");
  EXPECT_KILN_ERROR(t.stride(-3), "[stride] dim -3 out of range");
  EXPECT_KILN_ERROR(t.data<double>(), "[data] tensor has dtype f32, expected f64");
  EXPECT_KILN_ERROR(t.item<float>(), "[item] tensor of shape [2, 3] has 6 elements, expected 1");
  EXPECT_KILN_ERROR(Tensor::empty({2, -1}), "[empty] negative size -1 in shape [2, -1]");
  EXPECT_KILN_ERROR(Tensor().data_ptr(), "undefined tensor");
  EXPECT_KILN_ERROR(Tensor().to_vector<float>(), "[to_vector] undefined tensor");
}

TEST(Tensor, ViewsShareStorage) {
  Tensor a = arange(0, 6, 1, {.dtype = kF32}).view({2, 3});
  Tensor t = a.t();
  EXPECT_TRUE(t.is_view());
  EXPECT_TRUE(t.is_same_storage(a));
  EXPECT_FALSE(t.is_same(a));
  EXPECT_FALSE(t.is_contiguous());
  EXPECT_EQ(t.strides(), (Strides{1, 3}));
  a.data<float>()[1] = 42.0f;
  EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{0, 3, 42, 4, 2, 5}));
}

TEST(Tensor, ElementAccessOnNonContiguousLayouts) {
  Tensor a = arange(12).view({3, 4});  // i64
  // Transposed.
  EXPECT_EQ(a.t().to_vector<int64_t>(), (std::vector<int64_t>{0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11}));
  // Stepped slice with an offset.
  Tensor s = a.slice(1, 1, 4, 2);
  EXPECT_EQ(s.shape(), (Shape{3, 2}));
  EXPECT_EQ(s.storage_offset(), 1);
  EXPECT_EQ(s.to_vector<int64_t>(), (std::vector<int64_t>{1, 3, 5, 7, 9, 11}));
  EXPECT_EQ(s.to_vector<double>(), (std::vector<double>{1, 3, 5, 7, 9, 11}));
  // A selected element is 0-dim.
  Tensor e = a.select(0, 2).select(0, 3);
  EXPECT_EQ(e.dim(), 0);
  EXPECT_EQ(e.item<int64_t>(), 11);
  EXPECT_EQ(e.item<float>(), 11.0f);
  EXPECT_EQ(a[1].to_vector<int32_t>(), (std::vector<int32_t>{4, 5, 6, 7}));
  // Expanded (stride 0).
  Tensor row = arange(3).view({1, 3}).expand({2, 3});
  EXPECT_EQ(row.strides()[0], 0);
  EXPECT_EQ(row.to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 2, 0, 1, 2}));
  // Conversions on read.
  Tensor b = tensor<bool>({true, false, true});
  EXPECT_EQ(b.to_vector<float>(), (std::vector<float>{1, 0, 1}));
  Tensor h = tensor<float>({1.5f, -2.0f}).to(kBF16);
  EXPECT_EQ(h.to_vector<double>(), (std::vector<double>{1.5, -2.0}));
  EXPECT_EQ(h[0].item<bfloat16>().bits, bfloat16(1.5f).bits);
}

TEST(Tensor, FromBlobWrapsWithoutCopy) {
  static int deleted = 0;
  deleted = 0;
  std::vector<float> buf{1, 2, 3, 4, 5, 6};
  {
    Tensor t = from_blob(buf.data(), {2, 3}, kF32, [](void*, void* ctx) { ++*static_cast<int*>(ctx); }, &deleted);
    EXPECT_EQ(t.data_ptr(), buf.data());
    buf[4] = 50;
    EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{1, 2, 3, 4, 50, 6}));
    t.data<float>()[0] = -1;
    EXPECT_EQ(buf[0], -1);
    Tensor v = t.t();  // a view keeps the blob alive
    t = Tensor();
    EXPECT_EQ(deleted, 0);
    EXPECT_EQ(v.to_vector<float>()[1], 4);
  }
  EXPECT_EQ(deleted, 1);  // deleter ran once, when the last view went
  // No deleter: the caller keeps the memory alive.
  Tensor u = from_blob(buf.data(), {6}, kF32);
  EXPECT_EQ(u.to_vector<float>()[5], 6);
}

TEST(Tensor, FromBufferCopies) {
  std::vector<int32_t> src{7, 8, 9, 10};
  Tensor t = from_buffer(src.data(), {2, 2}, kI32);
  src[0] = 0;
  EXPECT_EQ(t.dtype(), kI32);
  EXPECT_EQ(t.to_vector<int32_t>(), (std::vector<int32_t>{7, 8, 9, 10}));
  EXPECT_NE(t.data_ptr(), static_cast<void*>(src.data()));
  Tensor empty = from_buffer(nullptr, {0, 3}, kF64);
  EXPECT_EQ(empty.numel(), 0);
}

TEST(Tensor, CopyToBufferIsRowMajorForAnyLayout) {
  Tensor a = arange(0, 6, 1, {.dtype = kF64}).view({2, 3});
  std::vector<double> out(6, -1);
  copy_to_buffer(a.t(), out.data());
  EXPECT_EQ(out, (std::vector<double>{0, 3, 1, 4, 2, 5}));
  std::vector<uint8_t> bytes(4);
  copy_to_buffer(tensor<uint8_t>({1, 2, 3, 4}, {2, 2}), bytes.data());
  EXPECT_EQ(bytes, (std::vector<uint8_t>{1, 2, 3, 4}));
}

TEST(Tensor, FromHostVectors) {
  Tensor f = tensor<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_EQ(f.dtype(), kF32);
  EXPECT_EQ(f.shape(), (Shape{2, 3}));
  EXPECT_EQ(tensor<int64_t>({1, 2}).dtype(), kI64);
  EXPECT_EQ(tensor<double>({1}).dtype(), kF64);
  EXPECT_EQ(tensor<bool>({true}).dtype(), kBool);
  EXPECT_KILN_ERROR(tensor<float>({1, 2, 3}, {2, 2}), "[tensor] 3 values do not fill shape [2, 2] (4 elements)");
  Tensor s = scalar_tensor(2.5);
  EXPECT_EQ(s.dim(), 0);
  EXPECT_EQ(s.dtype(), kF32);
  EXPECT_EQ(s.item<float>(), 2.5f);
  EXPECT_EQ(scalar_tensor(3).dtype(), kI64);
  EXPECT_EQ(scalar_tensor(true).dtype(), kBool);
  EXPECT_EQ(scalar_tensor(4, {.dtype = kF64}).item<double>(), 4.0);
}

TEST(Tensor, StreamOperatorPrints) {
  std::ostringstream os;
  os << tensor<float>({1, 2});
  EXPECT_EQ(os.str(), "tensor([1., 2.])");
}

}  // namespace
}  // namespace kiln
