// quantized_conv2d against its reference kernel: shapes (batches, strides,
// padding, dilation, odd channel counts, 1x1 and 7x7), zero points, per
// tensor and per channel weight scales, saturating inputs, special values,
// bfloat16 rows, and the errors. With VNNI the int8 kernels run; elsewhere
// (and in ops_test_as_avx2) the float32 ones: both exact here, as the sums
// stay under 2^24.
#include "tessera/ops/quantized_conv2d.h"

#include <random>

#include "tessera/base/cpu_features.h"
#include "tessera/ops/reference.h"
#include "test_util.h"

namespace tessera {
namespace {

struct Case {
  uint32_t n, h, w, cin, cout, k, stride, pad, dilation;
  UnaryWithParam act;
  int32_t zero_point;
  bool per_channel, bias;
};

std::vector<float> int8_weights(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> d(-128, 127);
  std::vector<float> v(n);
  for (float& x : v) x = static_cast<float>(d(rng));
  return v;
}

struct Layer {
  QuantizedConv2dParams params;
  Tensor weights;
  std::vector<float> scales, bias;
};

Layer make_layer(const Case& c, uint32_t seed) {
  Layer l;
  Conv2dParams& p = l.params.conv;
  p.batch_size = c.n, p.input_height = c.h, p.input_width = c.w, p.in_channels = c.cin, p.out_channels = c.cout;
  p.kernel_size = {c.k, c.k}, p.stride = {c.stride, c.stride}, p.dilation = {c.dilation, c.dilation};
  p.with_padding(c.pad, c.pad);
  p.activation = c.act;
  l.params.input_scale = 0.03125f;  // inputs of scale 4: some saturate at both ends
  l.params.input_zero_point = c.zero_point;
  l.weights = Tensor::from_vector(int8_weights(uint64_t{c.cout} * c.cin * c.k * c.k, seed),
                                  Shape{c.cout, c.cin, c.k, c.k}, DataType::FLOAT32)
                  .value();
  for (uint32_t o = 0; o < (c.per_channel ? c.cout : 1); ++o)
    l.scales.push_back(0.001f * static_cast<float>(1 + o % 5));
  if (c.bias)
    for (uint32_t o = 0; o < c.cout; ++o) l.bias.push_back(0.25f * static_cast<float>(o % 7) - 0.5f);
  return l;
}

void check(Device& dev, const Case& c, DataType rows, bool specials, uint32_t seed) {
  SCOPED_TRACE(fmt::format("n{} {}x{}x{} -> {} k{} s{} p{} d{} {} zp {} {} {} kernel {}", c.n, c.h, c.w, c.cin, c.cout,
                           c.k, c.stride, c.pad, c.dilation, unary_op_name(c.act.op), c.zero_point,
                           c.per_channel ? "per channel" : "per tensor", data_type_name(rows),
                           quantized_conv2d_kernel()));
  const Layer l = make_layer(c, seed);
  std::vector<float> v = testing::random_values(uint64_t{c.n} * c.h * c.w * c.cin, seed + 1);
  if (specials) testing::add_special_values(v, 1, 13);
  ASSERT_OK_AND_ASSIGN(Tensor host, Tensor::from_vector(v, Shape{c.n, c.h, c.w, c.cin}, rows));
  ASSERT_OK_AND_ASSIGN(Tensor x, to_device(host, dev));
  ASSERT_OK_AND_ASSIGN(auto layer, QuantizedConv2d::create(dev, l.params, l.weights, l.scales, l.bias));
  ASSERT_OK_AND_ASSIGN(Tensor y, (*layer)(x));
  ASSERT_OK_AND_ASSIGN(Tensor got, y.cpu());
  ASSERT_OK_AND_ASSIGN(Tensor want, reference::quantized_conv2d(host, l.params, l.weights, l.scales, l.bias));
  const bool exact = c.act.op == UnaryOpType::IDENTITY || c.act.op == UnaryOpType::RELU;
  if (exact)
    EXPECT_EQ(testing::host_bytes(got), testing::host_bytes(want));
  else
    testing::expect_allclose(got, want, 1e-6, 1e-6);
}

// f under each kernel set of the quantize and epilogue passes (quantize_kernels.h).
template <class F>
void on_every_isa(F f) {
  for (KernelIsa isa : {KernelIsa::kAvx512, KernelIsa::kAvx2, KernelIsa::kScalar}) {
    set_kernel_isa_limit(isa);
    SCOPED_TRACE(fmt::format("isa={}", kernel_isa_name(kernel_isa())));
    f();
  }
  set_kernel_isa_limit(KernelIsa::kAvx512);
}

// The device's values equal the reference's bit for bit, NaN where it is
// NaN; returns how many NaNs the reference has.
size_t expect_equal_nan_where_nan(const Tensor& device, const Tensor& want) {
  const auto g = device.cpu().value().to_vector().value(), r = want.to_vector().value();
  EXPECT_EQ(g.size(), r.size());
  size_t nans = 0;
  for (size_t i = 0; i < std::min(g.size(), r.size()); ++i) {
    nans += std::isnan(r[i]);
    if (std::isnan(r[i]))
      EXPECT_TRUE(std::isnan(g[i])) << i;
    else
      EXPECT_EQ(g[i], r[i]) << i;
  }
  return nans;
}

const UnaryWithParam kRelu{UnaryOpType::RELU}, kNone{}, kSilu{UnaryOpType::SILU}, kRelu6{UnaryOpType::RELU6};

TEST(QuantizedConv2d, MatchesReferenceOverShapes) {
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({}));
  const Case cases[] = {
      {1, 9, 11, 8, 16, 3, 1, 1, 1, kRelu, 0, true, true},
      {2, 13, 7, 5, 7, 3, 2, 1, 1, kNone, 57, true, true},       // batch, stride 2, odd channels
      {1, 17, 19, 16, 32, 3, 1, 2, 2, kRelu, 128, false, true},  // dilation, per tensor
      {1, 12, 12, 24, 40, 1, 1, 0, 1, kNone, 3, true, false},    // 1x1, no bias
      {1, 14, 14, 3, 16, 7, 2, 3, 1, kRelu, 114, true, true},    // stem
      {3, 5, 6, 32, 8, 3, 1, 0, 1, kRelu6, 255, true, true},     // no padding, zero point 255
      {1, 2, 2, 7, 9, 3, 1, 1, 1, kSilu, 10, true, true},        // more padding than input
      {1, 21, 10, 16, 16, 5, 2, 2, 1, kNone, 0, true, true},
  };
  on_every_isa([&] {
    uint32_t seed = 1;
    for (const Case& c : cases) check(*dev, c, DataType::FLOAT32, false, seed += 10);
  });
}

TEST(QuantizedConv2d, SpecialValuesAndBfloat16Rows) {
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({}));
  const Case c{2, 9, 9, 12, 16, 3, 1, 1, 1, kRelu, 37, true, true};
  on_every_isa([&] {
    check(*dev, c, DataType::FLOAT32, /*specials=*/true, 5);
    check(*dev, c, DataType::BFLOAT16, /*specials=*/true, 6);
  });
}

