#include "host_spatial.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "tessera/graph/shape_inference.h"

namespace tessera::graph::host {
namespace {

using Dims = std::vector<int64_t>;

HostTensor zeros(Dims dims) {
  return HostTensor::floats(dims, std::vector<float>(static_cast<size_t>(dims_volume(dims)), 0.0f));
}

// Row-major coordinates of `flat` in `dims`.
void unflatten(int64_t flat, const Dims& dims, Dims& coord) {
  coord.resize(dims.size());
  for (size_t k = dims.size(); k-- > 0;) {
    coord[k] = flat % dims[k];
    flat /= dims[k];
  }
}

Status need(const Node& n, Ins ins, size_t k) {
  if (k >= ins.size() || !ins[k]) return invalid_argument_error("{}: input {} is missing", n.label(), k);
  return ok_status();
}

}  // namespace

StatusOr<std::vector<HostTensor>> conv(const Node& n, Ins ins) {
  TS_RETURN_IF_ERROR(need(n, ins, 0));
  TS_RETURN_IF_ERROR(need(n, ins, 1));
  const HostTensor &x = *ins[0], &w = *ins[1];
  const HostTensor* b = ins.size() > 2 ? ins[2] : nullptr;
  if (x.dims.size() < 3 || w.dims.size() != x.dims.size())
    return invalid_argument_error("{}: input {} and weight {} ranks", n.label(), dims_to_string(x.dims),
                                  dims_to_string(w.dims));
  TS_ASSIGN_OR_RETURN(SpatialGeometry geo, spatial_geometry(n, x.dims, w.dims));
  const size_t s = x.dims.size() - 2;
  const int64_t group = n.attr_int("group", 1), N = x.dims[0], C = x.dims[1], M = w.dims[0];
  if (group <= 0 || C % group || M % group || w.dims[1] * group != C)
    return invalid_argument_error("{}: channels {} / {} do not match group {}", n.label(), C, M, group);
  Dims out{N, M}, in_sp(x.dims.begin() + 2, x.dims.end()), k_sp(w.dims.begin() + 2, w.dims.end());
  for (size_t i = 0; i < s; ++i)
    out.push_back((in_sp[i] + geo.pads[i] + geo.pads[i + s] - ((k_sp[i] - 1) * geo.dilations[i] + 1)) / geo.strides[i] +
                  1);
  Dims out_sp(out.begin() + 2, out.end());
  HostTensor y = zeros(out);
  const int64_t cg = C / group, mg = M / group, osz = dims_volume(out_sp), isz = dims_volume(in_sp),
                ksz = dims_volume(k_sp);
  Dims oc, kc;
  for (int64_t nn = 0; nn < N; ++nn)
    for (int64_t m = 0; m < M; ++m) {
      const int64_t g = m / mg;
      for (int64_t o = 0; o < osz; ++o) {
        unflatten(o, out_sp, oc);
        double acc = b ? b->at(static_cast<size_t>(m)) : 0.0;
        for (int64_t k = 0; k < ksz; ++k) {
          unflatten(k, k_sp, kc);
          int64_t idx = 0;
          bool inside = true;
          for (size_t i = 0; i < s && inside; ++i) {
            const int64_t p = oc[i] * geo.strides[i] - geo.pads[i] + kc[i] * geo.dilations[i];
            inside = p >= 0 && p < in_sp[i];
            idx = idx * in_sp[i] + p;
          }
          if (!inside) continue;
          for (int64_t c = 0; c < cg; ++c)
            acc += x.at(static_cast<size_t>((nn * C + g * cg + c) * isz + idx)) *
                   w.at(static_cast<size_t>((m * cg + c) * ksz + k));
        }
        y.f[static_cast<size_t>((nn * M + m) * osz + o)] = static_cast<float>(acc);
      }
    }
  return std::vector<HostTensor>{std::move(y)};
}

StatusOr<std::vector<HostTensor>> conv_transpose(const Node& n, Ins ins) {
  TS_RETURN_IF_ERROR(need(n, ins, 0));
  TS_RETURN_IF_ERROR(need(n, ins, 1));
  const HostTensor &x = *ins[0], &w = *ins[1];
  const HostTensor* b = ins.size() > 2 ? ins[2] : nullptr;
  if (x.dims.size() < 3 || w.dims.size() != x.dims.size())
    return invalid_argument_error("{}: input {} and weight {} ranks", n.label(), dims_to_string(x.dims),
                                  dims_to_string(w.dims));
  TS_ASSIGN_OR_RETURN(SpatialGeometry geo, spatial_geometry(n, x.dims, w.dims));
  const size_t s = x.dims.size() - 2;
  const int64_t group = n.attr_int("group", 1), N = x.dims[0], C = x.dims[1];
  if (group <= 0 || C % group || w.dims[0] != C)
    return invalid_argument_error("{}: {} input channels, weight {}, group {}", n.label(), C, dims_to_string(w.dims),
                                  group);
  const int64_t mg = w.dims[1], M = mg * group, cg = C / group;
  const Dims op = n.attr_ints("output_padding", Dims(s, 0));
  Dims out{N, M}, in_sp(x.dims.begin() + 2, x.dims.end()), k_sp(w.dims.begin() + 2, w.dims.end());
  for (size_t i = 0; i < s; ++i)
    out.push_back(geo.strides[i] * (in_sp[i] - 1) + (i < op.size() ? op[i] : 0) + (k_sp[i] - 1) * geo.dilations[i] + 1 -
                  geo.pads[i] - geo.pads[i + s]);
  Dims out_sp(out.begin() + 2, out.end());
  std::vector<double> acc(static_cast<size_t>(dims_volume(out)), 0.0);
  const int64_t osz = dims_volume(out_sp), isz = dims_volume(in_sp), ksz = dims_volume(k_sp);
  Dims ic, kc;
  for (int64_t nn = 0; nn < N; ++nn)
    for (int64_t c = 0; c < C; ++c) {
      const int64_t g = c / cg;
      for (int64_t i = 0; i < isz; ++i) {
        unflatten(i, in_sp, ic);
        const double xv = x.at(static_cast<size_t>((nn * C + c) * isz + i));
        for (int64_t k = 0; k < ksz; ++k) {
          unflatten(k, k_sp, kc);
          int64_t idx = 0;
          bool inside = true;
          for (size_t d = 0; d < s && inside; ++d) {
            const int64_t p = ic[d] * geo.strides[d] - geo.pads[d] + kc[d] * geo.dilations[d];
            inside = p >= 0 && p < out_sp[d];
            idx = idx * out_sp[d] + p;
          }
          if (!inside) continue;
          for (int64_t j = 0; j < mg; ++j)
            acc[static_cast<size_t>((nn * M + g * mg + j) * osz + idx)] +=
                xv * w.at(static_cast<size_t>((c * mg + j) * ksz + k));
        }
      }
    }
  HostTensor y = zeros(out);
  for (size_t k = 0; k < acc.size(); ++k) {
    const int64_t m = (static_cast<int64_t>(k) / osz) % M;
    y.f[k] = static_cast<float>(acc[k] + (b ? b->at(static_cast<size_t>(m)) : 0.0));
  }
  return std::vector<HostTensor>{std::move(y)};
}

StatusOr<std::vector<HostTensor>> pool(const Node& n, Ins ins) {
  TS_RETURN_IF_ERROR(need(n, ins, 0));
  const HostTensor& x = *ins[0];
  if (x.dims.size() < 3) return invalid_argument_error("{}: input of rank {}", n.label(), x.dims.size());
  const size_t s = x.dims.size() - 2;
  const std::string& op = n.op_type;
  const bool global = op == "GlobalAveragePool" || op == "GlobalMaxPool";
  const bool is_max = op == "MaxPool" || op == "GlobalMaxPool", is_lp = op == "LpPool";
  Dims in_sp(x.dims.begin() + 2, x.dims.end());
  SpatialGeometry geo;
  if (global) {
    geo.kernel = in_sp, geo.strides.assign(s, 1), geo.dilations.assign(s, 1), geo.pads.assign(2 * s, 0);
  } else {
    TS_ASSIGN_OR_RETURN(geo, spatial_geometry(n, x.dims, {}));
  }
  const bool ceil_mode = n.attr_int("ceil_mode", 0) != 0, include_pad = n.attr_int("count_include_pad", 0) != 0;
  const std::string auto_pad = n.attr_string("auto_pad", "NOTSET");
  const double p = static_cast<double>(n.attr_int("p", 2));
  // Indices: row-major over the spatial dims, or column-major (storage_order 1).
  const bool column_major = n.attr_int("storage_order", 0) != 0;
  Dims out{x.dims[0], x.dims[1]};
  for (size_t i = 0; i < s; ++i) {
    const int64_t eff = (geo.kernel[i] - 1) * geo.dilations[i] + 1;
    int64_t o;
    if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
      o = (in_sp[i] + geo.strides[i] - 1) / geo.strides[i];
    } else {
      const int64_t span = in_sp[i] + geo.pads[i] + geo.pads[i + s] - eff;
      o = (ceil_mode ? (span + geo.strides[i] - 1) / geo.strides[i] : span / geo.strides[i]) + 1;
      if (ceil_mode && (o - 1) * geo.strides[i] >= in_sp[i] + geo.pads[i]) --o;
    }
    out.push_back(o);
  }
  Dims out_sp(out.begin() + 2, out.end());
  HostTensor y = zeros(out);
  HostTensor idx_out = HostTensor::ints(out, std::vector<int64_t>(static_cast<size_t>(dims_volume(out)), 0));
  const int64_t planes = x.dims[0] * x.dims[1], osz = dims_volume(out_sp), isz = dims_volume(in_sp),
                ksz = dims_volume(geo.kernel);
  Dims oc, kc;
  for (int64_t pl = 0; pl < planes; ++pl)
    for (int64_t o = 0; o < osz; ++o) {
      unflatten(o, out_sp, oc);
      double acc = is_max ? -std::numeric_limits<double>::infinity() : 0.0;
      int64_t best = -1, count = 0, padded_count = 0;
      for (int64_t k = 0; k < ksz; ++k) {
        unflatten(k, geo.kernel, kc);
        int64_t idx = 0, cidx = 0;
        bool inside = true, in_padded = true;
        for (size_t i = 0; i < s; ++i) {
          const int64_t q = oc[i] * geo.strides[i] - geo.pads[i] + kc[i] * geo.dilations[i];
          inside = inside && q >= 0 && q < in_sp[i];
          in_padded = in_padded && q >= -geo.pads[i] && q < in_sp[i] + geo.pads[i + s];
          idx = idx * in_sp[i] + q;
        }
        for (size_t i = s; i-- > 0;) {
          const int64_t q = oc[i] * geo.strides[i] - geo.pads[i] + kc[i] * geo.dilations[i];
          cidx = cidx * in_sp[i] + q;
        }
        if (in_padded) ++padded_count;
        if (!inside) continue;
        ++count;
        const double v = x.at(static_cast<size_t>(pl * isz + idx));
        if (is_max) {
          // (The first NaN wins, as in PyTorch's max_pool2d: NaN propagates.)
          if (best < 0 || (std::isnan(v) && !std::isnan(acc)) || v > acc)
            acc = v, best = pl * isz + (column_major ? cidx : idx);
        } else if (is_lp) {
          acc += std::pow(std::fabs(v), p);
        } else {
          acc += v;
        }
      }
      double r = acc;
      if (is_lp)
        r = std::pow(acc, 1.0 / p);
      else if (!is_max)
        r = acc / static_cast<double>(std::max<int64_t>(include_pad ? padded_count : count, 1));
      y.f[static_cast<size_t>(pl * osz + o)] = static_cast<float>(r);
      idx_out.i[static_cast<size_t>(pl * osz + o)] = best;
    }
  std::vector<HostTensor> r;
  r.push_back(std::move(y));
  if (n.outputs.size() > 1) r.push_back(std::move(idx_out));
  return r;
}

