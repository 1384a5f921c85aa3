#include "tessera/cnn/weights.h"

#include "tessera/numerics/bfloat16.h"
#include "tessera/numerics/float16.h"

#include <zip.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace tessera::cnn {

namespace {

StatusOr<std::string> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return not_found_error("cannot open '{}'", path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// Element kinds both file formats carry.
enum class Kind { F32, F64, F16, BF16, I8, U8, I16, U16, I32, I64, BOOL };
size_t kind_size(Kind k) {
  switch (k) {
    case Kind::F64: case Kind::I64: return 8;
    case Kind::F32: case Kind::I32: return 4;
    case Kind::F16: case Kind::BF16: case Kind::I16: case Kind::U16: return 2;
    default: return 1;
  }
}

template <class T>
T load_le(const char* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));  // the machine is little-endian, as both formats
  return v;
}

// Little-endian values of `kind` to float32; integers must be exact.
StatusOr<std::vector<float>> to_floats(const char* p, uint64_t n, Kind kind, std::string_view what) {
  std::vector<float> out(n);
  for (uint64_t i = 0; i < n; ++i, p += kind_size(kind)) {
    double v = 0;
    switch (kind) {
      case Kind::F32: out[i] = load_le<float>(p); continue;
      case Kind::F64: out[i] = static_cast<float>(load_le<double>(p)); continue;
      case Kind::F16: out[i] = float16_to_float(load_le<uint16_t>(p)); continue;
      case Kind::BF16: {
        const uint32_t bits = uint32_t{load_le<uint16_t>(p)} << 16;
        std::memcpy(&out[i], &bits, 4);
        continue;
      }
      case Kind::I8: v = load_le<int8_t>(p); break;
      case Kind::U8: v = load_le<uint8_t>(p); break;
      case Kind::BOOL: v = load_le<uint8_t>(p) ? 1 : 0; break;
      case Kind::I16: v = load_le<int16_t>(p); break;
      case Kind::U16: v = load_le<uint16_t>(p); break;
      case Kind::I32: v = load_le<int32_t>(p); break;
      case Kind::I64: v = static_cast<double>(load_le<int64_t>(p)); break;
    }
    if (std::fabs(v) > 16777216.0)
      return invalid_argument_error("{}: integer {} at index {} is not exact in float32", what, v, i);
    out[i] = static_cast<float>(v);
  }
  return out;
}

StatusOr<Tensor> make_tensor(std::vector<float> values, std::vector<uint32_t> dims, std::string_view what) {
  if (dims.empty()) dims.push_back(1);  // a scalar becomes (1)
  if (dims.size() > static_cast<size_t>(Shape::kMaxRank))
    return invalid_argument_error("{}: rank {} is above Tessera's maximum {}", what, dims.size(), Shape::kMaxRank);
  return Tensor::from_vector(values, Shape(std::span<const uint32_t>(dims)), DataType::FLOAT32);
}

// ---- .npy ----

// The value after `'key':` in a NumPy header dict, up to the next top-level comma.
std::optional<std::string> header_value(std::string_view h, std::string_view key) {
  const std::string quoted = fmt::format("'{}'", key);
  size_t at = h.find(quoted);
  if (at == std::string_view::npos) return std::nullopt;
  at = h.find(':', at + quoted.size());
  if (at == std::string_view::npos) return std::nullopt;
  size_t end = ++at;
  int depth = 0;
  for (; end < h.size(); ++end) {
    const char c = h[end];
    if (c == '(' || c == '[') ++depth;
    if (c == ')' || c == ']') --depth;
    if ((c == ',' && depth == 0) || (c == '}' && depth == 0) || depth < 0) break;
  }
  std::string v(h.substr(at, end - at));
  v.erase(0, v.find_first_not_of(" \t"));
  v.erase(v.find_last_not_of(" \t") + 1);
  return v;
}

}  // namespace

