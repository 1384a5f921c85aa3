// Host reference kernels for ONNX's recurrent layers: LSTM, GRU and RNN
// (internal to host_eval). Text recognisers (CRNN heads) end in them. One
// time step after another in double (the gate products vectorized over the
// gates: a CRNN-sized bidirectional LSTM in about a third of the time the
// gate-by-gate dot products took), forward, reverse or both, with
// per-sample sequence lengths, initial states, peepholes, clipping and the
// ONNX activation list.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "host_kernels.h"
#include "tessera/graph/host_eval.h"

namespace tessera::graph::host {
namespace {

enum class ActKind {
  kSigmoid,
  kTanh,
  kRelu,
  kLeakyRelu,
  kThresholdedRelu,
  kScaledTanh,
  kHardSigmoid,
  kElu,
  kSoftsign,
  kSoftplus,
  kAffine
};

// ONNX's recurrent activations: the kind, the default alpha and beta (ScaledTanh
// and Affine have none in the spec: 1 and 0 here), and which of the two each reads.
struct ActInfo {
  const char* name;
  ActKind kind;
  double alpha, beta;
  bool uses_alpha, uses_beta;
};
constexpr ActInfo kActs[] = {
    {"Sigmoid", ActKind::kSigmoid, 0, 0, false, false},
    {"Tanh", ActKind::kTanh, 0, 0, false, false},
    {"Relu", ActKind::kRelu, 0, 0, false, false},
    {"LeakyRelu", ActKind::kLeakyRelu, 0.01, 0, true, false},
    {"ThresholdedRelu", ActKind::kThresholdedRelu, 1, 0, true, false},
    {"ScaledTanh", ActKind::kScaledTanh, 1, 1, true, true},
    {"HardSigmoid", ActKind::kHardSigmoid, 0.2, 0.5, true, true},
    {"Elu", ActKind::kElu, 1, 0, true, false},
    {"Softsign", ActKind::kSoftsign, 0, 0, false, false},
    {"Softplus", ActKind::kSoftplus, 0, 0, false, false},
    {"Affine", ActKind::kAffine, 1, 0, true, true},
};

struct Act {
  ActKind kind = ActKind::kSigmoid;
  double alpha = 0, beta = 0;
  double operator()(double x) const {
    switch (kind) {
      case ActKind::kSigmoid:
        return 1 / (1 + std::exp(-x));
      case ActKind::kTanh:
        return std::tanh(x);
      case ActKind::kRelu:
        return x < 0 ? 0 : x;
      case ActKind::kLeakyRelu:
        return x < 0 ? alpha * x : x;
      case ActKind::kThresholdedRelu:
        return x > alpha ? x : 0;
      case ActKind::kScaledTanh:
        return alpha * std::tanh(beta * x);
      case ActKind::kHardSigmoid:
        return std::clamp(alpha * x + beta, 0.0, 1.0);
      case ActKind::kElu:
        return x < 0 ? alpha * (std::exp(x) - 1) : x;
      case ActKind::kSoftsign:
        return x / (1 + std::fabs(x));
      case ActKind::kSoftplus:
        return std::log1p(std::exp(x));
      case ActKind::kAffine:
        return alpha * x + beta;
    }
    return x;
  }
};

// The node's activations for every direction (the defaults where it names
// none), each taking its alpha / beta from the attribute lists in order.
StatusOr<std::vector<Act>> activations(const Node& n, size_t dirs, const std::vector<std::string>& dflt) {
  std::vector<std::string> names = n.attr_strings("activations");
  if (names.empty())
    for (size_t d = 0; d < dirs; ++d) names.insert(names.end(), dflt.begin(), dflt.end());
  if (names.size() != dflt.size() * dirs)
    return invalid_argument_error("{}: {} activations, expected {} per direction", n.label(), names.size(),
                                  dflt.size());
  const std::vector<float> alphas = n.attr_floats("activation_alpha"), betas = n.attr_floats("activation_beta");
  size_t na = 0, nb = 0;
  std::vector<Act> r;
  for (const std::string& s : names) {
    const ActInfo* info =
        std::find_if(std::begin(kActs), std::end(kActs), [&](const ActInfo& k) { return s == k.name; });
    if (info == std::end(kActs)) return invalid_argument_error("{}: unknown activation '{}'", n.label(), s);
    Act a{info->kind, info->alpha, info->beta};
    if (info->uses_alpha && na < alphas.size()) a.alpha = alphas[na++];
    if (info->uses_beta && nb < betas.size()) a.beta = betas[nb++];
    r.push_back(a);
  }
  return r;
}

}  // namespace

StatusOr<std::vector<HostTensor>> recurrent(const Node& n, Ins ins) {
  const std::string& op = n.op_type;
  const bool lstm = op == "LSTM", gru = op == "GRU";  // else RNN
  const size_t G = lstm ? 4 : gru ? 3 : 1;
  for (size_t k = 0; k < 3; ++k) TS_RETURN_IF_ERROR(need(n, ins, k));
  const HostTensor &x = *ins[0], &W = *ins[1], &R = *ins[2];
  const std::string direction = n.attr_string("direction", "forward");
  if (direction != "forward" && direction != "reverse" && direction != "bidirectional")
    return invalid_argument_error("{}: direction '{}', expected forward, reverse or bidirectional", n.label(),
                                  direction);
  const int64_t dirs = direction == "bidirectional" ? 2 : 1;
  const bool batch_major = n.attr_int("layout", 0) != 0;
  if (x.dims.size() != 3 || W.dims.size() != 3 || R.dims.size() != 3)
    return invalid_argument_error("{}: X {}, W {}, R {}: expected rank 3 each", n.label(), dims_to_string(x.dims),
                                  dims_to_string(W.dims), dims_to_string(R.dims));
  // tessera_projected_inputs (graph::project_recurrent_inputs): X holds
  // every step's W x + Wb already, (T, N, directions x gates x H).
  const bool given = n.attr_int("tessera_projected_inputs", 0) != 0;
  const int64_t T = x.dims[batch_major ? 1 : 0], N = x.dims[batch_major ? 0 : 1], I = given ? W.dims[2] : x.dims[2];
  const int64_t H = n.attr_int("hidden_size", R.dims[2]);
  const auto g = static_cast<int64_t>(G);
  if (given && (batch_major || x.dims[2] != dirs * g * H))
    return invalid_argument_error("{}: projected inputs {}, expected (T, N, {})", n.label(), dims_to_string(x.dims),
                                  dirs * g * H);
  if (W.dims != Dims{dirs, g * H, I} || R.dims != Dims{dirs, g * H, H})
    return invalid_argument_error("{}: W {} and R {} for {} direction(s), hidden size {}, input size {}", n.label(),
                                  dims_to_string(W.dims), dims_to_string(R.dims), dirs, H, I);
  auto check = [&](size_t k, const Dims& want, const char* what) -> Status {
    if (in(ins, k) && in(ins, k)->dims != want)
      return invalid_argument_error("{}: {} is {}, expected {}", n.label(), what, dims_to_string(in(ins, k)->dims),
                                    dims_to_string(want));
    return ok_status();
  };
  TS_RETURN_IF_ERROR(check(3, {dirs, 2 * g * H}, "B"));
  TS_RETURN_IF_ERROR(check(4, {N}, "sequence_lens"));
  TS_RETURN_IF_ERROR(check(5, batch_major ? Dims{N, dirs, H} : Dims{dirs, N, H}, "initial_h"));
  if (lstm) {
    TS_RETURN_IF_ERROR(check(6, batch_major ? Dims{N, dirs, H} : Dims{dirs, N, H}, "initial_c"));
    TS_RETURN_IF_ERROR(check(7, {dirs, 3 * H}, "P"));
  }
  const std::vector<std::string> dflt = lstm  ? std::vector<std::string>{"Sigmoid", "Tanh", "Tanh"}
                                        : gru ? std::vector<std::string>{"Sigmoid", "Tanh"}
                                              : std::vector<std::string>{"Tanh"};
  TS_ASSIGN_OR_RETURN(std::vector<Act> acts, activations(n, static_cast<size_t>(dirs), dflt));
  const bool clip = n.has_attr("clip"), coupled = n.attr_int("input_forget", 0) != 0;
  const double limit = n.attr_float("clip", 0);
  const bool before_reset = n.attr_int("linear_before_reset", 0) != 0;

  Dims y_dims = batch_major ? Dims{N, T, dirs, H} : Dims{T, dirs, N, H};
  const Dims s_dims = batch_major ? Dims{N, dirs, H} : Dims{dirs, N, H};
  HostTensor y = make(ElemType::FLOAT32, y_dims), yh = make(ElemType::FLOAT32, s_dims), yc = yh;
  auto x_at = [&](int64_t t, int64_t b, int64_t i) {
    return x.at(static_cast<size_t>((batch_major ? b * T + t : t * N + b) * I + i));
  };
  auto y_at = [&](int64_t t, int64_t d, int64_t b) {
    return static_cast<size_t>(((batch_major ? (b * T + t) * dirs + d : (t * dirs + d) * N + b)) * H);
  };
  auto s_at = [&](int64_t d, int64_t b) { return static_cast<size_t>((batch_major ? b * dirs + d : d * N + b) * H); };
  std::vector<double> h(static_cast<size_t>(H)), c(static_cast<size_t>(H)), pre(G * static_cast<size_t>(H)),
      rh(static_cast<size_t>(H)), reset(static_cast<size_t>(H)),  // (GRU's reset gate)
      hidden(static_cast<size_t>(H)), gh(static_cast<size_t>(H));
  // W and R of a direction transposed, (input, gate row): each step's
  // products are then sums over the input of a scalar times a contiguous
  // row into every gate at once, which the compiler vectorizes; each gate
  // still adds its terms in input order, so the results are the same as
  // gate-by-gate dot products.
  // (Held as floats, which W and R are: the products in double are the same,
  // from half the memory.)
  auto transposed = [&](const HostTensor& m, int64_t d, int64_t cols) {
    std::vector<float> t(static_cast<size_t>(cols * g * H));
    for (int64_t k = 0; k < g * H; ++k)
      for (int64_t i = 0; i < cols; ++i)
        t[static_cast<size_t>(i * g * H + k)] =
            static_cast<float>(m.at(static_cast<size_t>((d * g * H + k) * cols + i)));
    return t;
  };
  // out[k] += sum over i of mt[i][col + k] * v[i], for k in [0, count).
  auto accumulate = [&](double* out, const std::vector<float>& mt, int64_t col, int64_t count,
                        const std::vector<double>& v) {
    const auto width = static_cast<size_t>(g * H);
    for (size_t i = 0; i < v.size(); ++i) {
      const double vi = v[i];
      const float* row = mt.data() + i * width + static_cast<size_t>(col);
      for (int64_t k = 0; k < count; ++k) out[k] += row[k] * vi;
    }
  };
  for (int64_t d = 0; d < dirs; ++d) {
    const bool reverse = direction == "reverse" || d == 1;
    const Act* a = &acts[static_cast<size_t>(d) * dflt.size()];
    const std::vector<float> wt = given ? std::vector<float>{} : transposed(W, d, I), rt = transposed(R, d, H);
    auto bias = [&](int64_t k) { return in(ins, 3) ? in(ins, 3)->at(static_cast<size_t>(d * 2 * g * H + k)) : 0.0; };
    for (int64_t b = 0; b < N; ++b) {
      const int64_t len = in(ins, 4) ? static_cast<int64_t>(in(ins, 4)->at(static_cast<size_t>(b))) : T;
      if (len < 0 || len > T)
        return invalid_argument_error("{}: sequence length {} for a sequence of {}", n.label(), len, T);
      for (int64_t j = 0; j < H; ++j) {
        h[j] = in(ins, 5) ? in(ins, 5)->at(s_at(d, b) + j) : 0.0;
        c[j] = lstm && in(ins, 6) ? in(ins, 6)->at(s_at(d, b) + j) : 0.0;
      }
      // Wb + W x of every step first, each row of W^T read once for all of
      // them (per step it streamed the whole W from memory), unless given.
      const auto gh_len = static_cast<size_t>(g * H);
      std::vector<double> projected(static_cast<size_t>(len) * gh_len);
      for (int64_t t = 0; t < len; ++t)
        for (int64_t k = 0; k < g * H; ++k)
          projected[static_cast<size_t>(t) * gh_len + static_cast<size_t>(k)] =
              given ? x.at(static_cast<size_t>(((t * N + b) * dirs + d) * g * H + k)) : bias(k);
      for (int64_t i = 0; i < (given ? 0 : I); ++i) {
        const float* row = wt.data() + static_cast<size_t>(i) * gh_len;
        for (int64_t t = 0; t < len; ++t) {
          const double xi = x_at(t, b, i);
          double* out = projected.data() + static_cast<size_t>(t) * gh_len;
          for (size_t k = 0; k < gh_len; ++k) out[k] += row[k] * xi;
        }
      }
      for (int64_t s = 0; s < len; ++s) {
        const int64_t t = reverse ? len - 1 - s : s;
        // Wb + W x, then + Rb + R h but for GRU's hidden gate (see below).
        std::copy_n(projected.begin() + static_cast<std::ptrdiff_t>(static_cast<size_t>(t) * gh_len), gh_len,
                    pre.begin());
        const int64_t recurrent = gru ? 2 * H : g * H;  // (the gates R h joins here)
        for (int64_t k = 0; k < recurrent; ++k) pre[static_cast<size_t>(k)] += bias(g * H + k);
        accumulate(pre.data(), rt, 0, recurrent, h);
        auto clipped = [&](double v) { return clip ? std::clamp(v, -limit, limit) : v; };
        if (lstm) {  // gates i, o, f, c
          auto peep = [&](int64_t k, int64_t j, double state) {
            return in(ins, 7) ? in(ins, 7)->at(static_cast<size_t>(d * 3 * H + k * H + j)) * state : 0.0;
          };
          for (int64_t j = 0; j < H; ++j) {
            const double it = a[0](clipped(pre[j] + peep(0, j, c[j])));
            const double ft = coupled ? 1 - it : a[0](clipped(pre[2 * H + j] + peep(2, j, c[j])));
            const double ct = a[1](clipped(pre[3 * H + j]));
            c[j] = ft * c[j] + it * ct;
            const double ot = a[0](clipped(pre[H + j] + peep(1, j, c[j])));
            rh[j] = ot * a[2](c[j]);
          }
        } else if (gru) {  // gates z, r, h
          for (int64_t j = 0; j < H; ++j) reset[j] = a[0](clipped(pre[H + j]));
          for (int64_t i = 0; i < H; ++i) hidden[static_cast<size_t>(i)] = before_reset ? h[i] : reset[i] * h[i];
          // (gh[j] = R_h row j . hidden, through the transposed R's last H columns)
          std::fill(gh.begin(), gh.end(), 0.0);
          accumulate(gh.data(), rt, 2 * H, H, hidden);
          for (int64_t j = 0; j < H; ++j) {
            double v = gh[static_cast<size_t>(j)];
            v = before_reset ? reset[j] * (v + bias(g * H + 2 * H + j)) : v + bias(g * H + 2 * H + j);
            const double zt = a[0](clipped(pre[j])), ht = a[1](clipped(pre[2 * H + j] + v));
            rh[j] = (1 - zt) * ht + zt * h[j];
          }
        } else {
          for (int64_t j = 0; j < H; ++j) rh[j] = a[0](clipped(pre[j]));
        }
        h = rh;
        for (int64_t j = 0; j < H; ++j) y.f[y_at(t, d, b) + j] = static_cast<float>(h[j]);
      }
      for (int64_t j = 0; j < H; ++j) {
        yh.f[s_at(d, b) + j] = static_cast<float>(h[j]);
        yc.f[s_at(d, b) + j] = static_cast<float>(c[j]);
      }
    }
  }
  std::vector<HostTensor> r;
  r.push_back(std::move(y));
  r.push_back(std::move(yh));
  if (lstm) r.push_back(std::move(yc));
  return r;
}

}  // namespace tessera::graph::host
