// Whole models through the compiler and the traced two-queue Pipeline,
// against independent references (scripts/prepare_models.sh makes them in build/models,
// or $TESSERA_MODEL_DIR):
// ResNet-50, MobileNetV2, the Vanilla UNet (480x640) and a YOLOv5s-style
// detector (640x640) exported from PyTorch with fixed-seed weights, checked
// against PyTorch's outputs; the PP-OCRv4 text detector with its real
// weights, checked against ONNX Runtime's. Batch 1 and batch 8.
//
// The seeds' rule: PCC >= 0.999 in float32 (comp_pcc, tessera/cnn/testing.h);
// bfloat16 activations with bfloat16 weights at batch 1: PCC >= 0.99. No
// model may need a host fallback in float32.
#include <cstdlib>
#include <ostream>
#include <filesystem>

#include "model_runner.h"
#include "tessera/cnn/testing.h"
#include "tessera/cnn/weights.h"
#include "test_util.h"

namespace tessera::tools {
namespace {

namespace fs = std::filesystem;

std::string model_dir() {
  const char* d = std::getenv("TESSERA_MODEL_DIR");
  return d ? d : TESSERA_DEFAULT_MODEL_DIR;
}

struct Case {
  std::string name, reference;  // reference: "torch" or "ort"
};
void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }
const auto kCases = ::testing::Values(Case{"resnet50", "torch"}, Case{"mobilenet_v2", "torch"}, Case{"unet", "torch"},
                                      Case{"yolo", "torch"}, Case{"ppocr_det", "ort"});

class ModelsTest : public ::testing::TestWithParam<std::tuple<Case, int>> {};

StatusOr<Tensor> first_n(const Tensor& all, uint32_t n) {
  TS_ASSIGN_OR_RETURN(std::vector<float> v, all.to_vector());
  std::vector<uint32_t> dims(all.shape().dims().begin(), all.shape().dims().end());
  const size_t per = v.size() / dims[0];
  dims[0] = n;
  v.resize(per * n);
  return Tensor::from_vector(v, Shape(std::span<const uint32_t>(dims)), DataType::FLOAT32);
}

void check(const Case& c, int batch, const std::string& precision, double min_pcc,
           const std::string& math_fidelity = "HiFi4") {
  const std::string dir = model_dir();
  const std::string onnx = dir + "/" + c.name + ".onnx";
  if (!fs::exists(onnx)) GTEST_SKIP() << onnx << " is missing: run scripts/prepare_models.sh (scripts/test.sh does)";
  const std::string ref = fmt::format("{}/{}_{}_b{}.npy", dir, c.name, c.reference, batch);
  ASSERT_OK_AND_ASSIGN(Tensor inputs, cnn::load_npy(dir + "/" + c.name + "_input.npy"));
  ASSERT_OK_AND_ASSIGN(Tensor x, first_n(inputs, static_cast<uint32_t>(batch)));
  ASSERT_OK_AND_ASSIGN(Tensor want, cnn::load_npy(ref));
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({.trace_region_size = 8 << 20, .num_command_queues = 2}));
  std::vector<int64_t> shape(x.shape().dims().begin(), x.shape().dims().end());
  ModelOptions mo{.precision = precision, .batch = batch, .input_shape = shape};
  mo.math_fidelity = math_fidelity;
  ASSERT_OK_AND_ASSIGN(LoadedModel m, load_model(onnx, *dev, mo));
  if (precision == "float32") {
    EXPECT_TRUE(m.model->report().fallbacks.empty()) << m.model->report().to_string();
  }
  ASSERT_OK_AND_ASSIGN(auto outs, run_pipeline(*m.model, *dev, {.use_trace = true, .num_command_queues = 2}, {{x}}));
  ASSERT_EQ(outs.size(), 1u);
  ASSERT_TRUE(outs[0].is_tensor());
  ASSERT_OK_AND_ASSIGN(cnn::PccResult p, cnn::comp_pcc(want, *outs[0].tensor, min_pcc));
  EXPECT_TRUE(p.passed) << c.name << " batch " << batch << " " << precision << ": PCC " << p.pcc << " < " << min_pcc;
  std::printf("%s batch %d %s: PCC %.6f against %s\n", c.name.c_str(), batch, precision.c_str(), p.pcc,
              c.reference.c_str());
  ASSERT_OK(close_device(*dev));
}

