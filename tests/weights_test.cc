// Weights in: .npy / .npz / ONNX initializers (values, dtypes, layouts,
// errors, and fuzzed inputs that must fail cleanly), batch-norm folding and
// the module-parameter walker.
#include "tessera/cnn/weights.h"
#include "tessera/import/onnx.h"
#include "tessera/import/onnx_weights.h"

#include <onnx/onnx_pb.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "tessera/ops/reference.h"
#include "test_util.h"

namespace tessera::cnn {
namespace {

using ::testing::HasSubstr;

std::string temp_path(std::string_view name) {
  return (std::filesystem::temp_directory_path() / fmt::format("tessera_weights_{}_{}", ::getpid(), name)).string();
}

void write_file(const std::string& path, std::string_view bytes) {
  std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// A .npy file as numpy writes it (format 1.0).
std::string npy(std::string_view descr, std::string_view shape, std::string_view data, bool fortran = false) {
  std::string h = fmt::format("{{'descr': '{}', 'fortran_order': {}, 'shape': {}, }}", descr,
                              fortran ? "True" : "False", shape);
  h.append(64 - (10 + h.size() + 1) % 64, ' ').push_back('\n');
  std::string b = "\x93NUMPY\x01";
  b.push_back('\0');
  const uint16_t n = static_cast<uint16_t>(h.size());
  b.append(reinterpret_cast<const char*>(&n), 2);
  return b + h + std::string(data);
}

template <class T>
std::string bytes_of(std::initializer_list<T> v) {
  std::string s(v.size() * sizeof(T), '\0');
  std::memcpy(s.data(), std::data(v), s.size());
  return s;
}

std::vector<float> values(const Tensor& t) { return t.to_vector().value(); }

TEST(Npy, DtypesShapesAndOrders) {
  ASSERT_OK_AND_ASSIGN(Tensor f, parse_npy(npy("<f4", "(2, 3)", bytes_of<float>({1, 2, 3, 4, 5, 6}))));
  EXPECT_EQ(f.shape(), (Shape{2, 3}));
  EXPECT_EQ(values(f), (std::vector<float>{1, 2, 3, 4, 5, 6}));
  ASSERT_OK_AND_ASSIGN(Tensor d, parse_npy(npy("<f8", "(3,)", bytes_of<double>({0.5, -2, 1e10}))));
  EXPECT_EQ(values(d), (std::vector<float>{0.5f, -2.0f, 1e10f}));
  // The file's dtype, for callers that say what they converted.
  std::string dtype;
  ASSERT_OK(parse_npy(npy("<f8", "(3,)", bytes_of<double>({0.5, -2, 1e10})), "npy", &dtype).status());
  EXPECT_EQ(dtype, "<f8");
  // float16: 1.0 = 0x3c00, -2.5 = 0xc100, 65504 = 0x7bff, smallest subnormal 0x0001.
  ASSERT_OK_AND_ASSIGN(Tensor h, parse_npy(npy("<f2", "(4,)", bytes_of<uint16_t>({0x3c00, 0xc100, 0x7bff, 0x0001}))));
  EXPECT_EQ(values(h), (std::vector<float>{1.0f, -2.5f, 65504.0f, std::ldexp(1.0f, -24)}));
  ASSERT_OK_AND_ASSIGN(Tensor i, parse_npy(npy("<i8", "(2,)", bytes_of<int64_t>({-7, 16777216}))));
  EXPECT_EQ(values(i), (std::vector<float>{-7, 16777216}));
  ASSERT_OK_AND_ASSIGN(Tensor b, parse_npy(npy("|b1", "(3,)", bytes_of<uint8_t>({1, 0, 1}))));
  EXPECT_EQ(values(b), (std::vector<float>{1, 0, 1}));
  ASSERT_OK_AND_ASSIGN(Tensor s, parse_npy(npy("<f4", "()", bytes_of<float>({3}))));
  EXPECT_EQ(s.shape(), (Shape{1}));
  // Fortran order: the file holds columns; Tessera returns rows.
  ASSERT_OK_AND_ASSIGN(Tensor fo, parse_npy(npy("<f4", "(2, 3)", bytes_of<float>({1, 4, 2, 5, 3, 6}), true)));
  EXPECT_EQ(values(fo), (std::vector<float>{1, 2, 3, 4, 5, 6}));
}

TEST(Npy, MalformedFilesFailWithTheReason) {
  EXPECT_THAT(parse_npy("hello world").status().message(), HasSubstr("not a .npy file"));
  EXPECT_THAT(parse_npy(npy(">f4", "(1,)", bytes_of<float>({1}))).status().message(),
              HasSubstr("dtype '>f4' is not supported"));
  EXPECT_THAT(parse_npy(npy("<f4", "(3,)", bytes_of<float>({1, 2}))).status().message(),
              HasSubstr("8 data bytes for shape (3,) of <f4, expected 12"));
  EXPECT_THAT(parse_npy(npy("<f4", "(a,)", "")).status().message(), HasSubstr("is not a dimension"));
  EXPECT_THAT(parse_npy(npy("<i8", "(1,)", bytes_of<int64_t>({16777217}))).status().message(),
              HasSubstr("not exact in float32"));
  std::string cut = npy("<f4", "(1,)", bytes_of<float>({1}));
  EXPECT_THAT(parse_npy(cut.substr(0, 30)).status().message(), HasSubstr("runs past the file"));
}

TEST(Npy, FuzzedBytesNeverCrash) {
  const std::string good = npy("<f4", "(2, 2)", bytes_of<float>({1, 2, 3, 4}));
  std::mt19937 rng(7);
  int ok = 0;
  for (int iter = 0; iter < 5000; ++iter) {
    std::string b = good;
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits; ++e) {
      switch (rng() % 3) {
        case 0: b[rng() % b.size()] = static_cast<char>(rng()); break;
        case 1: b.resize(rng() % (b.size() + 1)); break;
        default: b.insert(rng() % (b.size() + 1), 1, static_cast<char>(rng())); break;
      }
      if (b.empty()) break;
    }
    StatusOr<Tensor> t = parse_npy(b);
    if (t.ok()) {
      ++ok;
      EXPECT_GT(t->shape().volume(), 0u);
    } else {
      EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument) << t.status().message();
    }
  }
  EXPECT_GT(ok, 0);  // some edits (padding bytes) leave a valid file
}

TEST(Npz, RoundTripAndCorruptArchives) {
  const std::string path = temp_path("a.npz");
  WeightMap in;
  in.emplace("conv.weight", Tensor::from_vector(testing::random_values(2 * 3 * 3 * 3, 1), Shape{2, 3, 3, 3},
                                                DataType::FLOAT32).value());
  in.emplace("conv.bias", Tensor::from_vector({0.5f, -1.5f}, Shape{2}, DataType::FLOAT32).value());
  ASSERT_OK(save_npz(path, in));
  ASSERT_OK_AND_ASSIGN(WeightMap out, load_npz(path));
  ASSERT_EQ(out.size(), 2u);
  for (const auto& [k, t] : in) {
    ASSERT_TRUE(out.count(k)) << k;
    EXPECT_EQ(out.at(k).shape(), t.shape());
    EXPECT_EQ(values(out.at(k)), values(t));
  }
  // Corrupt archives: every mutation fails cleanly or loads a valid map.
  std::ifstream f(path, std::ios::binary);
  const std::string good((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::mt19937 rng(11);
  const std::string bad = temp_path("bad.npz");
  for (int iter = 0; iter < 300; ++iter) {
    std::string b = good;
    for (int e = 0; e < 3; ++e) b[rng() % b.size()] = static_cast<char>(rng());
    if (iter % 7 == 0) b.resize(rng() % b.size());
    write_file(bad, b);
    StatusOr<WeightMap> m = load_npz(bad);
    if (!m.ok()) {
      EXPECT_EQ(m.status().code(), StatusCode::kInvalidArgument) << m.status().message();
    }
  }
  EXPECT_EQ(load_npz(temp_path("missing.npz")).status().code(), StatusCode::kInvalidArgument);
  std::filesystem::remove(path);
  std::filesystem::remove(bad);
}

TEST(Onnx, InitializersInEveryEncoding) {
  onnx::ModelProto model;
  model.set_ir_version(8);
  onnx::GraphProto* g = model.mutable_graph();
  g->set_name("weights");
  auto add = [&](std::string name, onnx::TensorProto::DataType type, std::vector<int64_t> dims) {
    onnx::TensorProto* t = g->add_initializer();
    t->set_name(std::move(name));
    t->set_data_type(type);
    for (int64_t d : dims) t->add_dims(d);
    return t;
  };
  add("raw", onnx::TensorProto::FLOAT, {2, 2})->set_raw_data(bytes_of<float>({1, 2, 3, 4}));
  auto* fd = add("typed", onnx::TensorProto::FLOAT, {3});
  for (float v : {5.0f, 6.0f, 7.0f}) fd->add_float_data(v);
  auto* i64 = add("count", onnx::TensorProto::INT64, {1});
  i64->add_int64_data(42);
  auto* h = add("half", onnx::TensorProto::FLOAT16, {2});
  h->add_int32_data(0x3c00), h->add_int32_data(0xc000);
  auto* dd = add("double", onnx::TensorProto::DOUBLE, {1});
  dd->add_double_data(0.25);
  const std::string ext = temp_path("ext.bin");
  write_file(ext, std::string(8, '\0') + bytes_of<float>({9, 10}));
  auto* e = add("external", onnx::TensorProto::FLOAT, {2});
  e->set_data_location(onnx::TensorProto::EXTERNAL);
  auto kv = [&](const char* k, std::string v) {
    auto* p = e->add_external_data();
    p->set_key(k), p->set_value(std::move(v));
  };
  kv("location", std::filesystem::path(ext).filename().string());
  kv("offset", "8");
  kv("length", "8");
  const std::string path = temp_path("m.onnx");
  {
    std::ofstream out(path, std::ios::binary);
    ASSERT_TRUE(model.SerializeToOstream(&out));
  }
  ASSERT_OK_AND_ASSIGN(WeightMap w, importer::load_onnx_initializers(path));
  EXPECT_EQ(values(w.at("raw")), (std::vector<float>{1, 2, 3, 4}));
  EXPECT_EQ(w.at("raw").shape(), (Shape{2, 2}));
  EXPECT_EQ(values(w.at("typed")), (std::vector<float>{5, 6, 7}));
  EXPECT_EQ(values(w.at("count")), (std::vector<float>{42}));
  EXPECT_EQ(values(w.at("half")), (std::vector<float>{1, -2}));
  EXPECT_EQ(values(w.at("double")), (std::vector<float>{0.25f}));
  EXPECT_EQ(values(w.at("external")), (std::vector<float>{9, 10}));
  // Wrong sizes and junk fail with the initializer's name.
  fd->add_float_data(8.0f);
  {
    std::ofstream out(path, std::ios::binary);
    ASSERT_TRUE(model.SerializeToOstream(&out));
  }
  EXPECT_THAT(importer::load_onnx_initializers(path).status().message(), HasSubstr("initializer 'typed': 4 values in float_data for 3 elements"));
  write_file(path, "\xff\xff\xff\xff not a model");
  EXPECT_EQ(importer::load_onnx_initializers(path).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(importer::load_onnx_initializers(temp_path("none.onnx")).status().code(), StatusCode::kNotFound);
  std::filesystem::remove(path);
  std::filesystem::remove(ext);
}

TEST(Preprocessing, FoldBatchNormMatchesConvThenBatchNorm) {
  const uint32_t cout = 4, cin = 3;
  ASSERT_OK_AND_ASSIGN(Tensor w, Tensor::from_vector(testing::random_values(cout * cin * 9, 1, 0.5f),
                                                     Shape{cout, cin, 3, 3}, DataType::FLOAT32));
  auto vec = [](std::vector<float> v) { return Tensor::from_vector(v, Shape{4}, DataType::FLOAT32).value(); };
  BatchNorm2dParameters bn{vec({0.1f, -0.2f, 0.3f, 0.0f}), vec({1.0f, 0.5f, 2.0f, 0.01f}), vec({1.0f, 2.0f, -1.0f, 0.5f}),
                           vec({0.0f, 0.1f, 0.2f, -0.3f}), 1e-5f};
  for (bool with_bias : {false, true}) {
    std::optional<Tensor> b;
    if (with_bias) b = vec({0.5f, 0.25f, -0.5f, 1.0f});
    ASSERT_OK_AND_ASSIGN(FoldedConv2d f, fold_batch_norm_into_conv2d(w, b, bn));
    EXPECT_EQ(f.bias.shape(), (Shape{1, 1, 1, cout}));
    Conv2dParams p;
    p.input_height = 5, p.input_width = 6, p.in_channels = cin, p.out_channels = cout;
    p.with_padding(1, 1);
    Tensor x = testing::random_tensor(Shape{1, 5, 6, cin}, DataType::FLOAT32, Layout::ROW_MAJOR, 2);
    ASSERT_OK_AND_ASSIGN(Tensor conv, reference::conv2d(x, w, b, p, DataType::FLOAT32));
    ASSERT_OK_AND_ASSIGN(Tensor folded, reference::conv2d(x, f.weight, f.bias, p, DataType::FLOAT32));
    std::vector<float> want = values(conv), got = values(folded);
    const std::vector<float> mean = values(bn.running_mean), var = values(bn.running_var), g = values(bn.weight),
                             be = values(bn.bias);
    for (size_t i = 0; i < want.size(); ++i) {
      const size_t c = i % cout;
      const float expect = (want[i] - mean[c]) / std::sqrt(var[c] + bn.eps) * g[c] + be[c];
      EXPECT_NEAR(got[i], expect, 1e-4f * (1 + std::fabs(expect))) << i;
    }
  }
  BatchNorm2dParameters short_bn = bn;
  short_bn.running_mean = Tensor::from_vector({0.0f}, Shape{1}, DataType::FLOAT32).value();
  EXPECT_THAT(fold_batch_norm_into_conv2d(w, std::nullopt, short_bn).status().message(),
              HasSubstr("running_mean has shape [1], expected 4 values"));
}

TEST(Preprocessing, ModelParameterWalker) {
  auto t = [](Shape s) { return Tensor::from_vector(std::vector<float>(s.volume(), 1.0f), s, DataType::FLOAT32).value(); };
  WeightMap sd;
  sd.emplace("encoder1.enc1conv1.weight", t(Shape{8, 3, 3, 3}));
  sd.emplace("encoder1.enc1norm1.weight", t(Shape{8}));
  sd.emplace("encoder1.enc1norm1.bias", t(Shape{8}));
  sd.emplace("encoder1.enc1norm1.running_mean", t(Shape{8}));
  sd.emplace("encoder1.enc1norm1.running_var", t(Shape{8}));
  sd.emplace("conv.weight", t(Shape{1, 8, 1, 1}));
  sd.emplace("conv.bias", t(Shape{1}));
  // Default: the conv bias becomes (1, 1, 1, C); nothing else changes.
  ASSERT_OK_AND_ASSIGN(ModuleParameters plain, preprocess_model_parameters(sd));
  ASSERT_OK_AND_ASSIGN(Tensor cb, plain.at("conv.bias"));
  EXPECT_EQ(cb.shape(), (Shape{1, 1, 1, 1}));
  ASSERT_OK_AND_ASSIGN(Tensor nb, plain.at("encoder1.enc1norm1.bias"));
  EXPECT_EQ(nb.shape(), (Shape{8}));
  EXPECT_EQ(plain.at("encoder1.nothing.weight").status().code(), StatusCode::kNotFound);
  // A hook folds each encoder's conv and norm into one conv module.
  std::vector<std::string> seen;
  ASSERT_OK_AND_ASSIGN(
      ModuleParameters folded,
      preprocess_model_parameters(sd, [&](const std::string& path,
                                          const ModuleParameters& m) -> StatusOr<std::optional<ModuleParameters>> {
        seen.push_back(path);
        if (path != "encoder1") return std::optional<ModuleParameters>();
        const ModuleParameters* conv = m.child("enc1conv1");
        const ModuleParameters* norm = m.child("enc1norm1");
        BatchNorm2dParameters bn{norm->tensors.at("running_mean"), norm->tensors.at("running_var"),
                                 norm->tensors.at("weight"), norm->tensors.at("bias")};
        TS_ASSIGN_OR_RETURN(FoldedConv2d f, fold_batch_norm_into_conv2d(conv->tensors.at("weight"), std::nullopt, bn));
        ModuleParameters out;
        out.children["enc1conv1"].tensors = {{"weight", f.weight}, {"bias", f.bias}};
        return std::optional<ModuleParameters>(out);
      }));
  EXPECT_EQ(seen, (std::vector<std::string>{"", "conv", "encoder1"}));
  ASSERT_OK_AND_ASSIGN(Tensor fb, folded.at("encoder1.enc1conv1.bias"));
  EXPECT_EQ(fb.shape(), (Shape{1, 1, 1, 8}));
  EXPECT_EQ(folded.child("encoder1.enc1norm1"), nullptr);
  WeightMap bad;
  bad.emplace("a..b", t(Shape{1}));
  EXPECT_EQ(preprocess_model_parameters(bad).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tessera::cnn
