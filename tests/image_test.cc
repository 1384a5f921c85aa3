// Compiled images: a graph survives the round trip bit for bit, a loaded
// model computes bit-identically to one compiled from the graph, and every
// kind of damaged or foreign file is a clear error.
#include "tessera/image/image.h"

#include <gtest/gtest.h>
#include <zlib.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <utility>

#include "../src/image/image_format.h"
#include "onnx_model_builder.h"
#include "tessera/device/device.h"
#include "tessera/graph/host_tail.h"
#include "tessera/graph/shape_inference.h"
#include "tessera/image/session.h"
#include "tessera/import/onnx.h"
#include "tessera/runtime/inference_queue.h"
#include "tessera/tensor/tensor.h"

namespace tessera::image {
namespace {

using runtime::CompiledModel;
using runtime::CompileOptions;

graph::Graph small_graph(int64_t batch = 1) {
  auto g = importer::import_onnx_bytes(testing_onnx::small_cnn(batch).bytes());
  EXPECT_TRUE(g.ok()) << g.status().to_string();
  return std::move(g).value();
}

std::shared_ptr<Device> cpu() { return open_device({.descriptor = "cpu", .num_command_queues = 2}).value(); }

std::vector<float> run(CompiledModel& m, Device& d) {
  const auto& dims = m.input_shapes()[0];
  std::vector<float> x(static_cast<size_t>(graph::dims_volume(dims)));
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.37f * static_cast<float>(i));
  Tensor t = Tensor::from_vector(x, Shape(std::span<const uint32_t>(std::vector<uint32_t>(dims.begin(), dims.end()))),
                                 DataType::FLOAT32)
                 .value();
  const Tensor in[] = {to_device(t, d).value()};
  auto outs = m.run(in);
  EXPECT_TRUE(outs.ok()) << outs.status().to_string();
  return outs.value()[0].cpu().value().to_vector().value();
}

std::vector<uint8_t> image_bytes(Device& d, const CompileOptions& o = {}, std::string name = "small",
                                 bool portable = false) {
  auto m = compile_model(std::move(name), small_graph(), d, o, portable);
  EXPECT_TRUE(m.ok()) << m.status().to_string();
  const ImageModel* ms[] = {&m.value()};
  return serialize_image(header_for(d), ms).value();
}

// `m` serialized alone, opened from the bytes, and its model read back.
void round_trip(const ImageModel& m, Device& d, std::unique_ptr<Image>& img, ImageModel& back) {
  const ImageModel* ms[] = {&m};
  auto opened = Image::from_bytes(serialize_image(header_for(d), ms).value());
  ASSERT_TRUE(opened.ok()) << opened.status().to_string();
  img = std::move(opened).value();
  auto model = img->model(0);
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  back = std::move(model).value();
}

format::Preamble preamble(const std::vector<uint8_t>& b) {
  format::Preamble p;
  std::memcpy(&p, b.data(), sizeof p);
  return p;
}

void set_preamble(std::vector<uint8_t>& b, format::Preamble p) {
  p.preamble_crc = format::preamble_crc(p);
  std::memcpy(b.data(), &p, sizeof p);
}

// The checksums are zlib's CRC-32, whichever library computes them.
TEST(Image, Crc32IsZlibs) {
  std::vector<uint8_t> b(1 << 20);
  for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<uint8_t>(i * 2654435761u >> 13);
  for (size_t n : {size_t{0}, size_t{1}, size_t{7}, size_t{63}, size_t{64}, size_t{4095}, size_t{100000}, b.size()})
    for (size_t at : {size_t{0}, size_t{3}}) {
      if (at + n > b.size()) continue;
      const uLong want = crc32(crc32(0L, Z_NULL, 0), b.data() + at, static_cast<uInt>(n));
      EXPECT_EQ(format::crc32_of({b.data() + at, n}), static_cast<uint32_t>(want)) << n << " at " << at;
    }
}

TEST(Image, GraphRoundTripsBitForBit) {
  auto d = cpu();
  auto m = compile_model("small", small_graph(), *d, {}, /*portable=*/true);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  std::unique_ptr<Image> img;
  ImageModel back;
  ASSERT_NO_FATAL_FAILURE(round_trip(*m, *d, img, back));
  const graph::Graph &a = m->graph, &b = back.graph;
  EXPECT_EQ(a.to_string(), b.to_string());
  ASSERT_EQ(a.values.size(), b.values.size());
  for (size_t v = 0; v < a.values.size(); ++v) {
    ASSERT_EQ(a.values[v].constant.has_value(), b.values[v].constant.has_value()) << a.values[v].name;
    if (!a.values[v].constant) continue;
    const auto &x = *a.values[v].constant, &y = *b.values[v].constant;
    EXPECT_EQ(x.dims, y.dims);
    ASSERT_EQ(x.f.size(), y.f.size());
    EXPECT_EQ(std::memcmp(x.f.data(), y.f.data(), x.f.size() * 4), 0) << a.values[v].name;
    EXPECT_EQ(x.i, y.i);
  }
  EXPECT_EQ(back.report.device_ops, m->report.device_ops);
  EXPECT_EQ(back.report.passes.size(), m->report.passes.size());
  const ModelInfo& info = img->info().models[0];
  EXPECT_EQ(info.inputs.size(), 1u);
  EXPECT_EQ(info.inputs[0].dims, (std::vector<int64_t>{1, 3, 16, 16}));
  EXPECT_GT(info.num_constants, 0u);
}

// By default the convs' weights are stored as their kernels read them, and
// the constants only they read hold dims and no values.
TEST(Image, PreparedWeightsRoundTripAndReplaceTheConvConstants) {
  auto d = cpu();
  auto m = compile_model("small", small_graph(), *d, {});
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  ASSERT_EQ(m->prepared.size(), 3u);  // the small model's three convs
  EXPECT_EQ(m->prepared_for, prepared_weights_key(*d));
  const ImageModel* ms[] = {&m.value()};
  auto img = Image::from_bytes(serialize_image(header_for(*d), ms).value()).value();
  auto back = img->model(0).value();
  ASSERT_EQ(back.prepared.size(), m->prepared.size());
  for (size_t i = 0; i < back.prepared.size(); ++i) {
    const PreparedBlob &a = m->prepared[i], &b = back.prepared[i];
    EXPECT_EQ(a.node, b.node);
    EXPECT_EQ(a.key, b.key);
    EXPECT_EQ(a.spec, b.spec);
    ASSERT_EQ(a.bytes().size(), b.bytes().size());
    EXPECT_EQ(std::memcmp(a.bytes().data(), b.bytes().data(), a.bytes().size()), 0) << a.node;
    EXPECT_EQ(a.bias.f, b.bias.f);
    EXPECT_EQ(b.file_offset % 4096, 0u);  // mappable
  }
  int elided = 0;
  for (const graph::Node& n : back.graph.nodes)
    if (n.op_type == "Conv") {
      const auto& w = *back.graph.value(n.inputs[1]).constant;
      EXPECT_EQ(w.dims, m->graph.value(n.inputs[1]).dims);
      elided += w.f.empty();
    }
  EXPECT_EQ(elided, 3);
  EXPECT_EQ(img->info().models[0].prepared_layers, 3u);
  // Without prepared weights for them, the elided constants are a clear error.
  auto bare = back;
  bare.prepared.clear();
  const Status s = CompiledModel::compile(bare.graph, *d, bare.options).status();
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("holds no values and no prepared weights were given"), std::string::npos) << s.to_string();
}

