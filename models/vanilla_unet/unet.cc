#include "vanilla_unet/unet.h"

#include "common/random_weights.h"
#include "tessera/ops/manipulation.h"
#include "tessera/ops/pool2d.h"

namespace tessera::models {

VanillaUNet::VanillaUNet(const UNetOptions& o) : options_(o) {
  WeightSource w(o.seed);
  const Conv2dConfig cfg{.weights_dtype = o.weights_dtype};
  auto conv = [&](uint32_t h, uint32_t wd, uint32_t cin, uint32_t cout, uint32_t k, bool relu) {
    Conv2dParams p;
    p.batch_size = o.batch;
    p.input_height = h;
    p.input_width = wd;
    p.in_channels = cin;
    p.out_channels = cout;
    p.kernel_size = {k, k};
    p.with_padding(k / 2, k / 2);
    if (relu) p.activation = {UnaryOpType::RELU};
    return std::make_unique<cnn::DirectConv2d>(p, w.he_normal(Shape{cout, cin, k, k}, cin * k * k), w.bias(cout), cfg);
  };
  auto block = [&](uint32_t h, uint32_t wd, uint32_t cin, uint32_t cout) {
    return Block{conv(h, wd, cin, cout, 3, true), conv(h, wd, cout, cout, 3, true)};
  };
  const uint32_t f = 32;
  uint32_t h = o.height, wd = o.width, cin = 3;
  for (int i = 0; i < 4; ++i) {
    enc_[i] = block(h, wd, cin, f << i);
    cin = f << i;
    h /= 2, wd /= 2;
  }
  bottleneck_ = block(h, wd, f * 8, f * 16);
  for (int i = 3; i >= 0; --i) {
    ConvTranspose2dParams p;
    p.batch_size = o.batch;
    p.input_height = h;
    p.input_width = wd;
    p.in_channels = f << (i + 1);
    p.out_channels = f << i;
    up_[i] = std::make_unique<cnn::ConvTranspose2d>(
        p, w.he_normal(Shape{p.in_channels, p.out_channels, 2, 2}, p.in_channels), w.bias(p.out_channels), cfg);
    h *= 2, wd *= 2;
    dec_[i] = block(h, wd, f << (i + 1), f << i);
  }
  final_ = conv(h, wd, f, 1, 1, false);
}

StatusOr<Tensor> VanillaUNet::operator()(const Tensor& input) {
  Tensor skips[4];
  Tensor x = input;
  uint32_t h = options_.height, wd = options_.width;
  for (int i = 0; i < 4; ++i) {
    TS_ASSIGN_OR_RETURN(x, (*enc_[i].a)(x));
    TS_ASSIGN_OR_RETURN(x, (*enc_[i].b)(x));
    skips[i] = x;
    Pool2dParams pool;
    pool.batch_size = options_.batch;
    pool.input_height = h;
    pool.input_width = wd;
    pool.channels = 32u << i;
    TS_ASSIGN_OR_RETURN(x, max_pool2d(x, pool));
    h /= 2, wd /= 2;
  }
  TS_ASSIGN_OR_RETURN(x, (*bottleneck_.a)(x));
  TS_ASSIGN_OR_RETURN(x, (*bottleneck_.b)(x));
  for (int i = 3; i >= 0; --i) {
    TS_ASSIGN_OR_RETURN(x, (*up_[i])(x));
    const Tensor pair[] = {x, skips[i]};
    TS_ASSIGN_OR_RETURN(x, concat(pair, 3));
    TS_ASSIGN_OR_RETURN(x, (*dec_[i].a)(x));
    TS_ASSIGN_OR_RETURN(x, (*dec_[i].b)(x));
  }
  return (*final_)(x);
}

uint64_t VanillaUNet::flops() const {
  uint64_t f = final_->params().flops() + bottleneck_.a->params().flops() + bottleneck_.b->params().flops();
  for (int i = 0; i < 4; ++i)
    f += enc_[i].a->params().flops() + enc_[i].b->params().flops() + dec_[i].a->params().flops() +
         dec_[i].b->params().flops() + up_[i]->params().flops();
  return f;
}

}  // namespace tessera::models