// +-Inf saturates, -0.0 and denormals quantize to the zero point, halves
// round to even; a NaN makes the outputs it reaches NaN. One channel, eight
// pixels in a row, a 1x1 kernel of weight 1: each output is its pixel's.
TEST(QuantizedConv2d, QuantizesLikeQuantizeLinear) {
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({}));
  QuantizedConv2dParams p;
  p.conv.input_height = 1, p.conv.input_width = 8;
  p.conv.in_channels = 1, p.conv.out_channels = 1;
  p.conv.kernel_size = {1, 1};
  p.input_scale = 0.5f, p.input_zero_point = 10;
  ASSERT_OK_AND_ASSIGN(Tensor w, Tensor::from_vector({1.0f}, Shape{1, 1, 1, 1}, DataType::FLOAT32));
  const float one = 1.0f;
  ASSERT_OK_AND_ASSIGN(auto layer, QuantizedConv2d::create(*dev, p, w, {&one, 1}, {}));
  const std::vector<float> in = {NAN, INFINITY, -INFINITY, -0.0f, 1e-40f, 0.75f, 1.25f, -1.75f};
  // q - zp: Inf -> 255 - 10; -Inf -> 0 - 10; 1.5 -> 2 (even); 2.5 -> 2; -3.5 -> -4
  const std::vector<float> want = {NAN, 122.5f, -5.0f, 0.0f, 0.0f, 1.0f, 1.0f, -2.0f};
  ASSERT_OK_AND_ASSIGN(Tensor x,
                       to_device(Tensor::from_vector(in, Shape{1, 1, 8, 1}, DataType::FLOAT32).value(), *dev));
  on_every_isa([&] {
    ASSERT_OK_AND_ASSIGN(Tensor y, (*layer)(x));
    const std::vector<float> got = y.cpu().value().to_vector().value();
    ASSERT_EQ(got.size(), want.size());
    EXPECT_TRUE(std::isnan(got[0]));
    for (size_t i = 1; i < got.size(); ++i) EXPECT_EQ(got[i], want[i]) << i;
  });
}