// Prepared weights given to compile that cannot serve: on the host, twice
// for one node, for a node that is no conv. And taps, which images do not
// store, are refused when compiling one.
TEST(Image, PreparedWeightsAndTapsThatCannotServeAreErrors) {
  auto d = cpu();
  auto c = CompiledModel::compile(small_graph(), *d, {}).value();
  (void)run(*c, *d);  // prepares every conv's weights
  const std::vector<runtime::PreparedLayer> good = c->prepared_weights();
  ASSERT_FALSE(good.empty());
  auto error = [&](std::vector<runtime::PreparedLayer> p) {
    return CompiledModel::compile(small_graph(), *d, {}, std::move(p)).status();
  };
  std::vector<runtime::PreparedLayer> host = {good[0]};
  host[0].weights.weight = host[0].weights.weight.cpu().value();
  Status s = error(host);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("are not on this device"), std::string::npos) << s.to_string();
  s = error({good[0], good[0]});
  EXPECT_NE(s.message().find("two sets of prepared weights for node '" + good[0].node + "'"), std::string::npos)
      << s.to_string();
  std::vector<runtime::PreparedLayer> stray = {good[0]};
  stray[0].node = "no_such_conv";
  s = error(stray);
  EXPECT_NE(s.message().find("'no_such_conv', which is not a conv node"), std::string::npos) << s.to_string();
  EXPECT_TRUE(CompiledModel::compile(small_graph(), *d, {}, good).ok());
  s = compile_model("small", small_graph(), *d, {.intermediates_to_save = {"r1"}}).status();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("taps) are not stored"), std::string::npos) << s.to_string();
}