StatusOr<Tensor> parse_npy(std::string_view b, std::string_view name, std::string* dtype) {
  if (b.size() < 10 || b.substr(0, 6) != "\x93NUMPY")
    return invalid_argument_error("{}: not a .npy file (expected the magic \\x93NUMPY)", name);
  const uint8_t major = static_cast<uint8_t>(b[6]);
  if (major < 1 || major > 3) return invalid_argument_error("{}: unsupported .npy format version {}", name, major);
  const size_t prefix = major == 1 ? 10 : 12;
  if (b.size() < prefix) return invalid_argument_error("{}: truncated header", name);
  const uint64_t hlen =
      major == 1 ? load_le<uint16_t>(b.data() + 8) : load_le<uint32_t>(b.data() + 8);
  if (b.size() < prefix + hlen) return invalid_argument_error("{}: header of {} B runs past the file", name, hlen);
  const std::string_view h = b.substr(prefix, hlen);
  const auto descr = header_value(h, "descr"), fortran = header_value(h, "fortran_order"),
             shape = header_value(h, "shape");
  if (!descr || !fortran || !shape)
    return invalid_argument_error("{}: header must have 'descr', 'fortran_order' and 'shape', found {}", name, h);
  static const std::map<std::string, Kind> kinds{
      {"<f4", Kind::F32}, {"<f8", Kind::F64}, {"<f2", Kind::F16}, {"<i8", Kind::I64}, {"<i4", Kind::I32},
      {"<i2", Kind::I16}, {"<u2", Kind::U16}, {"|i1", Kind::I8},  {"|u1", Kind::U8},  {"|b1", Kind::BOOL}};
  std::string d = *descr;
  if (d.size() >= 2 && (d.front() == '\'' || d.front() == '"')) d = d.substr(1, d.size() - 2);
  if (!d.empty() && d[0] == '=') d[0] = '<';
  const auto kind = kinds.find(d);
  if (kind == kinds.end())
    return invalid_argument_error("{}: dtype '{}' is not supported (expected one of <f4 <f8 <f2 <i8 <i4 <i2 <u2 |i1 "
                                  "|u1 |b1, little-endian)",
                                  name, d);
  if (dtype) *dtype = d;
  if (*fortran != "False" && *fortran != "True")
    return invalid_argument_error("{}: fortran_order must be True or False, found {}", name, *fortran);
  std::string s = *shape;
  if (s.size() < 2 || s.front() != '(' || s.back() != ')')
    return invalid_argument_error("{}: shape must be a tuple, found {}", name, s);
  std::vector<uint32_t> dims;
  uint64_t count = 1;
  std::string_view rest(s);
  rest = rest.substr(1, rest.size() - 2);
  while (!rest.empty()) {
    const size_t comma = rest.find(',');
    std::string_view item = rest.substr(0, comma);
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
    while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
    if (item.empty()) continue;
    uint64_t v = 0;
    for (char c : item) {
      if (c < '0' || c > '9' || v > (1ull << 32))
        return invalid_argument_error("{}: shape entry '{}' is not a dimension", name, item);
      v = v * 10 + static_cast<uint64_t>(c - '0');
    }
    if (v == 0 || v > UINT32_MAX) return invalid_argument_error("{}: dimension {} is out of range", name, v);
    dims.push_back(static_cast<uint32_t>(v));
    count *= v;
    if (count > (1ull << 34)) return invalid_argument_error("{}: {} elements is too many", name, count);
  }
  const uint64_t bytes = count * kind_size(kind->second);
  if (b.size() - prefix - hlen != bytes)
    return invalid_argument_error("{}: {} data bytes for shape {} of {}, expected {}", name, b.size() - prefix - hlen,
                                  s, d, bytes);
  TS_ASSIGN_OR_RETURN(std::vector<float> v, to_floats(b.data() + prefix + hlen, count, kind->second, name));
  if (*fortran == "True" && dims.size() > 1) {
    // Column-major to row-major: the first index varies fastest in the file.
    std::vector<float> c(v.size());
    std::vector<uint32_t> idx(dims.size(), 0);
    for (uint64_t f = 0; f < count; ++f) {
      uint64_t ci = 0;
      for (size_t k = 0; k < dims.size(); ++k) ci = ci * dims[k] + idx[k];
      c[ci] = v[f];
      for (size_t k = 0; k < dims.size() && ++idx[k] == dims[k]; ++k) idx[k] = 0;
    }
    v = std::move(c);
  }
  return make_tensor(std::move(v), std::move(dims), name);
}

StatusOr<Tensor> load_npy(const std::string& path, std::string* dtype) {
  TS_ASSIGN_OR_RETURN(std::string b, read_file(path));
  return parse_npy(b, path, dtype);
}