namespace {

// Source coordinate of output coordinate `o` on one dim.
// ONNX maps with the unrounded resized length in * scale, not the output size.
// (tf_crop_and_resize maps with the output length.)
double source_coord(const std::string& ctm, int64_t o, int64_t in, int64_t out, double scale, double roi_start,
                    double roi_end) {
  const double x = static_cast<double>(o), len = static_cast<double>(in) * scale;
  if (ctm == "half_pixel") return (x + 0.5) / scale - 0.5;
  if (ctm == "pytorch_half_pixel") return len > 1 ? (x + 0.5) / scale - 0.5 : 0.0;
  if (ctm == "align_corners") return len <= 1 ? 0.0 : x * static_cast<double>(in - 1) / (len - 1);
  if (ctm == "tf_half_pixel_for_nn") return (x + 0.5) / scale;
  if (ctm == "tf_crop_and_resize") {
    const auto crop_len = static_cast<double>(out);
    return crop_len > 1 ? roi_start * static_cast<double>(in - 1) +
                              x * (roi_end - roi_start) * static_cast<double>(in - 1) / (crop_len - 1)
                        : 0.5 * (roi_start + roi_end) * static_cast<double>(in - 1);
  }
  return x / scale;  // asymmetric
}

double cubic_weight(double t, double a) {
  t = std::fabs(t);
  if (t <= 1) return ((a + 2) * t - (a + 3)) * t * t + 1;
  if (t < 2) return ((a * t - 5 * a) * t + 8 * a) * t - 4 * a;
  return 0;
}

}  // namespace