// Prepared weights serve only the kernel tier, CPU features, worker count
// and oneDNN version they were packed for: anywhere else the load names what
// the image needs.
TEST(Image, PreparedWeightsForAnotherCpuAreRefusedNamingTheDifference) {
  auto d = cpu();
  auto m = compile_model("small", small_graph(), *d, {}).value();
  const std::string key = m.prepared_for;
  // Another worker count, oneDNN version, and a CPU feature no CPU has.
  const size_t bar = key.find(" | ") + 3, workers = key.find(" workers");
  for (const auto& [forged, says] :
       {std::pair<std::string, std::string>{key.substr(0, bar) + "97" + key.substr(workers), "97 workers"},
        {key.substr(0, key.find("oneDNN ")) + "oneDNN 99.0.0", "oneDNN 99.0.0"},
        {key.substr(0, bar - 3) + " no_such_feature" + key.substr(bar - 3), "no_such_feature"}}) {
    m.prepared_for = forged;
    const ImageModel* ms[] = {&m};
    auto img = Image::from_bytes(serialize_image(header_for(*d), ms).value()).value();
    const Status s = load_model(*img, 0, *d).status();
    EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
    EXPECT_NE(s.message().find("the image has: " + says), std::string::npos) << s.to_string();
    EXPECT_NE(s.message().find("--portable"), std::string::npos) << s.to_string();
  }
}

// Prepared weights of the wrong size (a forged image whose checksums were
// recomputed) are refused by the kernel that would read them, never read
// past their end.
TEST(Image, ShortPreparedWeightsAreRefusedByTheirKernel) {
  auto d = cpu();
  const auto good = compile_model("small", small_graph(), *d, {}).value();
  size_t forged = 0;
  for (size_t i = 0; i < good.prepared.size(); ++i) {
    ImageModel m = good;
    PreparedBlob& b = m.prepared[i];
    std::vector<uint32_t> dims(b.spec.shape.dims().begin(), b.spec.shape.dims().end());
    if (b.spec.layout != Layout::ROW_MAJOR || dims.size() != 1) continue;
    dims[0] -= 1;
    ++forged;
    b.spec.shape = Shape(std::span<const uint32_t>(dims));
    b.owned.resize(b.spec.storage_bytes());
    const ImageModel* ms[] = {&m};
    auto img = Image::from_bytes(serialize_image(header_for(*d), ms).value()).value();
    auto loaded = load_model(*img, 0, *d);
    ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
    Tensor x =
        to_device(
            Tensor::from_vector(std::vector<float>(3 * 16 * 16, 0.5f), Shape{1, 3, 16, 16}, DataType::FLOAT32).value(),
            *d)
            .value();
    const Tensor in[] = {x};
    const Status s = loaded->model->run(in).status();
    EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << b.node << ": " << s.to_string();
    EXPECT_NE(s.message().find("the prepared weights hold"), std::string::npos) << s.to_string();
  }
  EXPECT_GT(forged, 0u);  // one-row weights: every kernel's here but a tiled one's
}

// From a file, prepared weights are mapped into device memory, not copied:
// the model runs bit-identically, and writing over that memory once the
// model is gone never reaches the file.
TEST(Image, PreparedWeightsMapFromTheFile) {
  auto d = cpu();
  const std::string path = ::testing::TempDir() + "/prepared_small.tsi";
  {
    auto m = compile_model("small", small_graph(), *d, {}).value();
    const ImageModel* ms[] = {&m};
    ASSERT_TRUE(write_image(path, header_for(*d), ms).ok());
  }
  auto direct = CompiledModel::compile(small_graph(), *d, {}).value();
  const std::vector<float> want = run(*direct, *d);
  const uint64_t dram0 = d->memory_stats(BufferType::DRAM).allocated_bytes;
  {
    auto img = Image::open(path).value();
    auto loaded = load_model(*img, 0, *d).value();
    EXPECT_GT(d->memory_stats(BufferType::DRAM).allocated_bytes, dram0);
    const std::vector<float> got = run(*loaded.model, *d);
    ASSERT_EQ(got.size(), want.size());
    EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * 4), 0);
  }
  // Fill all free DRAM the model used with a pattern, then reopen: the checksums still hold.
  auto junk = d->allocate_buffer(BufferType::DRAM, 1 << 20).value();
  std::memset(d->host_address(BufferType::DRAM, 0, junk->address()), 0xa5, 1 << 20);
  EXPECT_TRUE(Image::open(path).ok());
  std::remove(path.c_str());
}

