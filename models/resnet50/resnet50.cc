#include "resnet50/resnet50.h"

#include "common/random_weights.h"
#include "tessera/ops/eltwise.h"
#include "tessera/ops/manipulation.h"
#include "tessera/ops/pool2d.h"

namespace tessera::models {

namespace {

Conv2dParams conv_params(uint32_t batch, uint32_t hw, uint32_t cin, uint32_t cout, uint32_t k, uint32_t stride,
                         bool relu) {
  Conv2dParams p;
  p.batch_size = batch;
  p.input_height = p.input_width = hw;
  p.in_channels = cin;
  p.out_channels = cout;
  p.kernel_size = {k, k};
  p.stride = {stride, stride};
  p.with_padding(k / 2, k / 2);
  if (relu) p.activation = {UnaryOpType::RELU};
  return p;
}

}  // namespace

ResNet50::ResNet50(const ResNet50Options& o) : options_(o) {
  WeightSource w(o.seed);
  const Conv2dConfig cfg{.weights_dtype = o.weights_dtype};
  auto conv = [&](uint32_t hw, uint32_t cin, uint32_t cout, uint32_t k, uint32_t stride, bool relu) {
    Conv2dParams p = conv_params(o.batch, hw, cin, cout, k, stride, relu);
    return std::make_unique<cnn::DirectConv2d>(p, w.he_normal(Shape{cout, cin, k, k}, cin * k * k), w.bias(cout), cfg);
  };
  stem_ = conv(o.image_size, 3, 64, 7, 2, true);
  uint32_t hw = o.image_size / 4, in = 64;  // after the stem conv and max pool
  const uint32_t widths[] = {64, 128, 256, 512}, depths[] = {3, 4, 6, 3};
  for (int stage = 0; stage < 4; ++stage)
    for (uint32_t b = 0; b < depths[stage]; ++b) {
      const uint32_t width = widths[stage], out = width * 4, stride = (stage > 0 && b == 0) ? 2 : 1;
      Bottleneck blk;
      blk.reduce = conv(hw, in, width, 1, 1, true);
      blk.conv = conv(hw, width, width, 3, stride, true);  // v1.5: the stride is in the 3x3
      blk.expand = conv(hw / stride, width, out, 1, 1, false);
      if (b == 0) blk.downsample = conv(hw, in, out, 1, stride, false);
      blocks_.push_back(std::move(blk));
      hw /= stride;
      in = out;
    }
  fc_ = std::make_unique<cnn::Linear>(w.he_normal(Shape{2048, 1000}, 2048), w.bias(1000));
}

StatusOr<Tensor> ResNet50::operator()(const Tensor& input) {
  TS_ASSIGN_OR_RETURN(Tensor x, (*stem_)(input));
  Pool2dParams pool;
  pool.batch_size = options_.batch;
  pool.input_height = pool.input_width = options_.image_size / 2;
  pool.channels = 64;
  pool.kernel_size = {3, 3};
  pool.stride = {2, 2};
  pool.padding = {1, 1};
  TS_ASSIGN_OR_RETURN(x, max_pool2d(x, pool));
  for (Bottleneck& b : blocks_) {
    TS_ASSIGN_OR_RETURN(Tensor y, (*b.reduce)(x));
    TS_ASSIGN_OR_RETURN(y, (*b.conv)(y));
    TS_ASSIGN_OR_RETURN(y, (*b.expand)(y));
    Tensor identity = x;
    if (b.downsample) {
      TS_ASSIGN_OR_RETURN(identity, (*b.downsample)(x));
    }
    TS_ASSIGN_OR_RETURN(x, add(y, identity, {.activation = UnaryWithParam{UnaryOpType::RELU}}));
  }
  const uint32_t hw = options_.image_size / 32;
  TS_ASSIGN_OR_RETURN(x, reshape(x, Shape{options_.batch, hw, hw, 2048}));
  TS_ASSIGN_OR_RETURN(x, global_avg_pool2d(x));
  TS_ASSIGN_OR_RETURN(x, reshape(x, Shape{options_.batch, 2048}));
  return (*fc_)(x);
}

uint64_t ResNet50::flops() const {
  uint64_t f = stem_->params().flops() + 2ull * options_.batch * 2048 * 1000;
  for (const Bottleneck& b : blocks_) {
    f += b.reduce->params().flops() + b.conv->params().flops() + b.expand->params().flops();
    if (b.downsample) f += b.downsample->params().flops();
  }
  return f;
}

}  // namespace tessera::models