StatusOr<std::vector<HostTensor>> resize(const Node& n, Ins ins, int opset) {
  TS_RETURN_IF_ERROR(need(n, ins, 0));
  const HostTensor& x = *ins[0];
  const size_t r = x.dims.size();
  const bool legacy = n.op_type == "Upsample" || opset < 11;
  std::vector<double> scales, roi;
  Dims out(r);
  const HostTensor* scales_t = nullptr;
  const HostTensor* sizes_t = nullptr;
  if (n.op_type == "Upsample" && opset < 9) {
    for (float f : n.attr_floats("scales")) scales.push_back(f);
  } else if (legacy) {
    TS_RETURN_IF_ERROR(need(n, ins, 1));
    scales_t = ins[1];
  } else {
    if (ins.size() > 1 && ins[1]) roi.assign(ins[1]->f.begin(), ins[1]->f.end());
    if (ins.size() > 2 && ins[2] && ins[2]->volume() > 0) scales_t = ins[2];
    if (ins.size() > 3 && ins[3] && ins[3]->volume() > 0) sizes_t = ins[3];
  }
  if (scales_t)
    for (size_t k = 0; k < scales_t->size(); ++k) scales.push_back(scales_t->at(k));
  if (sizes_t) {
    if (sizes_t->size() != r) return invalid_argument_error("{}: {} sizes for rank {}", n.label(), sizes_t->size(), r);
    for (size_t k = 0; k < r; ++k) {
      out[k] = static_cast<int64_t>(sizes_t->at(k));
      scales.push_back(static_cast<double>(out[k]) / static_cast<double>(x.dims[k]));
    }
  } else {
    if (scales.size() != r) return invalid_argument_error("{}: {} scales for rank {}", n.label(), scales.size(), r);
    for (size_t k = 0; k < r; ++k)
      out[k] = static_cast<int64_t>(std::floor(static_cast<double>(x.dims[k]) * scales[k] + 1e-9));
  }
  for (size_t k = 0; k < r; ++k)
    if (out[k] <= 0 || !(scales[k] > 0)) return invalid_argument_error("{}: output dim {} is {}", n.label(), k, out[k]);
  std::string mode = n.attr_string("mode", "nearest");
  if (mode == "bilinear" || mode == "trilinear") mode = "linear";
  const std::string ctm = legacy ? "asymmetric" : n.attr_string("coordinate_transformation_mode", "half_pixel");
  const std::string nearest = legacy ? "floor" : n.attr_string("nearest_mode", "round_prefer_floor");
  const double a = n.attr_float("cubic_coeff_a", -0.75f), extrapolation = n.attr_float("extrapolation_value", 0.0f);
  const bool exclude_outside = n.attr_int("exclude_outside", 0) != 0;
  if (mode != "nearest" && mode != "linear" && mode != "cubic")
    return invalid_argument_error("{}: attribute 'mode' = '{}'", n.label(), mode);
  if (ctm == "tf_crop_and_resize" && roi.size() != 2 * r)
    return invalid_argument_error("{}: tf_crop_and_resize needs a roi of {} values", n.label(), 2 * r);
  // Per dim and output coordinate: the (index, weight) taps, or none when outside (extrapolate).
  struct Tap {
    int64_t index;
    double weight;
  };
  std::vector<std::vector<std::vector<Tap>>> taps(r);
  for (size_t d = 0; d < r; ++d) {
    const int64_t in = x.dims[d];
    taps[d].resize(static_cast<size_t>(out[d]));
    for (int64_t o = 0; o < out[d]; ++o) {
      const double src =
          source_coord(ctm, o, in, out[d], scales[d], roi.empty() ? 0 : roi[d], roi.empty() ? 1 : roi[d + r]);
      auto& t = taps[d][static_cast<size_t>(o)];
      if (ctm == "tf_crop_and_resize" && (src < 0 || src > static_cast<double>(in - 1))) continue;
      if (mode == "nearest") {
        double i;
        if (nearest == "floor")
          i = std::floor(src);
        else if (nearest == "ceil")
          i = std::ceil(src);
        else if (nearest == "round_prefer_ceil")
          i = std::floor(src + 0.5);
        else
          i = (src - std::floor(src) == 0.5) ? std::floor(src) : std::round(src);  // round_prefer_floor
        t.push_back({std::clamp<int64_t>(static_cast<int64_t>(i), 0, in - 1), 1.0});
        continue;
      }
      const auto base = static_cast<int64_t>(std::floor(src));
      const double f = src - static_cast<double>(base);
      std::vector<Tap> raw;
      if (mode == "linear") {
        raw = {{base, 1 - f}, {base + 1, f}};
      } else {
        for (int64_t k = -1; k <= 2; ++k) raw.push_back({base + k, cubic_weight(f - static_cast<double>(k), a)});
      }
      double sum = 0;
      for (auto& tap : raw) {
        if (tap.index < 0 || tap.index >= in) {
          if (exclude_outside) continue;
          tap.index = std::clamp<int64_t>(tap.index, 0, in - 1);
        }
        sum += tap.weight;
        t.push_back(tap);
      }
      if (exclude_outside && sum != 0)
        for (auto& tap : t) tap.weight /= sum;
    }
  }
  HostTensor y = zeros(out);
  const auto strides = [&] {
    Dims st(r, 1);
    for (size_t k = r; k-- > 1;) st[k - 1] = st[k] * x.dims[k];
    return st;
  }();
  Dims oc, pick(r, 0);
  for (int64_t o = 0; o < dims_volume(out); ++o) {
    unflatten(o, out, oc);
    bool outside = false;
    for (size_t d = 0; d < r; ++d) outside = outside || taps[d][static_cast<size_t>(oc[d])].empty();
    if (outside) {
      y.f[static_cast<size_t>(o)] = static_cast<float>(extrapolation);
      continue;
    }
    // Sum over the cartesian product of the taps of every dim.
    double acc = 0;
    std::fill(pick.begin(), pick.end(), 0);
    while (true) {
      double w = 1;
      int64_t idx = 0;
      for (size_t d = 0; d < r; ++d) {
        const Tap& t = taps[d][static_cast<size_t>(oc[d])][static_cast<size_t>(pick[d])];
        w *= t.weight;
        idx += t.index * strides[d];
      }
      acc += w * x.at(static_cast<size_t>(idx));
      size_t d = r;
      while (d-- > 0) {
        if (++pick[d] < static_cast<int64_t>(taps[d][static_cast<size_t>(oc[d])].size())) break;
        pick[d] = 0;
      }
      if (d == static_cast<size_t>(-1)) break;
    }
    y.f[static_cast<size_t>(o)] = static_cast<float>(acc);
  }
  return std::vector<HostTensor>{std::move(y)};
}