// A file whose weights are damaged opens (the metadata is sound), and then
// neither loads nor verifies: DATA_LOSS naming the section, from load_model
// (which checks the CRC through the device's mappings, in chunks on its
// workers) and from verify_weights (through the image's own mapping). The
// sound file loads, and a second check returns at once.
TEST(Image, DamagedWeightsInAFileAreCaughtBeforeTheyRun) {
  auto d = cpu();
  const std::string path = ::testing::TempDir() + "/damaged_weights.tsi";
  {
    auto m = compile_model("small", small_graph(), *d, {}).value();
    const ImageModel* ms[] = {&m};
    ASSERT_TRUE(write_image(path, header_for(*d), ms).ok());
  }
  {
    auto img = Image::open(path).value();
    ASSERT_TRUE(load_model(*img, 0, *d).ok());
    EXPECT_TRUE(img->verify_weights().ok());
  }
  std::vector<uint8_t> bytes;
  {
    std::ifstream in(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  const format::Preamble p = preamble(bytes);
  for (uint64_t at :
       {p.weights_offset, p.weights_offset + p.weights_bytes / 2, p.weights_offset + p.weights_bytes - 1}) {
    SCOPED_TRACE(at);
    std::vector<uint8_t> b = bytes;
    b[at] ^= 0x20;
    {
      std::ofstream out(path, std::ios::binary | std::ios::trunc);
      out.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
    }
    auto img = Image::open(path);
    ASSERT_TRUE(img.ok()) << img.status().to_string();
    const Status load = load_model(**img, 0, *d).status();
    EXPECT_EQ(load.code(), StatusCode::kDataLoss) << load.to_string();
    EXPECT_NE(load.message().find("section 'weights': CRC-32"), std::string::npos) << load.to_string();
    auto again = Image::open(path).value();
    EXPECT_EQ(again->verify_weights().code(), StatusCode::kDataLoss);
  }
  // A view outside the section is refused.
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  }
  auto img = Image::open(path).value();
  const std::byte one[1] = {};
  const Image::WeightsView outside[] = {{0, one}};
  EXPECT_EQ(img->verify_weights(outside).code(), StatusCode::kInvalidArgument);
  std::remove(path.c_str());
}

TEST(Image, LoadedModelRunsBitIdenticalToTheCompiledGraph) {
  auto d = cpu();
  for (const char* dtype : {"float32", "bfloat16"}) {
    CompileOptions o;
    if (std::string(dtype) == "bfloat16") o.dtype = o.weights_dtype = DataType::BFLOAT16;
    auto direct = CompiledModel::compile(small_graph(), *d, o).value();
    auto img = Image::from_bytes(image_bytes(*d, o)).value();
    auto loaded = load_model(*img, 0, *d);
    ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
    EXPECT_TRUE(loaded->notes.empty());
    const std::vector<float> a = run(*direct, *d), b = run(*loaded->model, *d);
    ASSERT_EQ(a.size(), b.size());
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0) << dtype;
    EXPECT_EQ(loaded->model->report().passes.size(), direct->report().passes.size());
  }
}

// A recurrent layer's activations (a list of strings, the attribute kind
// images gained last) survive the round trip, and the loaded model computes
// the same bits.
TEST(Image, StringListAttributesRoundTrip) {
  testing_onnx::ModelBuilder b(13);
  b.input("x", {4, 1, 3});
  b.random_initializer("w", {1, 4, 3}, 0.8f, 1);
  b.random_initializer("r", {1, 4, 4}, 0.8f, 2);
  auto* rnn = b.node("RNN", {"x", "w", "r"}, {"y"});
  testing_onnx::ModelBuilder::i(rnn, "hidden_size", 4);
  testing_onnx::ModelBuilder::strings(rnn, "activations", {"Softsign"});
  b.output("y");
  auto d = cpu();
  auto m = compile_model("rnn", importer::import_onnx_bytes(b.bytes()).value(), *d, {}, /*portable=*/true);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  std::unique_ptr<Image> img;
  ImageModel back;
  ASSERT_NO_FATAL_FAILURE(round_trip(*m, *d, img, back));
  EXPECT_EQ(m->graph.to_string(), back.graph.to_string());
  EXPECT_NE(back.graph.to_string().find("activations=['Softsign']"), std::string::npos) << back.graph.to_string();
  auto loaded = load_model(*img, 0, *d);
  ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
  auto direct = CompiledModel::compile(importer::import_onnx_bytes(b.bytes()).value(), *d, {}).value();
  const std::vector<float> x = run(*direct, *d), y = run(*loaded->model, *d);
  ASSERT_EQ(x.size(), 16u);
  EXPECT_EQ(std::memcmp(x.data(), y.data(), x.size() * 4), 0);
}

