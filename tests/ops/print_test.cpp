// Tensor::str() against the repr PyTorch 1.13 prints for the same values
// (strings made once with /usr/bin/python3; torch dtype names replaced by
// kiln's, e.g. torch.float64 -> f64).
#include <functional>

#include "tests/support/ops_testing.h"

namespace kiln {
namespace {

Tensor floats(std::vector<float> v) { return tensor(v); }
Tensor floats(std::vector<float> v, const Shape& s) { return tensor(v, s); }
// torch.arange(n, dtype) / div, computed elementwise in T.
template <class T>
Tensor ramp(int64_t n, T div) {
  std::vector<T> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = T(i) / div;
  return tensor(v);
}

struct Case {
  const char* name;
  std::function<Tensor()> make;
  const char* torch;
};

const Case kCases[] = {
    // torch.tensor([[1., 2.], [3., 4.]])
    {"matrix_int_valued", [] { return floats({1, 2, 3, 4}, {2, 2}); }, R"(tensor([[1., 2.],
        [3., 4.]]))"},
    // torch.tensor([0.1, 2.5])
    {"fixed", [] { return floats({0.1f, 2.5f}); }, R"(tensor([0.1000, 2.5000]))"},
    // torch.tensor([[-1.25, 3.5], [100.125, -0.5]])
    {"negative_fixed", [] { return floats({-1.25f, 3.5f, 100.125f, -0.5f}, {2, 2}); },
     R"(tensor([[ -1.2500,   3.5000],
        [100.1250,  -0.5000]]))"},
    // torch.tensor(3.5)
    {"scalar", [] { return scalar_tensor(3.5); }, R"(tensor(3.5000))"},
    // torch.tensor(3.)
    {"scalar_int_valued", [] { return scalar_tensor(3.0); }, R"(tensor(3.))"},
    // torch.tensor(7)
    {"scalar_i64", [] { return scalar_tensor(7); }, R"(tensor(7))"},
    // torch.tensor([])
    {"empty", [] { return floats({}); }, R"(tensor([]))"},
    // torch.zeros(0, dtype=torch.int64)
    {"empty_i64", [] { return zeros({0}, {.dtype = kI64}); }, R"(tensor([], dtype=i64))"},
    // torch.zeros(2, 0)
    {"empty_2d", [] { return zeros({2, 0}); }, R"(tensor([], size=(2, 0)))"},
    // torch.tensor([True, False, True])
    {"bools", [] { return tensor<bool>({true, false, true}); }, R"(tensor([ True, False,  True]))"},
    // torch.tensor([1, -20, 300])
    {"i64", [] { return tensor<int64_t>({1, -20, 300}); }, R"(tensor([  1, -20, 300]))"},
    // torch.tensor([[1, 2], [3, 4]], dtype=torch.int32)
    {"i32", [] { return tensor<int32_t>({1, 2, 3, 4}, {2, 2}); }, R"(tensor([[1, 2],
        [3, 4]], dtype=i32))"},
    // torch.tensor([0, 255, 7], dtype=torch.uint8)
    {"u8", [] { return tensor<uint8_t>({0, 255, 7}); }, R"(tensor([  0, 255,   7], dtype=u8))"},
    // torch.tensor([1.5, 2.25], dtype=torch.float64)
    {"f64", [] { return tensor<double>({1.5, 2.25}); }, R"(tensor([1.5000, 2.2500], dtype=f64))"},
    // torch.tensor([1.5, 2.25, -3.0], dtype=torch.bfloat16)
    {"bf16", [] { return floats({1.5f, 2.25f, -3.0f}).to(kBF16); },
     R"(tensor([ 1.5000,  2.2500, -3.0000], dtype=bf16))"},
    // torch.tensor([1e9, 1.0])
    {"sci_big", [] { return floats({1e9f, 1.0f}); }, R"(tensor([1.0000e+09, 1.0000e+00]))"},
    // torch.tensor([0.5, 1000.5])
    {"sci_ratio", [] { return floats({0.5f, 1000.5f}); }, R"(tensor([5.0000e-01, 1.0005e+03]))"},
    // torch.tensor([1e-5, 0.5])
    {"sci_small", [] { return floats({1e-5f, 0.5f}); }, R"(tensor([1.0000e-05, 5.0000e-01]))"},
    // torch.tensor([1., 1e4])
    {"int_sci", [] { return floats({1.0f, 1e4f}); }, R"(tensor([1.0000e+00, 1.0000e+04]))"},
    // torch.tensor([0., 0.])
    {"int_valued_zero", [] { return floats({0.0f, 0.0f}); }, R"(tensor([0., 0.]))"},
    // torch.tensor([float('nan'), float('inf'), -float('inf'), 1.5])
    {"nonfinite", [] { return floats({NAN, INFINITY, -INFINITY, 1.5f}); }, R"(tensor([   nan,    inf,   -inf, 1.5000]))"},
    // torch.tensor([float('nan'), 2., -float('inf')])
    {"nonfinite_int", [] { return floats({-NAN, 2.0f, -INFINITY}); }, R"(tensor([nan, 2., -inf]))"},
    // torch.tensor([-0., 1.])
    {"neg_zero", [] { return floats({-0.0f, 1.0f}); }, R"(tensor([-0., 1.]))"},
    // torch.arange(30, dtype=torch.float32) / 7
    {"long_row", [] { return ramp<float>(30, 7.0f); },
     R"(tensor([0.0000, 0.1429, 0.2857, 0.4286, 0.5714, 0.7143, 0.8571, 1.0000, 1.1429,
        1.2857, 1.4286, 1.5714, 1.7143, 1.8571, 2.0000, 2.1429, 2.2857, 2.4286,
        2.5714, 2.7143, 2.8571, 3.0000, 3.1429, 3.2857, 3.4286, 3.5714, 3.7143,
        3.8571, 4.0000, 4.1429]))"},
    // torch.arange(40)
    {"long_int_row", [] { return arange(40); },
     R"(tensor([ 0,  1,  2,  3,  4,  5,  6,  7,  8,  9, 10, 11, 12, 13, 14, 15, 16, 17,
        18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35,
        36, 37, 38, 39]))"},
    // torch.arange(2000, dtype=torch.float32)
    {"summarized_1d", [] { return arange(0, 2000, 1, {.dtype = kF32}); },
     R"(tensor([0.0000e+00, 1.0000e+00, 2.0000e+00,  ..., 1.9970e+03, 1.9980e+03,
        1.9990e+03]))"},
    // torch.arange(4000, dtype=torch.float32).reshape(40, 100) / 8
    {"summarized_2d", [] { return ramp<float>(4000, 8.0f).reshape({40, 100}); },
     R"(tensor([[0.0000e+00, 1.2500e-01, 2.5000e-01,  ..., 1.2125e+01, 1.2250e+01,
         1.2375e+01],
        [1.2500e+01, 1.2625e+01, 1.2750e+01,  ..., 2.4625e+01, 2.4750e+01,
         2.4875e+01],
        [2.5000e+01, 2.5125e+01, 2.5250e+01,  ..., 3.7125e+01, 3.7250e+01,
         3.7375e+01],
        ...,
        [4.6250e+02, 4.6262e+02, 4.6275e+02,  ..., 4.7462e+02, 4.7475e+02,
         4.7488e+02],
        [4.7500e+02, 4.7512e+02, 4.7525e+02,  ..., 4.8712e+02, 4.8725e+02,
         4.8738e+02],
        [4.8750e+02, 4.8762e+02, 4.8775e+02,  ..., 4.9962e+02, 4.9975e+02,
         4.9988e+02]]))"},
    // torch.arange(2000).reshape(10, 20, 10)
    {"summarized_3d", [] { return arange(2000).reshape({10, 20, 10}); },
     R"(tensor([[[   0,    1,    2,  ...,    7,    8,    9],
         [  10,   11,   12,  ...,   17,   18,   19],
         [  20,   21,   22,  ...,   27,   28,   29],
         ...,
         [ 170,  171,  172,  ...,  177,  178,  179],
         [ 180,  181,  182,  ...,  187,  188,  189],
         [ 190,  191,  192,  ...,  197,  198,  199]],

        [[ 200,  201,  202,  ...,  207,  208,  209],
         [ 210,  211,  212,  ...,  217,  218,  219],
         [ 220,  221,  222,  ...,  227,  228,  229],
         ...,
         [ 370,  371,  372,  ...,  377,  378,  379],
         [ 380,  381,  382,  ...,  387,  388,  389],
         [ 390,  391,  392,  ...,  397,  398,  399]],

        [[ 400,  401,  402,  ...,  407,  408,  409],
         [ 410,  411,  412,  ...,  417,  418,  419],
         [ 420,  421,  422,  ...,  427,  428,  429],
         ...,
         [ 570,  571,  572,  ...,  577,  578,  579],
         [ 580,  581,  582,  ...,  587,  588,  589],
         [ 590,  591,  592,  ...,  597,  598,  599]],

        ...,

        [[1400, 1401, 1402,  ..., 1407, 1408, 1409],
         [1410, 1411, 1412,  ..., 1417, 1418, 1419],
         [1420, 1421, 1422,  ..., 1427, 1428, 1429],
         ...,
         [1570, 1571, 1572,  ..., 1577, 1578, 1579],
         [1580, 1581, 1582,  ..., 1587, 1588, 1589],
         [1590, 1591, 1592,  ..., 1597, 1598, 1599]],

        [[1600, 1601, 1602,  ..., 1607, 1608, 1609],
         [1610, 1611, 1612,  ..., 1617, 1618, 1619],
         [1620, 1621, 1622,  ..., 1627, 1628, 1629],
         ...,
         [1770, 1771, 1772,  ..., 1777, 1778, 1779],
         [1780, 1781, 1782,  ..., 1787, 1788, 1789],
         [1790, 1791, 1792,  ..., 1797, 1798, 1799]],

        [[1800, 1801, 1802,  ..., 1807, 1808, 1809],
         [1810, 1811, 1812,  ..., 1817, 1818, 1819],
         [1820, 1821, 1822,  ..., 1827, 1828, 1829],
         ...,
         [1970, 1971, 1972,  ..., 1977, 1978, 1979],
         [1980, 1981, 1982,  ..., 1987, 1988, 1989],
         [1990, 1991, 1992,  ..., 1997, 1998, 1999]]]))"},
    // torch.arange(12, dtype=torch.float32).reshape(2, 3, 2)
    {"three_d", [] { return arange(0, 12, 1, {.dtype = kF32}).reshape({2, 3, 2}); }, R"(tensor([[[ 0.,  1.],
         [ 2.,  3.],
         [ 4.,  5.]],

        [[ 6.,  7.],
         [ 8.,  9.],
         [10., 11.]]]))"},
    // torch.arange(6, dtype=torch.float32).reshape(2, 3).t()
    {"transposed", [] { return arange(0, 6, 1, {.dtype = kF32}).reshape({2, 3}).t(); }, R"(tensor([[0., 3.],
        [1., 4.],
        [2., 5.]]))"},
    // torch.tensor([1.5, 2.0], requires_grad=True)
    {"requires_grad", [] { return floats({1.5f, 2.0f}).requires_grad_(); },
     R"(tensor([1.5000, 2.0000], requires_grad=True))"},
    // torch.arange(16, dtype=torch.float64).div(3).requires_grad_(). torch
    // moves "dtype=torch.float64" (19 characters) to a new line; the shorter
    // "dtype=f64" still fits on the last line by the same rule.
    {"requires_grad_long", [] { return ramp<double>(16, 3.0).requires_grad_(); },
     R"(tensor([0.0000, 0.3333, 0.6667, 1.0000, 1.3333, 1.6667, 2.0000, 2.3333, 2.6667,
        3.0000, 3.3333, 3.6667, 4.0000, 4.3333, 4.6667, 5.0000], dtype=f64,
       requires_grad=True))"},
    // torch.arange(25, dtype=torch.float32).div(3).requires_grad_(): a
    // suffix past the 80th column goes on its own line.
    {"suffix_wraps", [] { return ramp<float>(25, 3.0f).requires_grad_(); },
     R"(tensor([0.0000, 0.3333, 0.6667, 1.0000, 1.3333, 1.6667, 2.0000, 2.3333, 2.6667,
        3.0000, 3.3333, 3.6667, 4.0000, 4.3333, 4.6667, 5.0000, 5.3333, 5.6667,
        6.0000, 6.3333, 6.6667, 7.0000, 7.3333, 7.6667, 8.0000],
       requires_grad=True))"},
};

