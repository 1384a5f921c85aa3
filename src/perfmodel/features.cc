#include "tessera/perfmodel/features.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace tessera::perfmodel {
namespace {

constexpr float kMissing = std::numeric_limits<float>::quiet_NaN();

double elem_bytes(DataType t) {
  return is_block_float(t) ? tile_size_bytes(t) / 1024.0 : static_cast<double>(element_size(t));
}
double bytes_of(const TensorQuery& t) { return static_cast<double>(t.volume()) * elem_bytes(t.dtype); }
DataType word_dtype(const OpQuery& q, std::string_view arg) {
  return parse_dtype_word(q.word(arg)).value_or(q.inputs[0].dtype);
}

// Words as categories: dtypes by their enum value, other words by their index here (+16).
constexpr std::string_view kWords[] = {
    "identity", "relu", "relu6", "silu", "gelu", "sigmoid", "tanh", "hardswish", "hardsigmoid", "leaky_relu", "mish",
    "elu", "gelu_tanh", "nearest", "bilinear", "LoFi", "HiFi2", "HiFi3", "HiFi4",
    // conv kernels (src/ops/conv/select.h's names)
    "auto", "depthwise", "winograd_avx2", "direct_avx2", "patch_transpose_avx2", "narrow_avx512", "onednn_winograd",
    "direct_avx512", "patch_transpose_avx512", "rows3x3_avx512", "amx_patch_1x1", "patch_transpose_matmul",
    "onednn_padded_cout", "onednn_f32_rows", "onednn",
    // (appended: a word's code is its index, which trained models hold)
    "softplus", "softsign", "celu", "thresholded_relu"};
float word_code(const std::string& w) {
  if (auto dt = parse_dtype_word(w)) return static_cast<float>(*dt);
  for (size_t i = 0; i < std::size(kWords); ++i)
    if (kWords[i] == w) return static_cast<float>(16 + i);
  return -1.0f;
}

struct Gemm {  // the matrix product a conv or matmul is
  double m = 0, k = 0, n = 0;
};

uint32_t spatial_out(double in, double pad_total, double kernel, double stride, double dilation, bool ceil_mode) {
  const double span = dilation * (kernel - 1) + 1;
  const double num = in + pad_total - span;
  if (num < 0 || stride < 1) return 0;
  return static_cast<uint32_t>((ceil_mode ? std::ceil(num / stride) : std::floor(num / stride)) + 1);
}

// How the device stores an interleaved tensor: pages of one row (ROW_MAJOR)
// or one 32x32 tile (TILE, the last two dims padded to 32). Spatial ops' (N,
// C, H, W) inputs are stored as NHWC rows of C values.
struct Storage {
  double pages = 0, page_bytes = 0;
};
Storage storage(const TensorQuery& t, bool spatial) {
  const auto& s = t.logical_shape;
  const double width = spatial ? s[1] : s.back();
  const double height = static_cast<double>(t.volume()) / width;
  if (t.layout == Layout::ROW_MAJOR) return {height, width * elem_bytes(t.dtype)};
  return {std::ceil(height / 32) * std::ceil(width / 32), static_cast<double>(tile_size_bytes(t.dtype))};
}

Gemm gemm_of(const OpQuery& q) {
  const auto& s = q.inputs[0].logical_shape;
  if (q.op == "conv2d") {
    const double oh = spatial_out(s[2], q.num("padding", 0) + q.num("padding", 1), q.num("kernel_size", 0),
                                  q.num("stride", 0), q.num("dilation", 0), false);
    const double ow = spatial_out(s[3], q.num("padding", 2) + q.num("padding", 3), q.num("kernel_size", 1),
                                  q.num("stride", 1), q.num("dilation", 1), false);
    return {s[0] * oh * ow, s[1] / std::max(1.0, q.num("groups")) * q.num("kernel_size", 0) * q.num("kernel_size", 1),
            q.num("out_channels")};
  }
  if (q.op == "conv_transpose2d") {  // each input pixel times (cin / groups) x (cout x kh x kw) weights
    return {static_cast<double>(s[0]) * s[2] * s[3], s[1] / std::max(1.0, q.num("groups")),
            q.num("out_channels") * q.num("kernel_size", 0) * q.num("kernel_size", 1)};
  }
  const double k = s.back();
  double m = static_cast<double>(q.inputs[0].volume()) / k;
  if (q.op == "linear") return {m, k, q.num("out_features")};
  if (q.op == "matmul" && q.inputs.size() == 2) {
    const auto& b = q.inputs[1].logical_shape;
    const double n = q.num("transpose_b") != 0 ? b[b.size() - 2] : b.back();
    return {m, k, n};
  }
  return {};
}

}  // namespace