// Per-op precision rules and the numerics travel in the image: the loaded
// model's ops end with the same formats and compute the same bits, portable
// or not.
TEST(Image, PrecisionRulesRoundTrip) {
  auto d = cpu();
  CompileOptions o{.numerics = runtime::Numerics::kTt};
  o.precision.amp_level = 1;
  o.precision.rules = {{.op_type = "Gemm", .input_df = {{1, DataType::BFLOAT16}}},
                       {.name_regex = "r1", .output_df = DataType::FLOAT32, .math_fidelity = MathFidelity::HiFi4}};
  auto direct = CompiledModel::compile(small_graph(), *d, o).value();
  for (const bool portable : {false, true}) {
    auto img = Image::from_bytes(image_bytes(*d, o, "small", portable)).value();
    EXPECT_EQ(runtime::precision_config_to_json(img->info().models[0].options.precision),
              runtime::precision_config_to_json(o.precision));
    EXPECT_EQ(img->info().models[0].options.numerics, runtime::Numerics::kTt);
    auto loaded = load_model(*img, 0, *d);
    ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
    EXPECT_EQ(loaded->model->report().op_precisions, direct->report().op_precisions);
    const std::vector<float> a = run(*direct, *d), b = run(*loaded->model, *d);
    ASSERT_EQ(a.size(), b.size());
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0) << portable;
  }
}

// A portable image stores block-float conv weights as the tiles conv2d
// rounds them through: at their own size, loading to the same outputs.
TEST(Image, PortableBlockFloatWeightsAreStoredAsTiles) {
  auto d = cpu();
  for (DataType wt : {DataType::BFLOAT8_B, DataType::BFLOAT4_B, DataType::BFLOAT2_B}) {
    CompileOptions o{.dtype = DataType::BFLOAT16, .weights_dtype = wt};
    auto direct = CompiledModel::compile(small_graph(), *d, o).value();
    auto img = Image::from_bytes(image_bytes(*d, o, "small", /*portable=*/true)).value();
    const auto& bytes = img->info().models[0].weight_bytes;
    const auto stored =
        std::find_if(bytes.begin(), bytes.end(), [&](const auto& b) { return b.first == data_type_name(wt); });
    ASSERT_NE(stored, bytes.end()) << data_type_name(wt);
    auto loaded = load_model(*img, 0, *d);
    ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
    const std::vector<float> a = run(*direct, *d), b = run(*loaded->model, *d);
    ASSERT_EQ(a.size(), b.size());
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0) << data_type_name(wt);
  }
}

// Constants of integers in [-128, 127] (a QDQ model's quantized weights)
// take one byte each and read back bit for bit; any other value (-0.0, a
// fraction, 128, NaN) keeps its float32 bytes, as do small constants.
TEST(Image, IntegerConstantsAreStoredAsInt8) {
  auto d = cpu();
  auto m = compile_model("small", small_graph(), *d, {}, /*portable=*/true).value();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  // 2048 integers, then each other case among 2048 integers, then a few integers.
  std::vector<std::vector<float>> cases(6, std::vector<float>(2048));
  for (auto& c : cases)
    for (size_t i = 0; i < c.size(); ++i) c[i] = static_cast<float>(static_cast<int>(i * 37 % 256) - 128);
  cases[1][9] = -0.0f, cases[2][2047] = 0.5f, cases[3][0] = 128, cases[4][100] = -129, cases[5][7] = nan;
  cases.push_back({-128, -1, 0, 1, 127});
  const size_t first = m.graph.values.size();
  for (size_t k = 0; k < cases.size(); ++k) {
    const int64_t n = static_cast<int64_t>(cases[k].size());
    m.graph.add_value({.name = "c" + std::to_string(k),
                       .type = graph::ElemType::FLOAT32,
                       .dims = {n},
                       .has_shape = true,
                       .constant = graph::HostTensor::floats({n}, cases[k])});
  }
  const ImageModel* ms[] = {&m};
  const std::vector<uint8_t> bytes = serialize_image(header_for(*d), ms).value();
  EXPECT_EQ(preamble(bytes).format_major, kFormatMajor);  // int8 storage: format 2 readers must refuse it
  auto img = Image::from_bytes(bytes).value();
  const auto& stored = img->info().models[0].weight_bytes;
  const auto int8 = std::find_if(stored.begin(), stored.end(), [](const auto& b) { return b.first == "int8"; });
  ASSERT_NE(int8, stored.end());
  EXPECT_EQ(int8->second, cases[0].size());  // the first case alone
  ImageModel back = img->model(0).value();
  for (size_t k = 0; k < cases.size(); ++k) {
    const auto& c = back.graph.values[first + k].constant;
    ASSERT_TRUE(c.has_value()) << k;
    ASSERT_EQ(c->f.size(), cases[k].size()) << k;
    EXPECT_EQ(std::memcmp(c->f.data(), cases[k].data(), cases[k].size() * 4), 0) << k;
  }
  // An image without such constants stays format 2.
  EXPECT_EQ(preamble(image_bytes(*d)).format_major, kFormatMajorWithoutTail);
}