TEST(Print, MatchesTorch) {
  for (const Case& c : kCases) EXPECT_EQ(c.make().str(), c.torch) << c.name;
}

TEST(Print, GradFnNamesTheNode) {
  Tensor x = floats({1.5f, 2.0f}).requires_grad_();
  // torch prints grad_fn=<ViewBackward0>; kiln prints the op's name.
  EXPECT_EQ(x.view({2, 1}).str(), "tensor([[1.5000],\n        [2.0000]], grad_fn=<view>)");
  EXPECT_EQ(x.detach().str(), "tensor([1.5000, 2.0000])");
}

TEST(Print, SummarisedLayoutsAgree) {
  // A non-contiguous summarised tensor prints like its contiguous copy.
  Tensor a = arange(0, 3000, 1, {.dtype = kF64}).reshape({30, 100});
  std::string transposed = a.t().str(), copied = a.t().contiguous().str();
  EXPECT_EQ(transposed, copied);
  EXPECT_NE(transposed.find("..."), std::string::npos);
  EXPECT_NE(transposed.find("dtype=f64"), std::string::npos);
  // 1000 elements is not summarised; 1001 is.
  EXPECT_EQ(arange(1000).str().find("..."), std::string::npos);
  EXPECT_NE(arange(1001).str().find("..."), std::string::npos);
}

TEST(Print, UndefinedTensor) { EXPECT_EQ(Tensor().str(), "tensor(undefined)"); }

}  // namespace
}  // namespace kiln