OpCost op_cost(const OpQuery& q) {
  OpCost c;
  const TensorQuery& in = q.inputs[0];
  const auto& s = in.logical_shape;
  for (const TensorQuery& t : q.inputs) c.bytes_read += bytes_of(t);
  const DataType out_dtype = q.args.count("dtype") ? word_dtype(q, "dtype") : in.dtype;
  double out = static_cast<double>(in.volume());
  const std::string_view family = find_op(q.op) ? find_op(q.op)->family : "";
  if (q.op == "conv2d" || q.op == "conv_transpose2d" || q.op == "linear" || q.op == "matmul") {
    const Gemm g = gemm_of(q);
    c.flops = 2 * g.m * g.k * g.n;
    out = g.m * g.n;
    if (q.op == "conv_transpose2d") {  // (in - 1) * stride - 2 * pad + dilation * (kernel - 1) + output_padding + 1
      auto side = [&](double in, int i) {
        return std::max(0.0, (in - 1) * q.num("stride", i) - 2 * q.num("padding", i) +
                                 q.num("dilation", i) * (q.num("kernel_size", i) - 1) + q.num("output_padding", i) + 1);
      };
      out = s[0] * side(s[2], 0) * side(s[3], 1) * q.num("out_channels");
    }
    if (q.op == "matmul")
      c.bytes_read = bytes_of(q.inputs[0]) + bytes_of(q.inputs[1]);
    else
      c.bytes_read += g.k * g.n * elem_bytes(word_dtype(q, "weights_dtype"));
    if (q.num("residual") != 0) c.bytes_read += out * elem_bytes(out_dtype);
  } else if (q.op == "max_pool2d" || q.op == "avg_pool2d") {
    const bool ceil_mode = q.num("ceil_mode") != 0;
    const double oh = spatial_out(s[2], 2 * q.num("padding", 0), q.num("kernel_size", 0), q.num("stride", 0),
                                  q.num("dilation", 0), ceil_mode);
    const double ow = spatial_out(s[3], 2 * q.num("padding", 1), q.num("kernel_size", 1), q.num("stride", 1),
                                  q.num("dilation", 1), ceil_mode);
    out = s[0] * s[1] * oh * ow;
    c.flops = out * q.num("kernel_size", 0) * q.num("kernel_size", 1);
  } else if (q.op == "global_avg_pool2d") {
    out = s[0] * s[1];
    c.flops = static_cast<double>(in.volume());
  } else if (q.op == "upsample") {
    out = s[0] * s[1] * std::floor(s[2] * q.num("scale_factor", 0)) * std::floor(s[3] * q.num("scale_factor", 1));
    c.flops = q.word("mode") == "bilinear" ? 4 * out : 0;
  } else if (q.op == "concat") {
    out = 0;
    for (const TensorQuery& t : q.inputs) out += static_cast<double>(t.volume());
  } else if (family == "eltwise_binary") {
    out = static_cast<double>(std::max(q.inputs[0].volume(), q.inputs[1].volume()));
    c.flops = out;
  } else if (family == "eltwise_unary" || family == "norm") {
    c.flops = (family == "norm" ? 5.0 : 1.0) * out;
  }
  c.output_elements = out;
  c.bytes_written = out * elem_bytes(out_dtype);
  return c;
}

double roofline_floor_ns(const OpQuery& q, const OpCost& c, const MachineFingerprint& m) {
  const bool bf16 = q.inputs[0].dtype != DataType::FLOAT32 ||
                    (q.args.count("weights_dtype") && word_dtype(q, "weights_dtype") != DataType::FLOAT32);
  const double peak = std::max(1.0, bf16 ? std::max(m.bf16_gflops, m.fma_gflops) : m.fma_gflops);
  return std::max({c.flops / peak, c.bytes() / std::max(1.0, m.cache_gbps), 1.0});
}