TEST(Image, IdenticalWeightsAreStoredOnce) {
  auto d = cpu();
  auto a = compile_model("a", small_graph(), *d, {}).value();
  auto b = compile_model("b", small_graph(), *d, {}).value();
  const ImageModel* one[] = {&a};
  const ImageModel* two[] = {&a, &b};
  const auto single = Image::from_bytes(serialize_image(header_for(*d), one).value()).value();
  const auto merged = Image::from_bytes(serialize_image(header_for(*d), two).value()).value();
  const auto separate =
      Image::from_bytes(serialize_image(header_for(*d), two, {.dedup_weights = false}).value()).value();
  EXPECT_EQ(merged->info().weights_bytes, single->info().weights_bytes);
  EXPECT_GT(separate->info().weights_bytes, single->info().weights_bytes);
  ASSERT_EQ(merged->num_models(), 2u);
  EXPECT_EQ(merged->find_model("b").value(), 1u);
  const Status missing = merged->find_model("c").status();
  EXPECT_EQ(missing.code(), StatusCode::kNotFound);
  EXPECT_NE(missing.message().find("its models: 'a', 'b'"), std::string::npos) << missing.message();
  const ImageModel* dup[] = {&a, &a};
  EXPECT_NE(serialize_image(header_for(*d), dup).status().message().find("named 'a'"), std::string::npos);
}

TEST(Image, DamagedFilesAreClearErrors) {
  auto d = cpu();
  const std::vector<uint8_t> good = image_bytes(*d);
  const format::Preamble p = preamble(good);
  auto expect = [](std::vector<uint8_t> bytes, StatusCode code, const std::string& says) {
    auto r = Image::from_bytes(std::move(bytes));
    ASSERT_FALSE(r.ok()) << says;
    EXPECT_EQ(r.status().code(), code) << r.status().to_string();
    EXPECT_NE(r.status().message().find(says), std::string::npos) << r.status().to_string();
  };
  // Truncated anywhere: in the preamble, the metadata, the weights.
  for (size_t n : {size_t{0}, size_t{10}, size_t{63}, size_t{64} + p.meta_bytes / 2, good.size() - 1}) {
    std::vector<uint8_t> t(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(n));
    expect(t, n < 64 ? StatusCode::kDataLoss : StatusCode::kDataLoss, n < 64 ? "preamble" : "truncated");
  }
  {  // A flipped bit in each section.
    std::vector<uint8_t> b = good;
    b[p.meta_offset + p.meta_bytes / 3] ^= 0x10;
    expect(b, StatusCode::kDataLoss, "section 'meta': CRC-32");
    b = good;
    b[p.weights_offset + p.weights_bytes / 2] ^= 0x01;
    expect(b, StatusCode::kDataLoss, "section 'weights': CRC-32");
    b = good;
    b[20] ^= 0x04;
    expect(b, StatusCode::kDataLoss, "section 'preamble'");
  }
  {  // Not an image at all.
    std::vector<uint8_t> b = good;
    std::memcpy(b.data(), "\x08\x07PK....", 8);
    expect(b, StatusCode::kInvalidArgument, "not a Tessera image");
  }
  {  // A newer major format version: refused naming both; a newer minor one loads.
    std::vector<uint8_t> b = good;
    format::Preamble q = p;
    q.format_major = kFormatMajor + 1;
    set_preamble(b, q);
    expect(b, StatusCode::kFailedPrecondition,
           fmt::format("image format {}.0, this Tessera reads formats {}.x to {}.x", kFormatMajor + 1,
                       kOldestFormatMajor, kFormatMajor));
    q = p;
    q.format_minor = kFormatMinor + 3;
    set_preamble(b, q);
    auto r = Image::from_bytes(b);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_EQ((*r)->info().header.format_minor, kFormatMinor + 3);
  }
  {  // Consistent checksums over garbage metadata: the FlatBuffers verifier refuses it.
    std::vector<uint8_t> b = good;
    for (uint64_t k = 0; k < p.meta_bytes; k += 7) b[p.meta_offset + k] ^= 0x5a;
    format::Preamble q = p;
    q.meta_crc = format::crc32_of({b.data() + p.meta_offset, p.meta_bytes});
    set_preamble(b, q);
    expect(b, StatusCode::kDataLoss, "section 'meta'");
  }
}