StatusOr<WeightMap> load_npz(const std::string& path, std::map<std::string, std::string>* dtypes) {
  int err = 0;
  zip_t* z = zip_open(path.c_str(), ZIP_RDONLY, &err);
  if (!z) {
    zip_error_t e;
    zip_error_init_with_code(&e, err);
    std::string msg = zip_error_strerror(&e);
    zip_error_fini(&e);
    return invalid_argument_error("{}: not a readable .npz archive ({})", path, msg);
  }
  std::unique_ptr<zip_t, int (*)(zip_t*)> closer(z, zip_close);
  WeightMap out;
  const zip_int64_t n = zip_get_num_entries(z, 0);
  for (zip_int64_t i = 0; i < n; ++i) {
    zip_stat_t st;
    if (zip_stat_index(z, static_cast<zip_uint64_t>(i), 0, &st) != 0 || !(st.valid & ZIP_STAT_SIZE))
      return invalid_argument_error("{}: cannot read entry {}", path, i);
    std::string entry = st.name ? st.name : "";
    // Read in chunks: a corrupt header may claim any size, so nothing is
    // allocated beyond what the entry actually yields.
    zip_file_t* f = zip_fopen_index(z, static_cast<zip_uint64_t>(i), 0);
    if (!f) return invalid_argument_error("{}: cannot open entry '{}': {}", path, entry, zip_strerror(z));
    std::string data;
    zip_int64_t got = 0;
    while (data.size() < st.size) {
      const size_t chunk = static_cast<size_t>(std::min<zip_uint64_t>(st.size - data.size(), 1 << 20));
      const size_t at = data.size();
      data.resize(at + chunk);
      got = zip_fread(f, data.data() + at, chunk);
      if (got <= 0) {
        data.resize(at);
        break;
      }
      data.resize(at + static_cast<size_t>(got));
    }
    zip_fclose(f);
    if (got < 0 || data.size() != st.size)
      return invalid_argument_error("{}: entry '{}' is corrupt ({} of {} B read)", path, entry, data.size(), st.size);
    std::string key = entry.size() > 4 && entry.ends_with(".npy") ? entry.substr(0, entry.size() - 4) : entry;
    std::string dtype;
    TS_ASSIGN_OR_RETURN(Tensor t, parse_npy(data, fmt::format("{}:{}", path, entry), &dtype));
    if (dtypes) (*dtypes)[key] = dtype;
    out.emplace(std::move(key), std::move(t));
  }
  return out;
}

namespace {

// A float32 array as .npy version 1 bytes (what numpy.save writes).
StatusOr<std::string> npy_bytes(const Tensor& t) {
  TS_ASSIGN_OR_RETURN(std::vector<float> v, t.to_vector());
  const std::vector<int64_t> dims(t.shape().dims().begin(), t.shape().dims().end());
  return npy_file_bytes("<f4", dims, v.data(), v.size() * 4);
}

}  // namespace

std::string npy_file_bytes(std::string_view descr, std::span<const int64_t> dims, const void* data, size_t bytes) {
  std::string shape;
  for (int64_t d : dims) shape += fmt::format("{}{}", shape.empty() ? "" : ", ", d);
  shape = dims.size() == 1 ? fmt::format("({},)", shape) : fmt::format("({})", shape);
  std::string header = fmt::format("{{'descr': '{}', 'fortran_order': False, 'shape': {}, }}", descr, shape);
  header.append(64 - (10 + header.size() + 1) % 64, ' ').push_back('\n');
  std::string b = "\x93NUMPY\x01";
  b.push_back('\0');
  const uint16_t hl = static_cast<uint16_t>(header.size());
  b.append(reinterpret_cast<const char*>(&hl), 2);
  b += header;
  b.append(static_cast<const char*>(data), bytes);
  return b;
}

Status save_npy(const std::string& path, const Tensor& array) {
  TS_ASSIGN_OR_RETURN(std::string b, npy_bytes(array));
  std::ofstream out(path, std::ios::binary);
  if (!out || !out.write(b.data(), static_cast<std::streamsize>(b.size())))
    return invalid_argument_error("{}: cannot write the file", path);
  return ok_status();
}

Status save_npz(const std::string& path, const WeightMap& arrays) {
  std::map<std::string, std::string> files;
  for (const auto& [name, t] : arrays) {
    TS_ASSIGN_OR_RETURN(files[name], npy_bytes(t));
  }
  return save_npz_files(path, files);
}

Status save_npz_files(const std::string& path, const std::map<std::string, std::string>& npy_files) {
  int err = 0;
  zip_t* z = zip_open(path.c_str(), ZIP_CREATE | ZIP_TRUNCATE, &err);
  if (!z) return invalid_argument_error("{}: cannot create the archive (libzip error {})", path, err);
  for (const auto& [name, bytes] : npy_files) {  // (the map outlives zip_close)
    zip_source_t* src = zip_source_buffer(z, bytes.data(), bytes.size(), 0);
    const zip_int64_t idx = src ? zip_file_add(z, (name + ".npy").c_str(), src, ZIP_FL_OVERWRITE) : -1;
    if (idx < 0 || zip_set_file_compression(z, static_cast<zip_uint64_t>(idx), ZIP_CM_STORE, 0) != 0) {
      if (src && idx < 0) zip_source_free(src);
      std::string msg = zip_strerror(z);
      zip_discard(z);
      return internal_error("{}: cannot add '{}': {}", path, name, msg);
    }
  }
  if (zip_close(z) != 0) {
    std::string msg = zip_strerror(z);
    zip_discard(z);
    return internal_error("{}: cannot write the archive: {}", path, msg);
  }
  return ok_status();
}

// ---- preprocessing ----