std::vector<std::string> feature_names(std::string_view family) {
  std::vector<std::string> f = {"op_index",
                                "log2_flops",
                                "log2_bytes",
                                "log2_intensity",
                                "log2_roofline_dram_ns",
                                "log2_floor_ns",
                                "working_set_over_l2",
                                "working_set_over_l3",
                                "workers",
                                "log2_tiles",
                                "tiles_per_worker",
                                "log2_output_elements",
                                "gemm_m",
                                "gemm_k",
                                "gemm_n",
                                "gemm_n_mod16",
                                "gemm_k_mod16",
                                "num_inputs"};
  for (int i = 0; i < 2; ++i)
    for (const char* x : {"rank", "d0", "d1", "d2", "d3", "log2_volume", "dtype", "layout", "buffer", "log2_pages",
                          "log2_page_bytes", "log2_stored_bytes", "channels_mod16"})
      f.push_back(fmt::format("in{}_{}", i, x));
  std::vector<std::string_view> seen;
  for (const OpSpec& op : op_specs()) {
    if (op.family != family) continue;
    for (const ArgSpec& a : op.args) {
      if (std::find(seen.begin(), seen.end(), a.name) != seen.end()) continue;
      seen.push_back(a.name);
      const int n = a.kind == ArgKind::kNumbers ? (a.count ? a.count : 8) : 1;
      for (int i = 0; i < n; ++i) f.push_back(n == 1 ? std::string(a.name) : fmt::format("{}_{}", a.name, i));
    }
  }
  return f;
}

double append_features(const OpQuery& q, const MachineFingerprint& m, std::vector<float>& out) {
  const OpSpec* spec = find_op(q.op);
  const OpCost c = op_cost(q);
  const double floor_ns = roofline_floor_ns(q, c, m);
  auto lg = [](double v) { return static_cast<float>(std::log2(std::max(v, 1.0))); };
  int index = 0;
  for (const OpSpec& op : op_specs()) {
    if (&op == spec) break;
    if (op.family == spec->family) ++index;
  }
  const double workers = q.workers ? q.workers : std::max(1u, m.workers);
  const double ws = c.bytes();
  const double tiles = std::ceil(c.output_elements / 1024.0);
  const Gemm g = gemm_of(q);
  auto gemm = [&](double v) { return g.n > 0 ? static_cast<float>(v) : kMissing; };
  out.insert(
      out.end(),
      {static_cast<float>(index), lg(c.flops), lg(c.bytes()), static_cast<float>(c.flops / std::max(ws, 1.0)),
       lg(c.bytes() / std::max(1.0, m.dram_gbps)), lg(floor_ns),
       static_cast<float>(ws / std::max<double>(1.0, static_cast<double>(m.l2_bytes) * workers)),
       static_cast<float>(ws / std::max<double>(1.0, static_cast<double>(m.l3_bytes))), static_cast<float>(workers),
       lg(tiles), static_cast<float>(tiles / workers), lg(c.output_elements), gemm(g.m), gemm(g.k), gemm(g.n),
       gemm(std::fmod(g.n, 16)), gemm(std::fmod(g.k, 16)), static_cast<float>(q.inputs.size())});
  for (size_t i = 0; i < 2; ++i) {
    if (i >= q.inputs.size()) {
      out.insert(out.end(), 13, kMissing);
      continue;
    }
    const TensorQuery& t = q.inputs[i];
    const size_t r = t.logical_shape.size();
    out.push_back(static_cast<float>(r));
    for (size_t d = 0; d < 4; ++d)  // the last four dims, right-aligned (N, C, H, W for 4-d)
      out.push_back(d + r >= 4 ? static_cast<float>(t.logical_shape[d + r - 4]) : 1.0f);
    const Storage st = storage(t, spec->spatial);
    out.insert(out.end(),
               {lg(static_cast<double>(t.volume())), static_cast<float>(t.dtype), static_cast<float>(t.layout),
                static_cast<float>(t.buffer_type), lg(st.pages), lg(st.page_bytes), lg(st.pages * st.page_bytes),
                static_cast<float>((spec->spatial ? t.logical_shape[1] : t.logical_shape.back()) % 16)});
  }
  std::vector<std::string_view> seen;
  for (const OpSpec& op : op_specs()) {
    if (op.family != spec->family) continue;
    for (const ArgSpec& a : op.args) {
      if (std::find(seen.begin(), seen.end(), a.name) != seen.end()) continue;
      seen.push_back(a.name);
      const int n = a.kind == ArgKind::kNumbers ? (a.count ? a.count : 8) : 1;
      auto it = q.args.find(a.name);
      for (int i = 0; i < n; ++i) {
        if (it == q.args.end())
          out.push_back(kMissing);
        else if (a.kind == ArgKind::kWord)
          out.push_back(word_code(it->second.word));
        else
          out.push_back(static_cast<size_t>(i) < it->second.numbers.size()
                            ? static_cast<float>(it->second.numbers[static_cast<size_t>(i)])
                            : kMissing);
      }
    }
  }
  return floor_ns;
}

}  // namespace tessera::perfmodel