TEST(Image, ForeignTargetIsRefusedNamingBoth) {
  auto d = cpu();
  auto wh = open_device({.descriptor = "wormhole_b0"}).value();
  auto img = Image::from_bytes(image_bytes(*wh)).value();
  EXPECT_EQ(img->info().header.target.name, "wormhole_b0");
  const Status s = load_model(*img, 0, *d).status();
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("compiled for wormhole_b0 (8x8 cores"), std::string::npos) << s.message();
  // On its own target it loads and runs as the compiled graph does.
  auto loaded = load_model(*img, 0, *wh);
  ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
  auto direct = CompiledModel::compile(small_graph(), *wh, {}).value();
  const std::vector<float> a = run(*direct, *wh), b = run(*loaded->model, *wh);
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0);
}

TEST(Image, PortableImageFromAnotherIsaTierLoadsWithANote) {
  auto d = cpu();
  std::vector<uint8_t> bytes = image_bytes(*d, {}, "small", /*portable=*/true);
  auto img = Image::from_bytes(bytes).value();
  ImageHeader h = img->info().header;
  // The same image as if written on a machine of another tier.
  auto m = img->model(0).value();
  h.kernel_isa = h.kernel_isa == "scalar" ? "avx2" : "scalar";
  const ImageModel* ms[] = {&m};
  auto other = Image::from_bytes(serialize_image(h, ms).value()).value();
  auto loaded = load_model(*other, 0, *d);
  ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
  ASSERT_EQ(loaded->notes.size(), 1u);
  EXPECT_NE(loaded->notes[0].find("kernels re-selected"), std::string::npos) << loaded->notes[0];
}

TEST(Image, InfoNamesWhatTheImageHolds) {
  auto d = cpu();
  auto img = Image::from_bytes(image_bytes(*d)).value();
  const std::string text = info_text(img->info()), json = info_json(img->info());
  for (const char* want : {"image format 2.0", "target: cpu", "prepared weights: 3 conv(s)", "model 'small'",
                           "input  'x' float32 [1,3,16,16]", "Conv 3", "constants:", "device memory once loaded: DRAM",
                           "conv kernels on the compiling CPU: "})
    EXPECT_NE(text.find(want), std::string::npos) << want << "\n" << text;
  for (const char* want : {"\"format_version\": \"2.0\"", "\"prepared_layers\": 3", "\"name\": \"small\"",
                           "\"shape\": [", "\"op_counts\"", "\"conv_kernels\": [\n"})
    EXPECT_NE(json.find(want), std::string::npos) << want << "\n" << json;
}