StatusOr<FoldedConv2d> fold_batch_norm_into_conv2d(const Tensor& weight, const std::optional<Tensor>& bias,
                                                   const BatchNorm2dParameters& bn) {
  if (weight.shape().rank() != 4)
    return invalid_argument_error("fold_batch_norm_into_conv2d: expected a (out, in/g, kh, kw) weight, got {}",
                                  weight.shape().to_string());
  const uint32_t out = weight.shape()[0];
  const uint64_t per = weight.shape().volume() / out;
  auto channel_values = [&](const Tensor& t, std::string_view name) -> StatusOr<std::vector<float>> {
    if (t.shape().volume() != out)
      return invalid_argument_error("fold_batch_norm_into_conv2d: {} has shape {}, expected {} values", name,
                                    t.shape().to_string(), out);
    return t.to_vector();
  };
  TS_ASSIGN_OR_RETURN(std::vector<float> mean, channel_values(bn.running_mean, "running_mean"));
  TS_ASSIGN_OR_RETURN(std::vector<float> var, channel_values(bn.running_var, "running_var"));
  TS_ASSIGN_OR_RETURN(std::vector<float> gamma, channel_values(bn.weight, "weight (gamma)"));
  TS_ASSIGN_OR_RETURN(std::vector<float> beta, channel_values(bn.bias, "bias (beta)"));
  std::vector<float> b(out, 0.0f);
  if (bias) {
    TS_ASSIGN_OR_RETURN(b, channel_values(*bias, "conv bias"));
  }
  TS_ASSIGN_OR_RETURN(std::vector<float> w, weight.to_vector());
  for (uint32_t o = 0; o < out; ++o) {
    const float scale = gamma[o] / std::sqrt(var[o] + bn.eps);
    for (uint64_t i = 0; i < per; ++i) w[o * per + i] *= scale;
    b[o] = (b[o] - mean[o]) * scale + beta[o];
  }
  FoldedConv2d f;
  TS_ASSIGN_OR_RETURN(f.weight, Tensor::from_vector(w, weight.shape(), DataType::FLOAT32));
  TS_ASSIGN_OR_RETURN(f.bias, Tensor::from_vector(b, Shape{1, 1, 1, out}, DataType::FLOAT32));
  return f;
}

const ModuleParameters* ModuleParameters::child(std::string_view dotted) const {
  const ModuleParameters* m = this;
  while (!dotted.empty()) {
    const size_t dot = dotted.find('.');
    const auto it = m->children.find(std::string(dotted.substr(0, dot)));
    if (it == m->children.end()) return nullptr;
    m = &it->second;
    dotted = dot == std::string_view::npos ? std::string_view() : dotted.substr(dot + 1);
  }
  return m;
}

StatusOr<Tensor> ModuleParameters::at(std::string_view dotted) const {
  const size_t dot = dotted.rfind('.');
  const ModuleParameters* m = dot == std::string_view::npos ? this : child(dotted.substr(0, dot));
  const std::string leaf(dot == std::string_view::npos ? dotted : dotted.substr(dot + 1));
  if (m) {
    const auto it = m->tensors.find(leaf);
    if (it != m->tensors.end()) return it->second;
  }
  return not_found_error("no parameter '{}'", dotted);
}

namespace {

Status walk(const std::string& path, ModuleParameters& m, const CustomPreprocessor& hook) {
  if (hook) {
    TS_ASSIGN_OR_RETURN(std::optional<ModuleParameters> replaced, hook(path, m));
    if (replaced) {
      m = std::move(*replaced);
      return ok_status();
    }
  }
  const auto w = m.tensors.find("weight"), b = m.tensors.find("bias");
  if (w != m.tensors.end() && b != m.tensors.end() && w->second.shape().rank() == 4 && b->second.shape().rank() == 1) {
    TS_ASSIGN_OR_RETURN(b->second, b->second.view(Shape{1, 1, 1, b->second.shape()[0]}));
  }
  for (auto& [name, c] : m.children) TS_RETURN_IF_ERROR(walk(path.empty() ? name : path + "." + name, c, hook));
  return ok_status();
}

}  // namespace

StatusOr<ModuleParameters> preprocess_model_parameters(const WeightMap& state_dict,
                                                       const CustomPreprocessor& custom_preprocessor) {
  ModuleParameters root;
  for (const auto& [name, t] : state_dict) {
    if (name.empty() || name.front() == '.' || name.back() == '.' || name.find("..") != std::string::npos)
      return invalid_argument_error("preprocess_model_parameters: '{}' is not a dotted parameter name", name);
    ModuleParameters* m = &root;
    std::string_view rest(name);
    for (size_t dot; (dot = rest.find('.')) != std::string_view::npos; rest.remove_prefix(dot + 1))
      m = &m->children[std::string(rest.substr(0, dot))];
    m->tensors.emplace(std::string(rest), t);
  }
  TS_RETURN_IF_ERROR(walk("", root, custom_preprocessor));
  return root;
}

}  // namespace tessera::cnn