namespace {

// A sample coordinate folded back into [lo, hi] / 2 as a mirror would (PyTorch's reflect_coordinates).
double reflect(double x, double twice_lo, double twice_hi) {
  if (twice_lo == twice_hi) return 0;
  const double lo = twice_lo / 2, span = (twice_hi - twice_lo) / 2;
  x = std::fabs(x - lo);
  const double extra = std::fmod(x, span), flips = std::floor(x / span);
  return std::fmod(flips, 2) == 0 ? extra + lo : span - extra + lo;
}

}  // namespace

// GridSample (opset 16) over (N, C, H, W) at (N, Ho, Wo, 2) normalized (x, y)
// positions, as PyTorch's grid_sample: bilinear, nearest or bicubic (a =
// -0.75), zeros, border or reflection padding.
StatusOr<std::vector<HostTensor>> grid_sample(const Node& n, Ins ins) {
  if (ins.size() < 2 || !ins[0] || !ins[1]) return invalid_argument_error("{}: needs X and grid", n.label());
  const HostTensor &x = *ins[0], &grid = *ins[1];
  if (x.dims.size() != 4 || grid.dims.size() != 4 || grid.dims[0] != x.dims[0] || grid.dims[3] != 2)
    return unimplemented_error("{}: X {} and grid {}: Tessera samples (N, C, H, W) at (N, Ho, Wo, 2)", n.label(),
                               dims_to_string(x.dims), dims_to_string(grid.dims));
  const std::string mode = n.attr_string("mode", "bilinear"), pad = n.attr_string("padding_mode", "zeros");
  if (mode != "bilinear" && mode != "nearest" && mode != "bicubic")
    return invalid_argument_error("{}: mode '{}', expected bilinear, nearest or bicubic", n.label(), mode);
  if (pad != "zeros" && pad != "border" && pad != "reflection")
    return invalid_argument_error("{}: padding_mode '{}', expected zeros, border or reflection", n.label(), pad);
  const bool corners = n.attr_int("align_corners", 0) != 0, zeros = pad == "zeros", border = pad == "border";
  const bool bicubic = mode == "bicubic", nearest = mode == "nearest";
  const int64_t N = x.dims[0], C = x.dims[1], H = x.dims[2], W = x.dims[3], Ho = grid.dims[1], Wo = grid.dims[2];
  auto unnormalize = [&](double g, int64_t size) {
    return corners ? (g + 1) / 2 * static_cast<double>(size - 1) : ((g + 1) * static_cast<double>(size) - 1) / 2;
  };
  auto padded = [&](double c, int64_t size) {  // border and reflection keep a coordinate inside
    const auto hi = static_cast<double>(size - 1);
    if (border) return std::clamp(c, 0.0, hi);
    if (!zeros) {  // reflection
      c = corners ? reflect(c, 0, 2 * hi) : reflect(c, -1, 2 * hi + 1);
      return std::clamp(c, 0.0, hi);
    }
    return c;
  };
  HostTensor y;
  y.dims = {N, C, Ho, Wo};
  y.f.assign(static_cast<size_t>(N * C * Ho * Wo), 0.0f);
  for (int64_t b = 0; b < N; ++b)
    for (int64_t c = 0; c < C; ++c) {
      auto px = [&](int64_t iy, int64_t ix) {  // zero outside (what zeros padding reads)
        return iy < 0 || iy >= H || ix < 0 || ix >= W ? 0.0
                                                      : x.at(static_cast<size_t>(((b * C + c) * H + iy) * W + ix));
      };
      for (int64_t i = 0; i < Ho; ++i)
        for (int64_t j = 0; j < Wo; ++j) {
          const size_t gk = static_cast<size_t>(((b * Ho + i) * Wo + j) * 2);
          double sx = unnormalize(grid.at(gk), W), sy = unnormalize(grid.at(gk + 1), H), v = 0;
          if (!std::isfinite(sx) || !std::isfinite(sy)) {  // no position: NaN, not a guess
            y.f[static_cast<size_t>(((b * C + c) * Ho + i) * Wo + j)] = std::numeric_limits<float>::quiet_NaN();
            continue;
          }
          if (zeros) {  // far outside reads zeros all the same; kept within range of the integer casts
            sx = std::clamp(sx, -4.0, static_cast<double>(W) + 4);
            sy = std::clamp(sy, -4.0, static_cast<double>(H) + 4);
          }
          if (bicubic) {  // padding applies to each tap
            const double fx = std::floor(sx), fy = std::floor(sy);
            for (int dy = -1; dy <= 2; ++dy)
              for (int dx = -1; dx <= 2; ++dx) {
                double tx = fx + dx, ty = fy + dy;
                if (!zeros) tx = padded(tx, W), ty = padded(ty, H);
                v += cubic_weight(sx - (fx + dx), -0.75) * cubic_weight(sy - (fy + dy), -0.75) *
                     px(static_cast<int64_t>(ty), static_cast<int64_t>(tx));
              }
          } else {
            sx = padded(sx, W), sy = padded(sy, H);
            if (nearest) {
              v = px(static_cast<int64_t>(std::nearbyint(sy)), static_cast<int64_t>(std::nearbyint(sx)));
            } else {
              const double fx = std::floor(sx), fy = std::floor(sy), ax = sx - fx, ay = sy - fy;
              const auto x0 = static_cast<int64_t>(fx), y0 = static_cast<int64_t>(fy);
              v = (1 - ay) * ((1 - ax) * px(y0, x0) + ax * px(y0, x0 + 1)) +
                  ay * ((1 - ax) * px(y0 + 1, x0) + ax * px(y0 + 1, x0 + 1));
            }
          }
          y.f[static_cast<size_t>(((b * C + c) * Ho + i) * Wo + j)] = static_cast<float>(v);
        }
    }
  std::vector<HostTensor> r;
  r.push_back(std::move(y));
  return r;
}