// A model whose outputs' shapes depend on the data (NonMaxSuppression, an
// If with its branches): the image holds its host tail (format 3), `info`
// names it, and the loaded image's outputs equal those of the model
// compiled directly, through the embedded Session and its queues too.
TEST(Image, HostTailTravelsWithItsSubgraphs) {
  auto d = cpu();
  importer::OnnxImportOptions io;
  io.infer_shapes = false;
  graph::Graph g = importer::import_onnx_bytes(testing_onnx::nms_detector().bytes(), io).value();
  auto split = graph::HostTail::split(g);
  ASSERT_TRUE(split.ok() && *split) << split.status().to_string();
  graph::HostTail tail = std::move(**split);
  ASSERT_TRUE(graph::infer_shapes(g).ok());
  ASSERT_TRUE(tail.bind_prefix(g).ok());
  g.remove_dead_nodes();
  auto direct = CompiledModel::compile(g, *d, {}).value();
  auto m = compile_model("det", g, *d, {});
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  m->tail = tail;
  const std::string path = ::testing::TempDir() + "/host_tail.tsi";
  const ImageModel* ms[] = {&*m};
  ASSERT_TRUE(write_image(path, header_for(*d), ms).ok());
  auto img = Image::open(path).value();
  const ModelInfo& info = img->info().models[0];
  EXPECT_EQ(img->info().header.format_major, 3);
  EXPECT_EQ(info.model_outputs, (std::vector<std::string>{"boxes", "keep"}));
  EXPECT_EQ(info.host_tail_nodes, static_cast<int>(tail.num_nodes()));
  EXPECT_NE(info_text(img->info()).find("host tail: "), std::string::npos) << info_text(img->info());
  auto back = img->model(0);
  ASSERT_TRUE(back.ok() && back->tail) << back.status().to_string();
  EXPECT_EQ(back->tail->summary(), tail.summary());

  std::vector<float> x(40);
  for (size_t i = 0; i < x.size(); ++i) x[i] = 4 * std::sin(0.9f * static_cast<float>(i)) + 2;
  const Tensor xt = Tensor::from_vector(x, Shape{1, 8, 5}, DataType::FLOAT32).value();
  const Tensor in[] = {to_device(xt, *d).value()};
  std::vector<graph::HostTensor> device_outs;
  const std::vector<Tensor> outs = direct->run(in).value();
  for (const Tensor& t : outs)
    device_outs.push_back(graph::HostTensor::floats(
        std::vector<int64_t>(t.shape().dims().begin(), t.shape().dims().end()), t.cpu().value().to_vector().value()));
  const std::vector<graph::HostTensor> want = tail.run(device_outs).value();
  ASSERT_EQ(want.size(), 2u);
  ASSERT_GT(want[1].i.size(), 0u);  // some boxes kept (else the If's empty branch)

  auto session = Session::open(path);
  ASSERT_TRUE(session.ok()) << session.status().to_string();
  EXPECT_EQ((*session)->output_names(), (std::vector<std::string>{"boxes", "keep"}));
  const Tensor host_in[] = {xt};
  const auto refused = (*session)->run(host_in);
  EXPECT_EQ(refused.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.status().message().find("run_outputs"), std::string::npos) << refused.status().message();
  auto got = (*session)->run_outputs(host_in);
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  ASSERT_EQ(got->size(), 2u);
  for (size_t k = 0; k < 2; ++k) {
    EXPECT_EQ((*got)[k].type, want[k].type);
    EXPECT_EQ((*got)[k].dims, want[k].dims);
    EXPECT_EQ((*got)[k].f, want[k].f);
    EXPECT_EQ((*got)[k].i, want[k].i);
  }
  // The run_inference queues run the tail too, each sample's values as
  // run_outputs gives them, in push order (the traced pipeline and plain runs).
  Session& s = **session;
  ASSERT_NE(s.tail(), nullptr);
  auto sample = [&](int i) {
    std::vector<float> v(x);
    for (size_t k = 0; k < v.size(); ++k) v[k] += 0.25f * static_cast<float>(i) * std::cos(static_cast<float>(k));
    return Tensor::from_vector(v, Shape{1, 8, 5}, DataType::FLOAT32).value();
  };
  for (bool pipeline : {true, false}) {
    const int n = 4;
    auto q = runtime::InferenceQueue::start(s.compiled(), s.device(),
                                            {.input_count = n, .use_pipeline = pipeline, .tail = s.tail()});
    ASSERT_TRUE(q.ok()) << q.status().to_string();
    for (int i = 0; i < n; ++i) ASSERT_TRUE((*q)->push({sample(i)}).ok());
    for (int i = 0; i < n; ++i) {
      auto o = (*q)->pop();
      ASSERT_TRUE(o.ok() && o->status.ok()) << o.status().to_string() << " " << o->status.to_string();
      EXPECT_EQ(o->index, static_cast<uint64_t>(i));
      const Tensor one[] = {sample(i)};
      const std::vector<graph::HostTensor> ref = s.run_outputs(one).value();
      ASSERT_EQ(o->values.size(), ref.size()) << (pipeline ? "pipeline" : "run");
      for (size_t k = 0; k < ref.size(); ++k) {
        EXPECT_EQ(o->values[k].dims, ref[k].dims) << i << " " << k;
        EXPECT_EQ(o->values[k].f, ref[k].f) << i << " " << k;
        EXPECT_EQ(o->values[k].i, ref[k].i) << i << " " << k;
      }
    }
  }
  std::remove(path.c_str());
}

// Every device allocation a load makes, failed in turn: each is a clear
// error, and the device then loads and runs the image as if nothing happened.
TEST(Image, EveryFailedAllocationDuringLoadIsAClearErrorAndLeavesTheDeviceUsable) {
  auto d = cpu();
  auto img = Image::from_bytes(image_bytes(*d)).value();
  const std::vector<float> want = run(*load_model(*img, 0, *d).value().model, *d);
  const uint64_t before = d->allocation_count();
  ASSERT_TRUE(load_model(*img, 0, *d).ok());
  const uint64_t n = d->allocation_count() - before;
  ASSERT_GT(n, 0u);
  for (uint64_t k = 1; k <= n; ++k) {
    d->fail_allocation(k);
    auto r = load_model(*img, 0, *d);
    d->fail_allocation(0);
    ASSERT_FALSE(r.ok()) << "allocation " << k << " of " << n << " failed, and the load succeeded";
    EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted) << r.status().to_string();
    EXPECT_NE(r.status().message().find("injected by Device::fail_allocation"), std::string::npos)
        << r.status().to_string();
    auto again = load_model(*img, 0, *d);
    ASSERT_TRUE(again.ok()) << "after failing allocation " << k << ": " << again.status().to_string();
    const std::vector<float> got = run(*again->model, *d);
    ASSERT_EQ(std::memcmp(got.data(), want.data(), want.size() * 4), 0) << "after failing allocation " << k;
  }
}

TEST(Image, MissingFileAndDirectoryAreClearErrors) {
  EXPECT_EQ(Image::open("/nonexistent/x.tsi").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(Image::open("/tmp").status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tessera::image
