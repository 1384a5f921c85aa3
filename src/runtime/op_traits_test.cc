// The op-traits table: what the compiler reports and asks of each op type
// comes from its row.
#include <algorithm>

#include "lowering.h"
#include "test_util.h"

namespace tessera::runtime {
namespace {

graph::Node node(std::string op) {
  graph::Node n;
  n.op_type = std::move(op);
  n.outputs = {0};
  return n;
}

TEST(OpTraits, DeviceOpsAreTheRowsWithALoweringSorted) {
  const std::vector<std::string> ops = device_ops();
  EXPECT_TRUE(std::is_sorted(ops.begin(), ops.end()));
  EXPECT_EQ(ops.size(), 87u);
  for (const std::string& op : ops) {
    const OpTraits* t = find_op_traits(op);
    ASSERT_NE(t, nullptr) << op;
    EXPECT_NE(t->lower, nullptr) << op;
  }
  for (const char* op :
       {"Conv", "ConvTranspose", "MatMul", "Concat", "Resize", "LayerNormalization", "InstanceNormalization", "Elu",
        "Erf", "Reciprocal", "Softplus", "Selu", "Max", "Sign", "LogSoftmax", "Gather", "ArgMax", "ArgMin", "Greater",
        "GreaterOrEqual", "Less", "LessOrEqual", "Equal"})
    EXPECT_TRUE(std::count(ops.begin(), ops.end(), op)) << op;
  EXPECT_TRUE(std::count(ops.begin(), ops.end(), "Where"));
  // Known to the table, run on the host only.
  for (const char* op : {"ReduceProd", "Range"}) {
    ASSERT_NE(find_op_traits(op), nullptr) << op;
    EXPECT_EQ(find_op_traits(op)->lower, nullptr) << op;
    EXPECT_FALSE(std::count(ops.begin(), ops.end(), op)) << op;
  }
  EXPECT_EQ(find_op_traits("NoSuchOp"), nullptr);
  EXPECT_EQ(find_op_traits(""), nullptr);
  // supported_ops adds the host fallbacks and Constant.
  const std::vector<std::string> all = supported_ops();
  EXPECT_TRUE(std::includes(all.begin(), all.end(), ops.begin(), ops.end()));
  EXPECT_TRUE(std::count(all.begin(), all.end(), "Constant"));
}

TEST(OpTraits, ConstantInputs) {
  EXPECT_FALSE(needs_constant_input(node("Conv"), 0));
  EXPECT_TRUE(needs_constant_input(node("Conv"), 1));
  EXPECT_TRUE(needs_constant_input(node("Reshape"), 1));
  EXPECT_TRUE(needs_constant_input(node("ReduceSum"), 1));
  EXPECT_TRUE(needs_constant_input(node("Range"), 0));
  EXPECT_TRUE(needs_constant_input(node("ConstantOfShape"), 0));
  EXPECT_FALSE(needs_constant_input(node("Add"), 1));
  EXPECT_FALSE(needs_constant_input(node("MatMul"), 1));
  EXPECT_FALSE(needs_constant_input(node("NoSuchOp"), 1));
}

TEST(OpTraits, PerImageOps) {
  EXPECT_TRUE(per_image_op(node("Conv")));
  EXPECT_TRUE(per_image_op(node("Relu")));
  EXPECT_FALSE(per_image_op(node("MatMul")));
  EXPECT_FALSE(per_image_op(node("Identity")));
  EXPECT_FALSE(per_image_op(node("NoSuchOp")));
  graph::Node cat = node("Concat");
  cat.attrs["axis"].kind = graph::Attribute::Kind::INT;
  cat.attrs["axis"].i = 1;
  EXPECT_TRUE(per_image_op(cat));
  cat.attrs["axis"].i = 0;  // along the batch
  EXPECT_FALSE(per_image_op(cat));
  cat.attrs["axis"].i = -4;
  EXPECT_FALSE(per_image_op(cat));
  graph::Node two = node("Relu");
  two.outputs = {0, 1};
  EXPECT_FALSE(per_image_op(two));
}

}  // namespace
}  // namespace tessera::runtime