// QuantizeLinear rounds the float32 quotient x / scale: inputs a few ulps
// around (n + 0.5) * scale and outputs whose quotients are near halves (an
// output scale of 2/3 the input's) match the reference bit for bit over many
// scales, on every kernel set (a reciprocal multiply instead of the division
// fails this test).
TEST(QuantizedConv2d, NearHalfQuotientsRoundAsDivisionDoes) {
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({}));
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> log_scale(-12.0f, 3.0f);
  for (int t = 0; t < 24; ++t) {
    const float sx = std::exp2(log_scale(rng));
    std::vector<float> v;
    for (int n = -140; n < 140; ++n) {
      const float mid = (static_cast<float>(n) + 0.5f) * sx;
      float lo = mid, hi = mid;
      v.push_back(mid);
      for (int u = 0; u < 3; ++u)
        v.push_back(lo = std::nextafter(lo, -INFINITY)), v.push_back(hi = std::nextafter(hi, INFINITY));
    }
    QuantizedConv2dParams p;
    p.conv.input_height = 1, p.conv.input_width = static_cast<uint32_t>(v.size());
    p.conv.in_channels = 1, p.conv.out_channels = 1;
    p.conv.kernel_size = {1, 1};
    p.input_scale = sx, p.input_zero_point = 128;
    const float one = 1.0f;
    ASSERT_OK_AND_ASSIGN(Tensor w, Tensor::from_vector({1.0f}, Shape{1, 1, 1, 1}, DataType::FLOAT32));
    ASSERT_OK_AND_ASSIGN(Tensor host, Tensor::from_vector(v, Shape{1, 1, p.conv.input_width, 1}, DataType::FLOAT32));
    for (bool out : {false, true}) {
      SCOPED_TRACE(fmt::format("scale {} {}", sx, out ? "output quantized" : "input"));
      if (out) p.output = OutputQuantization{sx * 2 / 3, 0, -128, 127};
      ASSERT_OK_AND_ASSIGN(auto layer, QuantizedConv2d::create(*dev, p, w, {&one, 1}, {}));
      ASSERT_OK_AND_ASSIGN(Tensor want, reference::quantized_conv2d(host, p, w, {&one, 1}, {}));
      on_every_isa([&] {
        ASSERT_OK_AND_ASSIGN(Tensor x, to_device(host, *dev));
        ASSERT_OK_AND_ASSIGN(Tensor y, (*layer)(x));
        EXPECT_EQ(expect_equal_nan_where_nan(y, want), 0u);
      });
    }
  }
}

// A NaN reaches every output channel of the pixels whose windows hold it,
// and only those (strides, padding and dilation).
TEST(QuantizedConv2d, NanReachesTheWindowsThatHoldIt) {
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({}));
  for (const Case& c : {Case{1, 11, 9, 4, 8, 3, 2, 1, 1, kRelu, 20, true, true},
                        Case{2, 10, 10, 3, 5, 3, 1, 2, 2, kNone, 0, false, false}}) {
    SCOPED_TRACE(fmt::format("stride {} dilation {}", c.stride, c.dilation));
    const Layer l = make_layer(c, 9);
    std::vector<float> v = testing::random_values(uint64_t{c.n} * c.h * c.w * c.cin, 4);
    v[(uint64_t{4} * c.w + 5) * c.cin + 1] = NAN;
    v[((uint64_t{c.n} - 1) * c.h * c.w + (c.h - 1) * c.w) * c.cin + 2] = NAN;
    ASSERT_OK_AND_ASSIGN(Tensor host, Tensor::from_vector(v, Shape{c.n, c.h, c.w, c.cin}, DataType::FLOAT32));
    ASSERT_OK_AND_ASSIGN(auto layer, QuantizedConv2d::create(*dev, l.params, l.weights, l.scales, l.bias));
    ASSERT_OK_AND_ASSIGN(Tensor x, to_device(host, *dev));
    ASSERT_OK_AND_ASSIGN(Tensor y, (*layer)(x));
    ASSERT_OK_AND_ASSIGN(Tensor want, reference::quantized_conv2d(host, l.params, l.weights, l.scales, l.bias));
    EXPECT_GT(expect_equal_nan_where_nan(y, want), 0u);
  }
}

