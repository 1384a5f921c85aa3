// `tessera compare` (tools/compare_command.h): one row per op the model
// runs, a CSV a script can read, a suggested rule that parses and, applied,
// raises the final PCC; on ResNet-50 with bfloat8_b weights and bfloat16
// activations as well as on a small net.
#include <filesystem>
#include <fstream>

#include "compare_command.h"
#include "onnx_model_builder.h"
#include "tessera/import/onnx.h"
#include "test_util.h"

namespace tessera::tools {
namespace {

namespace fs = std::filesystem;

std::vector<std::string> lines_of(const std::string& path) {
  std::ifstream f(path);
  std::vector<std::string> out;
  for (std::string l; std::getline(f, l);) out.push_back(l);
  return out;
}

TEST(Compare, RegexEscapeMatchesTheNameAlone) {
  EXPECT_EQ(regex_escape("/layer1/layer1.0/conv1/Conv"), "/layer1/layer1\\.0/conv1/Conv");
  EXPECT_EQ(regex_escape("a+b(c)[d]{e}|f?*^$\\"), "a\\+b\\(c\\)\\[d\\]\\{e\\}\\|f\\?\\*\\^\\$\\\\");
}

TEST(Compare, OneRowPerOpAndASuggestionThatParses) {
  const fs::path dir = fs::temp_directory_path() / fmt::format("tessera_compare_{}", ::getpid());
  fs::create_directories(dir);
  const std::string onnx = (dir / "small.onnx").string(), csv = (dir / "small.csv").string();
  {
    const std::string bytes = testing_onnx::small_cnn(1).bytes();
    std::ofstream(onnx, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  CompareRequest r{.model = onnx, .threshold = 0.9999999, .csv = csv};
  r.options.precision = "bfloat8_b";
  ASSERT_OK_AND_ASSIGN(CompareResult res, compare_command(r));
  const std::vector<std::string> rows = lines_of(csv);
  ASSERT_EQ(rows.size(), res.ops + 1);  // the header
  EXPECT_EQ(rows[0],
            "index,node,op_type,output_df,weights_df,math_fidelity,pcc,pcc_lost,max_abs_error,time_us,"
            "time_share");
  EXPECT_GE(res.ops, 5u);
  ASSERT_TRUE(res.first_under);  // bfloat8_b is never that close
  ASSERT_TRUE(res.picked);        // the best of the ops tried, which raised the final PCC
  ASSERT_OK_AND_ASSIGN(runtime::PrecisionConfig c, runtime::parse_precision_config(res.suggestion));
  ASSERT_EQ(c.rules.size(), 1u);
  ASSERT_TRUE(res.final_pcc_with_suggestion);
  EXPECT_GT(*res.final_pcc_with_suggestion, res.final_pcc);
  // An image is refused: compare compiles the model twice.
  CompareRequest img{.model = (dir / "m.tsi").string()};
  EXPECT_FALSE(compare_command(img).ok());
  fs::remove_all(dir);
}

// The case: ResNet-50, bfloat8_b weights, bfloat16 activations.
TEST(Compare, SuggestionRaisesResNet50sFinalPcc) {
  const char* d = std::getenv("TESSERA_MODEL_DIR");
  const std::string dir = d ? d : TESSERA_DEFAULT_MODEL_DIR;
  if (!fs::exists(dir + "/resnet50.onnx")) GTEST_SKIP() << "run scripts/prepare_models.sh (scripts/test.sh does)";
  CompareRequest r{.model = dir + "/resnet50.onnx", .inputs = {dir + "/resnet50_input_b1.npy"}};
  r.options.precision = "bfloat8_b";
  ASSERT_OK_AND_ASSIGN(CompareResult res, compare_command(r));
  EXPECT_EQ(res.ops, 57u);
  EXPECT_GE(res.final_pcc, 0.99);
  ASSERT_TRUE(res.final_pcc_with_suggestion);
  EXPECT_GT(*res.final_pcc_with_suggestion, res.final_pcc);
}

}  // namespace
}  // namespace tessera::tools
