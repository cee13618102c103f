// io::read_onnx on ModelProtos written byte by byte here (a small protobuf
// encoder below, independent of libonnx): every tensor storage the reader
// takes (raw_data and the typed fields), and each malformed file refused with
// an error naming the file and what is wrong; every truncation of a model
// PyTorch exported (tests/goldens/onnx_mlp.onnx) is refused.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "kiln/io/onnx.h"
#include "kiln/nn/linear.h"
#include "tests/support/io_testing.h"

namespace kiln::io {
namespace {
using namespace kiln::testing;

// ---- protobuf wire format ----
std::string varint(uint64_t v) {
  std::string s;
  do {
    uint8_t b = v & 0x7f;
    v >>= 7;
    s.push_back(char(v ? b | 0x80 : b));
  } while (v);
  return s;
}
std::string vint(int field, int64_t v) { return varint(uint64_t(field) << 3) + varint(uint64_t(v)); }
std::string bytes(int field, const std::string& b) { return varint(uint64_t(field) << 3 | 2) + varint(b.size()) + b; }
template <class T>
std::string raw(const std::vector<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}
std::string packed_varints(int field, const std::vector<int64_t>& v) {
  std::string b;
  for (int64_t x : v) b += varint(uint64_t(x));
  return bytes(field, b);
}

// TensorProto: dims 1, data_type 2, float_data 4, int32_data 5, int64_data 7,
// name 8, raw_data 9, double_data 10, external_data 13, data_location 14.
std::string tensor_proto(const std::string& name, int type, const std::vector<int64_t>& dims,
                         const std::string& payload_fields) {
  std::string t;
  for (int64_t d : dims) t += vint(1, d);
  return t + vint(2, type) + bytes(8, name) + payload_fields;
}
// ValueInfoProto{name 1, type 2{tensor_type 1{elem_type 1, shape 2{dim 1{dim_value 1 | dim_param 2}}}}}.
std::string value_info(const std::string& name, int type, const std::vector<std::string>& dims) {
  std::string shape;
  for (const std::string& d : dims)
    shape += bytes(1, std::isdigit(uint8_t(d[0])) ? vint(1, std::stoll(d)) : bytes(2, d));
  return bytes(1, name) + bytes(2, bytes(1, vint(1, type) + bytes(2, shape)));
}
// NodeProto (a graph's field 1): input 1, output 2, name 3, op_type 4, attribute 5.
std::string node(const std::string& op, const std::vector<std::string>& in, const std::vector<std::string>& out,
                 const std::string& name = "", const std::string& attrs = "") {
  std::string n;
  for (const auto& i : in) n += bytes(1, i);
  for (const auto& o : out) n += bytes(2, o);
  return n + bytes(3, name) + bytes(4, op) + attrs;
}
// ModelProto: ir_version 1, producer_name 2, graph 7 {node 1, name 2, initializer 5,
// input 11, output 12}, opset_import 8 {domain 1, version 2}.
std::string model(const std::string& graph_fields, int64_t opset = 13) {
  return vint(1, 8) + bytes(2, "kiln-test") + bytes(7, graph_fields) + bytes(8, bytes(1, "") + vint(2, opset));
}

const std::string& scratch() {
  static const std::string dir = fresh_dir("onnx_io");
  return dir;
}
std::string write(const std::string& name, const std::string& content) {
  std::string path = scratch() + "/" + name;
  write_bytes(path, content);
  return path;
}
void expect_tensor_eq(const Tensor& got, const Tensor& want) {
  ASSERT_EQ(got.dtype(), want.dtype());
  ASSERT_EQ(got.sizes(), want.sizes());
  EXPECT_TRUE(allclose(got.to(kF64), want.to(kF64), 0, 0));
}

std::string add_graph(const std::string& init) {
  return bytes(1, node("Add", {"x", "w"}, {"y"}, "add0")) + bytes(2, "g") + bytes(5, init) +
         bytes(11, value_info("x", 1, {"batch", "3"})) + bytes(12, value_info("y", 1, {"batch", "3"}));
}

TEST(Onnx, ReadsGraphInitializersAndShapes) {
  if (!onnx_supported()) GTEST_SKIP();
  std::string w = tensor_proto("w", 1, {3}, bytes(9, raw<float>({1.5f, -2.f, 4.f})));
  OnnxModelFile f = read_onnx(write("add.onnx", model(add_graph(w))));
  EXPECT_EQ(f.ir_version, 8);
  EXPECT_EQ(f.producer_name, "kiln-test");
  EXPECT_EQ(f.opset(), 13);
  EXPECT_EQ(f.graph_name, "g");
  ASSERT_EQ(f.nodes.size(), 1u);
  EXPECT_EQ(f.nodes[0].op_type, "Add");
  EXPECT_EQ(f.nodes[0].describe(0), "Add 'add0'");
  EXPECT_EQ(f.nodes[0].inputs, (std::vector<std::string>{"x", "w"}));
  ASSERT_EQ(f.inputs.size(), 1u);
  EXPECT_EQ(f.inputs[0].describe(), "FLOAT [batch, 3]");
  EXPECT_EQ(f.outputs[0].name, "y");
  ASSERT_EQ(f.initializers.size(), 1u);
  EXPECT_EQ(f.initializers[0].first, "w");
  expect_tensor_eq(f.initializers[0].second, tensor<float>({1.5f, -2.f, 4.f}));
  EXPECT_EQ(f.op_histogram(), (std::map<std::string, int64_t>{{"Add", 1}}));
}

TEST(Onnx, ReadsEveryTensorStorage) {
  if (!onnx_supported()) GTEST_SKIP();
  auto one = [](const std::string& t) {
    std::string g = bytes(5, t) + bytes(12, value_info("v", 0, {}));
    return read_onnx(write("t.onnx", model(g))).initializers.at(0).second;
  };
  // Typed fields.
  expect_tensor_eq(one(tensor_proto("v", 1, {2}, bytes(4, raw<float>({0.25f, -1.f})))), tensor<float>({0.25f, -1.f}));
  expect_tensor_eq(one(tensor_proto("v", 11, {2}, bytes(10, raw<double>({0.1, 2.0})))), tensor<double>({0.1, 2.0}));
  expect_tensor_eq(one(tensor_proto("v", 7, {3}, packed_varints(7, {5, -7, int64_t(1) << 40}))),
                   tensor<int64_t>({5, -7, int64_t(1) << 40}));
  expect_tensor_eq(one(tensor_proto("v", 6, {2}, packed_varints(5, {-3, 9}))), tensor<int32_t>({-3, 9}));
  Tensor b = one(tensor_proto("v", 9, {3}, packed_varints(5, {1, 0, 1})));
  EXPECT_EQ(b.dtype(), kBool);
  EXPECT_EQ(sum(b.to(kI64)).item<int64_t>(), 2);
  // raw_data, little-endian, and a 0-d tensor.
  expect_tensor_eq(one(tensor_proto("v", 7, {2, 1}, bytes(9, raw<int64_t>({4, -4})))),
                   tensor<int64_t>({4, -4}, {2, 1}));
  Tensor s = one(tensor_proto("v", 1, {}, bytes(9, raw<float>({3.f}))));
  EXPECT_EQ(s.dim(), 0);
  EXPECT_EQ(s.item<float>(), 3.f);
  Tensor u = one(tensor_proto("v", 2, {2}, bytes(9, std::string("\x07\xff", 2))));
  EXPECT_EQ(u.dtype(), kU8);
  // Zero elements.
  EXPECT_EQ(one(tensor_proto("v", 1, {0, 4}, "")).numel(), 0);
}

TEST(Onnx, MalformedFilesAreRefusedNamingWhatIsWrong) {
  if (!onnx_supported()) GTEST_SKIP();
  auto err = [](const std::string& content) {
    try {
      read_onnx(write("bad.onnx", content));
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  auto has = [](const std::string& msg, const std::string& part) {
    return msg.find(part) != std::string::npos && msg.find("bad.onnx") != std::string::npos;
  };
  auto g1 = [](const std::string& t) { return model(bytes(5, t) + bytes(12, value_info("v", 1, {}))); };
  EXPECT_PRED2(has, err(""), "the file is empty");
  EXPECT_PRED2(has, err("this is not protobuf at all \xff\xff\xff"), "not an ONNX model");
  EXPECT_PRED2(has, err(vint(1, 8)), "has no graph");
  EXPECT_PRED2(has, err(vint(1, 8) + bytes(7, bytes(12, value_info("v", 1, {})))), "imports no operator set");
  EXPECT_PRED2(has, err(g1(tensor_proto("v", 10, {1}, bytes(9, "ab")))),
               "initializer 'v': type FLOAT16 is not supported (kiln reads FLOAT, DOUBLE");
  EXPECT_PRED2(has, err(g1(tensor_proto("v", 1, {3}, bytes(9, raw<float>({1.f, 2.f}))))),
               "initializer 'v' (FLOAT [3]) has 8 bytes of raw data, expected 3 values of 4 bytes");
  EXPECT_PRED2(has, err(g1(tensor_proto("v", 1, {2}, bytes(4, raw<float>({1.f}))))),
               "has 1 values in float_data, expected 2");
  // Huge dims over a few bytes: refused before any allocation.
  EXPECT_PRED2(has, err(g1(tensor_proto("v", 1, {int64_t(1) << 40, int64_t(1) << 20}, bytes(9, "abcd")))),
               "bytes of raw data");
  EXPECT_PRED2(has, err(g1(tensor_proto("v", 1, {int64_t(1) << 40, int64_t(1) << 40}, bytes(9, "abcd")))),
               "more elements than fit in 2^63");
  EXPECT_PRED2(has, err(g1(tensor_proto("v", 1, {-2}, ""))), "negative dimension -2");
  EXPECT_PRED2(has, err(g1(tensor_proto("v", 9, {1}, bytes(9, "\x02")))), "booleans are 0 or 1");
  std::string ext = tensor_proto("v", 1, {2}, bytes(13, bytes(1, "location") + bytes(2, "weights.bin")) + vint(14, 1));
  EXPECT_PRED2(has, err(g1(ext)), "initializer 'v' is stored as external data ('weights.bin')");
  std::string w = tensor_proto("w", 1, {1}, bytes(9, raw<float>({1.f})));
  EXPECT_PRED2(has, err(model(bytes(5, w) + bytes(5, w) + bytes(12, value_info("w", 1, {})))),
               "initializer 'w' appears twice");
  EXPECT_PRED2(has, err(model(bytes(1, node("Relu", {"nowhere"}, {"y"}, "r")) + bytes(12, value_info("y", 1, {})))),
               "node Relu 'r' reads 'nowhere', which no initializer, graph input or earlier node defines");
  EXPECT_PRED2(has, err(model(bytes(5, w) + bytes(1, node("Relu", {"w"}, {"w"})) + bytes(12, value_info("w", 1, {})))),
               "node Relu #0 writes 'w', which is already defined");
  EXPECT_PRED2(has, err(model(bytes(5, w) + bytes(12, value_info("z", 1, {})))), "graph output 'z' is not produced");
  EXPECT_KILN_ERROR(read_onnx(scratch() + "/missing.onnx"), "no such file");
}

TEST(Onnx, EveryTruncationOfAnExportedModelIsRefused) {
  if (!onnx_supported()) GTEST_SKIP();
  std::string full = read_bytes(std::string(KILN_GOLDEN_DIR) + "/onnx_mlp.onnx");
  ASSERT_GT(full.size(), 1000u);
  EXPECT_EQ(parse_onnx(full, "mlp.onnx").nodes.size(), 6u);
  int refused = 0;
  for (size_t n = 0; n < full.size(); ++n) {
    try {
      parse_onnx(full.substr(0, n), "mlp.onnx");
      ADD_FAILURE() << "a prefix of " << n << " bytes was read";
    } catch (const Error& e) {
      ++refused;
      EXPECT_NE(std::string(e.what()).find("mlp.onnx"), std::string::npos);
    }
  }
  EXPECT_EQ(refused, int(full.size()));
}

TEST(Onnx, ReadsOneTensorProtoFile) {
  if (!onnx_supported()) GTEST_SKIP();
  auto [name, t] = read_onnx_tensor(write("x.pb", tensor_proto("x", 1, {2, 2}, bytes(9, raw<float>({1, 2, 3, 4})))));
  EXPECT_EQ(name, "x");
  expect_tensor_eq(t, tensor<float>({1, 2, 3, 4}, {2, 2}));
  EXPECT_KILN_ERROR(read_onnx_tensor(write("y.pb", "\xff\xff")), "not an ONNX TensorProto");
}

// An ONNX file is a WeightSource (its initializers), so io::translate maps it
// onto a kiln module: PyTorch's Linear exports as Gemm(transB=1) keeping
// weight [out, in], kiln's layout, so the identity map fits an MLP of Linears.
struct Mlp : nn::Module {
  explicit Mlp(Rngs& rngs)
      : fc1(register_module("fc1", nn::Linear(20, 32, rngs))),
        fc2(register_module("fc2", nn::Linear(32, 16, rngs))),
        fc3(register_module("fc3", nn::Linear(16, 5, rngs))) {}
  nn::Shared<nn::Linear> fc1, fc2, fc3;
};

TEST(Onnx, IsAWeightSourceThatTranslatesOntoAModule) {
  if (!onnx_supported()) GTEST_SKIP();
  const std::string path = std::string(KILN_GOLDEN_DIR) + "/onnx_mlp.onnx";
  WeightSource src = WeightSource::open(path);
  EXPECT_EQ(src.format(), "onnx");
  EXPECT_EQ(src.names(), (std::vector<std::string>{"fc1.bias", "fc1.weight", "fc2.bias", "fc2.weight", "fc3.bias",
                                                   "fc3.weight"}));
  EXPECT_EQ(src.info("fc1.weight").dtype, "F32");
  EXPECT_EQ(src.info("fc1.weight").shape, Shape({32, 20}));
  EXPECT_EQ(src.metadata().at("onnx.opset"), "11");
  EXPECT_FALSE(src.aliases("fc1.weight"));
  Rngs rngs(0);
  Mlp mlp(rngs);
  TranslateReport r = translate(src, mlp, identity_map());
  EXPECT_EQ(r.source_format, "onnx");
  OnnxModelFile f = read_onnx(path);
  for (const auto& [name, t] : f.initializers) expect_tensor_eq(mlp.state_dict().at(name), t);
}

}  // namespace
}  // namespace kiln::io