// The output's QuantizeLinear -> DequantizeLinear, after the activation,
// uint8 and int8, against the reference bit for bit on every kernel set.
TEST(QuantizedConv2d, OutputQuantizationIsQuantizeThenDequantize) {
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({}));
  for (const auto& [act, out] : {std::pair{kRelu, OutputQuantization{0.05f, 10, 0, 255}},
                                 std::pair{kNone, OutputQuantization{0.04f, -3, -128, 127}}}) {
    Layer l = make_layer({2, 9, 8, 8, 24, 3, 1, 1, 1, act, 30, true, true}, 17);
    l.params.output = out;
    std::vector<float> v = testing::random_values(2 * 9 * 8 * 8, 18);
    v[5] = NAN;
    ASSERT_OK_AND_ASSIGN(Tensor host, Tensor::from_vector(v, Shape{2, 9, 8, 8}, DataType::FLOAT32));
    ASSERT_OK_AND_ASSIGN(auto layer, QuantizedConv2d::create(*dev, l.params, l.weights, l.scales, l.bias));
    ASSERT_OK_AND_ASSIGN(Tensor want, reference::quantized_conv2d(host, l.params, l.weights, l.scales, l.bias));
    on_every_isa([&] {
      ASSERT_OK_AND_ASSIGN(Tensor x, to_device(host, *dev));
      ASSERT_OK_AND_ASSIGN(Tensor y, (*layer)(x));
      EXPECT_GT(expect_equal_nan_where_nan(y, want), 0u);
      const auto r = want.to_vector().value();
      for (size_t i = 0; i < r.size(); ++i) {
        // Every value is a multiple of the scale within the type's range.
        if (!std::isnan(r[i])) {
          EXPECT_EQ(std::nearbyint(r[i] / out.scale) * out.scale, r[i]) << i;
        }
      }
    });
  }
  QuantizedConv2dParams bad = make_layer({1, 4, 4, 8, 8, 3, 1, 1, 1, kNone, 0, true, false}, 1).params;
  bad.output = OutputQuantization{0.1f, 300, 0, 255};
  const Layer l = make_layer({1, 4, 4, 8, 8, 3, 1, 1, 1, kNone, 0, true, false}, 1);
  EXPECT_FALSE(QuantizedConv2d::create(*dev, bad, l.weights, l.scales, l.bias).ok());
}

TEST(QuantizedConv2d, Errors) {
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({}));
  const Case c{1, 6, 6, 4, 8, 3, 1, 1, 1, kNone, 0, true, true};
  const Layer l = make_layer(c, 3);
  auto fails = [&](QuantizedConv2dParams p, const Tensor& w, std::vector<float> scales, std::vector<float> bias,
                   std::string_view what) {
    auto r = QuantizedConv2d::create(*dev, p, w, scales, bias);
    ASSERT_FALSE(r.ok()) << what;
    EXPECT_NE(r.status().message().find(what), std::string::npos) << r.status().message();
  };
  QuantizedConv2dParams p = l.params;
  p.input_scale = 0;
  fails(p, l.weights, l.scales, l.bias, "input scale must be positive");
  p = l.params, p.input_zero_point = 256;
  fails(p, l.weights, l.scales, l.bias, "zero point must be a uint8");
  p = l.params, p.conv.groups = 2;
  fails(p, l.weights, l.scales, l.bias, "groups must be 1");
  fails(l.params, l.weights, {1.0f, 2.0f}, l.bias, "expected 1 or 8 weight scales");
  fails(l.params, l.weights, std::vector<float>(8, -1.0f), l.bias, "positive and finite");
  fails(l.params, l.weights, l.scales, {1.0f}, "no bias or 8 values");
  std::vector<float> big = l.weights.to_vector().value();
  big[5] = 128.0f;
  fails(l.params, Tensor::from_vector(big, l.weights.shape(), DataType::FLOAT32).value(), l.scales, l.bias,
        "int8 values, found 128 at index 5");
  big[5] = 0.5f;
  fails(l.params, Tensor::from_vector(big, l.weights.shape(), DataType::FLOAT32).value(), l.scales, l.bias,
        "int8 values, found 0.5");
  fails(l.params, Tensor::from_vector(big, Shape{8, 4, 9, 1}, DataType::FLOAT32).value(), l.scales, l.bias,
        "expected weight shape");
  ASSERT_OK_AND_ASSIGN(auto layer, QuantizedConv2d::create(*dev, l.params, l.weights, l.scales, l.bias));
  ASSERT_OK_AND_ASSIGN(
      Tensor wrong,
      to_device(testing::random_tensor(Shape{1, 6, 5, 4}, DataType::FLOAT32, Layout::ROW_MAJOR, 1), *dev));
  EXPECT_FALSE((*layer)(wrong).ok());
  ASSERT_OK_AND_ASSIGN(Tensor tiles,
                       to_device(testing::random_tensor(Shape{1, 1, 36, 4}, DataType::FLOAT32, Layout::TILE, 1), *dev));
  auto r = (*layer)(tiles);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("ROW_MAJOR"), std::string::npos) << r.status().message();
  EXPECT_FALSE((*layer)(l.weights).ok());  // a host tensor
  ASSERT_OK_AND_ASSIGN(Tensor device_weights, to_device(l.weights, *dev));
  fails(l.params, device_weights, l.scales, l.bias, "expected host weights");
  ASSERT_OK_AND_ASSIGN(auto other, open_device({}));
  ASSERT_OK_AND_ASSIGN(
      Tensor elsewhere,
      to_device(testing::random_tensor(Shape{1, 6, 6, 4}, DataType::FLOAT32, Layout::ROW_MAJOR, 1), *other));
  r = (*layer)(elsewhere);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("another device"), std::string::npos) << r.status().message();
}

}  // namespace
}  // namespace tessera