TEST_P(ModelsTest, Float32MatchesTheReference) {
  const auto& [c, batch] = GetParam();
  check(c, batch, "float32", 0.999);
}

INSTANTIATE_TEST_SUITE_P(Models, ModelsTest, ::testing::Combine(kCases, ::testing::Values(1, 8)),
                         [](const auto& info) {
                           return std::get<0>(info.param).name + "_b" + std::to_string(std::get<1>(info.param));
                         });

class Bfloat16Test : public ::testing::TestWithParam<Case> {};

TEST_P(Bfloat16Test, BatchOneMatchesTheReference) { check(GetParam(), 1, "bfloat16", 0.99); }

INSTANTIATE_TEST_SUITE_P(Models, Bfloat16Test, kCases, [](const auto& info) { return info.param.name; });

TEST(ModelOptions, UnknownPrecisionFidelityOrMicroBatchIsAnError) {
  ModelOptions bad_precision{.precision = "float16"};
  EXPECT_ERROR(compile_options_for(bad_precision), StatusCode::kInvalidArgument,
               "--dtype 'float16': expected float32, bfloat16 or bfloat8_b");
  ModelOptions bad_fidelity;
  bad_fidelity.math_fidelity = "HiFi9";
  EXPECT_ERROR(compile_options_for(bad_fidelity), StatusCode::kInvalidArgument,
               "--math-fidelity 'HiFi9': expected LoFi, HiFi2, HiFi3 or HiFi4");
  ModelOptions lofi;
  lofi.math_fidelity = "LoFi";
  ASSERT_OK_AND_ASSIGN(runtime::CompileOptions c, compile_options_for(lofi));
  EXPECT_EQ(c.math_fidelity, MathFidelity::LoFi);
  EXPECT_FALSE(c.micro_batch.has_value());  // automatic
  for (const char* bad : {"", "0", "-2", "two", "1234567"}) {
    ModelOptions m;
    m.micro_batch = bad;
    EXPECT_ERROR(compile_options_for(m), StatusCode::kInvalidArgument,
                 fmt::format("--micro-batch '{}': expected auto, off or a positive number of images", bad));
  }
  ModelOptions off, two;
  off.micro_batch = "off";
  two.micro_batch = "2";
  ASSERT_OK_AND_ASSIGN(c, compile_options_for(off));
  EXPECT_EQ(c.micro_batch, 0u);
  ASSERT_OK_AND_ASSIGN(c, compile_options_for(two));
  EXPECT_EQ(c.micro_batch, 2u);
}

// float32 with HiFi2: the 3x3 stride-1 convs run Winograd, still PCC >= 0.999.
class WinogradTest : public ::testing::TestWithParam<Case> {};

TEST_P(WinogradTest, BatchOneMatchesTheReference) { check(GetParam(), 1, "float32", 0.999, "HiFi2"); }

INSTANTIATE_TEST_SUITE_P(Models, WinogradTest, kCases, [](const auto& info) { return info.param.name; });

// float32 with LoFi: on AMX CPUs the convs compute on bfloat16 operands
// (elsewhere the 3x3 stride-1 ones run Winograd), still PCC >= 0.999.
class LoFiTest : public ::testing::TestWithParam<Case> {};

TEST_P(LoFiTest, BatchOneMatchesTheReference) { check(GetParam(), 1, "float32", 0.999, "LoFi"); }

INSTANTIATE_TEST_SUITE_P(Models, LoFiTest, kCases, [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace tessera::tools