// RoiAlign (opsets 10 and 16) as the ONNX reference computes it: each bin of
// each region the average (or, mode "max", the largest weighted corner) of
// its sampling grid's bilinear samples; a sample more than one pixel outside
// the map reads 0. A region with a non-finite coordinate has no samples to
// take: its outputs are NaN.
StatusOr<std::vector<HostTensor>> roi_align(const Node& n, Ins ins, int opset) {
  if (ins.size() < 3 || !ins[0] || !ins[1] || !ins[2])
    return invalid_argument_error("{}: needs X, rois and batch_indices", n.label());
  const HostTensor &x = *ins[0], &rois = *ins[1], &batch = *ins[2];
  if (x.dims.size() != 4 || rois.dims.size() != 2 || rois.dims[1] != 4 || batch.dims.size() != 1 ||
      batch.dims[0] != rois.dims[0])
    return invalid_argument_error("{}: X {}, rois {} and batch_indices {}: expected (N, C, H, W), (R, 4) and (R)",
                                  n.label(), dims_to_string(x.dims), dims_to_string(rois.dims),
                                  dims_to_string(batch.dims));
  const std::string mode = n.attr_string("mode", "avg");
  const std::string coords =
      n.attr_string("coordinate_transformation_mode", opset >= 16 ? "half_pixel" : "output_half_pixel");
  if (mode != "avg" && mode != "max")
    return invalid_argument_error("{}: mode '{}', expected avg or max", n.label(), mode);
  if (coords != "half_pixel" && coords != "output_half_pixel")
    return invalid_argument_error("{}: coordinate_transformation_mode '{}', expected half_pixel or output_half_pixel",
                                  n.label(), coords);
  const int64_t oh = n.attr_int("output_height", 1), ow = n.attr_int("output_width", 1),
                ratio = n.attr_int("sampling_ratio", 0);
  const double scale = n.attr_float("spatial_scale", 1.0f), offset = coords == "half_pixel" ? 0.5 : 0.0;
  if (oh < 1 || ow < 1 || ratio < 0)
    return invalid_argument_error("{}: output {} x {} and sampling_ratio {}: expected positive sizes", n.label(), oh,
                                  ow, ratio);
  const int64_t N = x.dims[0], C = x.dims[1], H = x.dims[2], W = x.dims[3], R = rois.dims[0];
  HostTensor y = zeros({R, C, oh, ow});
  // (N, H, W, C): a sample's corners then read every channel in a row.
  std::vector<float> xt(x.f.size());
  for (int64_t b = 0; b < N; ++b)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t p = 0; p < H * W; ++p)
        xt[static_cast<size_t>((b * H * W + p) * C + c)] = x.f[static_cast<size_t>((b * C + c) * H * W + p)];
  std::vector<double> acc(static_cast<size_t>(C));
  const bool avg = mode == "avg";
  struct Tap {
    int64_t pos[4];
    double w[4];
  };
  std::vector<Tap> taps;
  for (int64_t r = 0; r < R; ++r) {
    const auto b = static_cast<int64_t>(batch.at(static_cast<size_t>(r)));
    if (b < 0 || b >= N)
      return invalid_argument_error("{}: region {} names image {} of a batch of {}", n.label(), r, b, N);
    double box[4];
    bool finite = true;
    for (int k = 0; k < 4; ++k) {
      box[k] = rois.at(static_cast<size_t>(r * 4 + k)) * scale - offset;
      finite = finite && std::isfinite(box[k]);
    }
    float* out = y.f.data() + r * C * oh * ow;
    if (!finite) {
      std::fill(out, out + C * oh * ow, std::numeric_limits<float>::quiet_NaN());
      continue;
    }
    double rw = box[2] - box[0], rh = box[3] - box[1];
    if (offset == 0.0) rw = std::max(rw, 1.0), rh = std::max(rh, 1.0);
    const double bh = rh / static_cast<double>(oh), bw = rw / static_cast<double>(ow);
    // (The adaptive grid capped: a region far larger than the map samples no
    // finer than its pixels would.)
    const int64_t gh = ratio > 0 ? ratio : std::clamp<int64_t>(static_cast<int64_t>(std::ceil(bh)), 1, H + 1),
                  gw = ratio > 0 ? ratio : std::clamp<int64_t>(static_cast<int64_t>(std::ceil(bw)), 1, W + 1);
    for (int64_t ph = 0; ph < oh; ++ph)
      for (int64_t pw = 0; pw < ow; ++pw) {
        taps.clear();
        for (int64_t iy = 0; iy < gh; ++iy)
          for (int64_t ix = 0; ix < gw; ++ix) {
            double sy =
                box[1] + static_cast<double>(ph) * bh + (static_cast<double>(iy) + 0.5) * bh / static_cast<double>(gh);
            double sx =
                box[0] + static_cast<double>(pw) * bw + (static_cast<double>(ix) + 0.5) * bw / static_cast<double>(gw);
            Tap t{{0, 0, 0, 0}, {0, 0, 0, 0}};
            if (sy >= -1.0 && sy <= static_cast<double>(H) && sx >= -1.0 && sx <= static_cast<double>(W)) {
              sy = std::max(sy, 0.0), sx = std::max(sx, 0.0);
              auto y0 = static_cast<int64_t>(sy), x0 = static_cast<int64_t>(sx), y1 = y0 + 1, x1 = x0 + 1;
              if (y0 >= H - 1) y0 = y1 = H - 1, sy = static_cast<double>(y0);
              if (x0 >= W - 1) x0 = x1 = W - 1, sx = static_cast<double>(x0);
              const double ly = sy - static_cast<double>(y0), lx = sx - static_cast<double>(x0);
              t = {{y0 * W + x0, y0 * W + x1, y1 * W + x0, y1 * W + x1},
                   {(1 - ly) * (1 - lx), (1 - ly) * lx, ly * (1 - lx), ly * lx}};
            }
            taps.push_back(t);
          }
        // Every channel at once from the channels-last copy: C contiguous
        // values per corner, each channel's sum in the same order.
        const auto count = static_cast<double>(taps.size());
        for (size_t k = 0; k < taps.size(); ++k) {
          const Tap& t = taps[k];
          const float *v0 = xt.data() + (b * H * W + t.pos[0]) * C, *v1 = xt.data() + (b * H * W + t.pos[1]) * C,
                      *v2 = xt.data() + (b * H * W + t.pos[2]) * C, *v3 = xt.data() + (b * H * W + t.pos[3]) * C;
          if (avg) {
            for (int64_t c = 0; c < C; ++c) {
              double a = k == 0 ? 0.0 : acc[static_cast<size_t>(c)];
              a += t.w[0] * v0[c], a += t.w[1] * v1[c], a += t.w[2] * v2[c], a += t.w[3] * v3[c];
              acc[static_cast<size_t>(c)] = a;
            }
          } else {
            for (int64_t c = 0; c < C; ++c) {
              double v = t.w[0] * v0[c];
              v = std::max(v, t.w[1] * double{v1[c]}), v = std::max(v, t.w[2] * double{v2[c]});
              v = std::max(v, t.w[3] * double{v3[c]});
              acc[static_cast<size_t>(c)] = k == 0 ? v : std::max(acc[static_cast<size_t>(c)], v);
            }
          }
        }
        for (int64_t c = 0; c < C; ++c)
          out[(c * oh + ph) * ow + pw] =
              static_cast<float>(avg ? acc[static_cast<size_t>(c)] / count : acc[static_cast<size_t>(c)]);
      }
  }
  std::vector<HostTensor> r;
  r.push_back(std::move(y));
  return r;
}

}  // namespace tessera::graph::host
