// Writing compiled images: the models' graphs and options into the
// FlatBuffers metadata (image.fbs), their constants into the weights section.
#include <dnnl.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <set>
#include <unordered_map>

#include "image_format.h"
#include "image_generated.h"
#include "tessera/base/cpu_features.h"
#include "tessera/device/device.h"
#include "tessera/image/image.h"
#include "tessera/numerics/bfloat16.h"
#include "tessera/ops/conv2d_weights.h"
#include "tessera/tensor/tensor.h"

namespace tessera::image {

namespace {

using flatbuffers::FlatBufferBuilder;
using flatbuffers::Offset;

// True where every value is an integer in [-128, 127] and none is -0.0: an
// int8 byte holds each exactly (a QDQ model's quantized weights). Small
// constants (a bias of zeros, an exponent of 2) stay float32: the bytes
// saved are nothing, and int8 storage makes the image format 3.
inline constexpr size_t kInt8StorageMinValues = 1024;
bool holds_int8(std::span<const float> v) {
  return v.size() >= kInt8StorageMinValues && std::all_of(v.begin(), v.end(), [](float x) {
           return x >= -128.0f && x <= 127.0f && x == static_cast<float>(static_cast<int8_t>(x)) &&
                  (x != 0.0f || !std::signbit(x));
         });
}

std::string cpu_model_name() {
  std::ifstream f("/proc/cpuinfo");
  for (std::string line; std::getline(f, line);)
    if (line.starts_with("model name") && line.find(':') != std::string::npos) return line.substr(line.find(':') + 2);
  return "";
}

class Writer {
 public:
  explicit Writer(bool dedup) : dedup_(dedup) {}

  Offset<fb::Image> image(const ImageHeader& h, std::span<const ImageModel* const> models) {
    std::vector<Offset<fb::Model>> ms;
    for (const ImageModel* m : models) ms.push_back(model(*m));
    const auto version = fbb.CreateString(h.tessera_version), commit = fbb.CreateString(h.tessera_commit);
    const auto tgt = target(h.target);
    const auto isa = fbb.CreateString(h.kernel_isa), features = fbb.CreateString(h.cpu_features),
               cpu = fbb.CreateString(h.cpu_model);
    return fb::CreateImage(fbb, version, commit, tgt, isa, features, cpu, fbb.CreateVector(ms));
  }

  FlatBufferBuilder fbb{1 << 16};
  std::vector<uint8_t> weights;
  bool uses_int8 = false;  // INT8 storage, which format 2 readers lack

 private:
  // Appends `n` bytes to the weights section (or finds them there) and
  // returns their offset.
  uint64_t blob(const void* p, size_t n, uint64_t alignment = format::kTensorAlignment) {
    const uint32_t key = format::crc32_of({static_cast<const uint8_t*>(p), n});
    if (dedup_) {
      auto [lo, hi] = seen_.equal_range(key);
      for (auto it = lo; it != hi; ++it)
        if (it->second.second == n && it->second.first % alignment == 0 &&
            (n == 0 || std::memcmp(weights.data() + it->second.first, p, n) == 0))
          return it->second.first;
    }
    const uint64_t at = format::align_up(weights.size(), alignment);
    weights.resize(at + n);
    if (n) std::memcpy(weights.data() + at, p, n);
    seen_.emplace(key, std::make_pair(at, n));
    return at;
  }

  // `rounded`: stored as the model's conv weights dtype (bfloat16, or the
  // block-float tiles of a Conv weight), the values the kernels round to.
  // `int8`: integer values may take INT8 storage (not a prepared conv's
  // bias, which loading maps as float32).
  Offset<fb::Tensor> tensor(const graph::HostTensor& t, std::optional<DataType> rounded = std::nullopt,
                            bool int8 = true) {
    const bool f = t.type == graph::ElemType::FLOAT32;
    if (f && rounded && is_block_float(*rounded)) {
      const std::vector<uint32_t> d(t.dims.begin(), t.dims.end());
      StatusOr<Tensor> tiles = conv2d_weight_tiles(t.f, Shape(std::span<const uint32_t>(d)), *rounded);
      if (tiles.ok()) {
        const uint64_t n = tiles->spec().storage_bytes();
        const uint64_t at = blob(tiles->host_data(), n);
        return fb::CreateTensor(fbb, fb::ElemType::FLOAT32, fbb.CreateVector(t.dims),
                                *rounded == DataType::BFLOAT8_B   ? fb::Storage::BFLOAT8_B
                                : *rounded == DataType::BFLOAT4_B ? fb::Storage::BFLOAT4_B
                                                                  : fb::Storage::BFLOAT2_B,
                                at, n);
      }  // (not a conv weight's dims: stored as float32 below)
    }
    if (f && int8 && holds_int8(t.f)) {
      std::vector<int8_t> b(t.f.begin(), t.f.end());
      const uint64_t at = blob(b.data(), b.size());
      uses_int8 = true;
      return fb::CreateTensor(fbb, fb::ElemType::FLOAT32, fbb.CreateVector(t.dims), fb::Storage::INT8, at, b.size());
    }
    if (f && rounded == DataType::BFLOAT16) {
      std::vector<uint16_t> b(t.f.size());
      float_to_bfloat16(t.f.data(), b.data(), b.size());
      const uint64_t at = blob(b.data(), b.size() * 2);
      return fb::CreateTensor(fbb, fb::ElemType::FLOAT32, fbb.CreateVector(t.dims), fb::Storage::BFLOAT16, at,
                              b.size() * 2);
    }
    const size_t n = f ? t.f.size() * sizeof(float) : t.i.size() * sizeof(int64_t);
    const uint64_t at = f ? blob(t.f.data(), n) : blob(t.i.data(), n);
    return fb::CreateTensor(fbb, f ? fb::ElemType::FLOAT32 : fb::ElemType::INT64, fbb.CreateVector(t.dims),
                            f ? fb::Storage::FLOAT32 : fb::Storage::INT64, at, n);
  }

  Offset<fb::Attribute> attribute(const std::string& name, const graph::Attribute& a) {
    const auto n = fbb.CreateString(name), s = fbb.CreateString(a.s);
    const auto ints = fbb.CreateVector(a.ints);
    const auto floats = fbb.CreateVector(a.floats);
    const auto t = a.t ? tensor(*a.t) : Offset<fb::Tensor>();
    const auto strings = fbb.CreateVectorOfStrings(a.strings);
    const auto sub = a.kind == graph::Attribute::Kind::GRAPH && a.g ? plain_graph(*a.g) : Offset<fb::Graph>();
    return fb::CreateAttribute(fbb, n, static_cast<fb::AttrKind>(a.kind), a.i, a.f, s, ints, floats, t, strings, sub);
  }

  // A graph with its constants in float32 / int64 (a host tail, If's branches).
  Offset<fb::Graph> plain_graph(const graph::Graph& g) {
    return graph(g, runtime::CompileOptions{}, std::vector<bool>(g.values.size(), false));
  }

  Offset<fb::Tail> tail(const graph::HostTail& t) {
    const graph::HostTail::Parts p = t.parts();
    const auto g = plain_graph(p.tail);
    return fb::CreateTail(fbb, g, fbb.CreateVectorOfStrings(p.names), fbb.CreateVector(p.source), p.prefix_outputs,
                          fbb.CreateVector(p.boundary), fbb.CreateVector(p.pos), fbb.CreateString(p.first));
  }

  // Constants only conv weights read, in a model whose conv weights are
  // bfloat16 or block-float: every conv rounds them to that dtype (rounding
  // again leaves the result as it is), so that is all an image needs.
  // Block-float applies to Conv weights only (conv2d_weights.h's layout);
  // ConvTranspose weights then stay float32.
  static std::vector<bool> rounded_weights(const graph::Graph& g, const runtime::CompileOptions& o) {
    std::vector<bool> out(g.values.size(), false);
    const bool bf = is_block_float(o.weights_dtype);
    // (Per-op precision gives ops their own weights formats: all stay float32.)
    if ((o.weights_dtype != DataType::BFLOAT16 && !bf) || !o.precision.empty()) return out;
    std::vector<int> readers(g.values.size(), 0), weight_reads(g.values.size(), 0);
    for (const graph::Node& n : g.nodes)
      for (size_t k = 0; k < n.inputs.size(); ++k) {
        if (n.inputs[k] < 0) continue;
        ++readers[static_cast<size_t>(n.inputs[k])];
        if (k == 1 && (n.op_type == "Conv" || (!bf && n.op_type == "ConvTranspose")))
          ++weight_reads[static_cast<size_t>(n.inputs[k])];
      }
    for (size_t v = 0; v < g.values.size(); ++v)
      out[v] = g.values[v].constant && readers[v] > 0 && readers[v] == weight_reads[v] &&
               std::find(g.outputs.begin(), g.outputs.end(), static_cast<int>(v)) == g.outputs.end();
    return out;
  }

  Offset<fb::Graph> graph(const graph::Graph& g, const runtime::CompileOptions& o, const std::vector<bool>& elide) {
    const std::vector<bool> rounded = rounded_weights(g, o);
    std::vector<Offset<fb::Value>> values;
    for (size_t id = 0; id < g.values.size(); ++id) {
      const graph::Value& v = g.values[id];
      const auto name = fbb.CreateString(v.name);
      const auto dims = fbb.CreateVector(v.dims);
      Offset<fb::Tensor> c;
      if (v.constant && elide[id])
        c = fb::CreateTensor(fbb, fb::ElemType::FLOAT32, fbb.CreateVector(v.constant->dims), fb::Storage::PREPARED, 0,
                             0);
      else if (v.constant)
        c = tensor(*v.constant, rounded[id] ? std::optional(o.weights_dtype) : std::nullopt);
      values.push_back(fb::CreateValue(fbb, name, static_cast<fb::ElemType>(v.type), dims, v.has_shape, c));
    }
    std::vector<Offset<fb::Node>> nodes;
    for (const graph::Node& n : g.nodes) {
      std::vector<Offset<fb::Attribute>> attrs;
      for (const auto& [k, a] : n.attrs) attrs.push_back(attribute(k, a));
      nodes.push_back(fb::CreateNode(fbb, fbb.CreateString(n.name), fbb.CreateString(n.op_type),
                                     fbb.CreateVector(n.inputs), fbb.CreateVector(n.outputs), fbb.CreateVector(attrs)));
    }
    return fb::CreateGraph(fbb, g.opset, fbb.CreateVector(values), fbb.CreateVector(nodes), fbb.CreateVector(g.inputs),
                           fbb.CreateVector(g.outputs));
  }

  Offset<fb::Options> options(const runtime::CompileOptions& o) {
    return fb::CreateOptions(
        fbb, fbb.CreateString(data_type_name(o.dtype)), fbb.CreateString(data_type_name(o.weights_dtype)),
        fbb.CreateString(math_fidelity_name(o.math_fidelity)), o.allow_fallback,
        static_cast<int8_t>(o.apply_conv_sharding ? *o.apply_conv_sharding : -1),
        o.micro_batch ? static_cast<int32_t>(*o.micro_batch) : -1, o.micro_batch_cache_bytes,
        o.precision.empty() ? 0 : fbb.CreateString(runtime::precision_config_to_json(o.precision)),
        o.numerics == runtime::Numerics::kFast ? 0 : fbb.CreateString(runtime::numerics_name(o.numerics)));
  }

  Offset<fb::Report> report(const ImageModel& m) {
    const runtime::CompileReport& r = m.report;
    std::vector<Offset<fb::Pass>> passes;
    for (const auto& p : r.passes) passes.push_back(fb::CreatePass(fbb, fbb.CreateString(p.pass), p.rewrites));
    return fb::CreateReport(fbb, fbb.CreateVector(passes), fbb.CreateVectorOfStrings(r.fallbacks), r.device_ops,
                            r.layout_conversions, r.conv_flops, fbb.CreateVectorOfStrings(r.conv_plans),
                            m.resident_dram_bytes, m.resident_l1_bytes, fbb.CreateVectorOfStrings(m.conv_kernels));
  }

  Offset<fb::PreparedWeights> prepared(const PreparedBlob& p) {
    const std::span<const uint8_t> b = p.bytes();
    const uint64_t at = blob(b.data(), b.size(), format::kWeightsAlignment);
    const std::vector<int64_t> dims(p.spec.shape.dims().begin(), p.spec.shape.dims().end());
    const auto bt = tensor(p.bias, std::nullopt, /*int8=*/false);
    return fb::CreatePreparedWeights(
        fbb, fbb.CreateString(p.node), fbb.CreateString(p.key), fbb.CreateString(p.selection), fbb.CreateVector(dims),
        fbb.CreateString(data_type_name(p.spec.dtype)), fbb.CreateString(layout_name(p.spec.layout)), at, b.size(), bt);
  }

  Offset<fb::Model> model(const ImageModel& m) {
    const auto name = fbb.CreateString(m.name);
    const auto o = options(m.options);
    const auto g = graph(m.graph, m.options, elided(m));
    const auto r = report(m);
    std::vector<Offset<fb::PreparedWeights>> ps;
    for (const PreparedBlob& p : m.prepared) ps.push_back(prepared(p));
    const auto t = m.tail ? tail(*m.tail) : Offset<fb::Tail>();
    return fb::CreateModel(fbb, name, o, g, r, fbb.CreateVector(ps), fbb.CreateString(m.prepared_for), t);
  }

  // Constants that only prepared weights serve: read by nothing but the
  // weight and bias slots of convs whose weights are prepared.
  static std::vector<bool> elided(const ImageModel& m) {
    const graph::Graph& g = m.graph;
    std::vector<bool> out(g.values.size(), false);
    if (m.prepared.empty()) return out;
    std::set<std::string> prepared;
    for (const PreparedBlob& p : m.prepared) prepared.insert(p.node);
    std::vector<bool> other_reader(g.values.size(), false);
    for (const graph::Node& n : g.nodes)
      for (size_t k = 0; k < n.inputs.size(); ++k)
        if (n.inputs[k] >= 0) {
          const size_t v = static_cast<size_t>(n.inputs[k]);
          if ((k == 1 || k == 2) && prepared.contains(n.name))
            out[v] = true;
          else
            other_reader[v] = true;
        }
    for (int o : g.outputs) other_reader[static_cast<size_t>(o)] = true;
    for (size_t v = 0; v < out.size(); ++v) out[v] = out[v] && !other_reader[v] && g.values[v].constant;
    return out;
  }

  Offset<fb::Target> target(const DeviceDescriptor& d) {
    std::vector<Offset<fb::CoreCoord>> disabled;
    for (const CoreCoord& c : d.disabled_cores) disabled.push_back(fb::CreateCoreCoord(fbb, c.x, c.y));
    return fb::CreateTarget(fbb, fbb.CreateString(d.name), d.grid.x, d.grid.y, d.l1_size_per_core, d.shared_cache_size,
                            d.num_dram_banks, d.dram_bank_size, d.l1_alignment, d.dram_alignment, d.dram_page_alignment,
                            fbb.CreateString(d.isa), fbb.CreateVector(disabled), d.host_cores, d.emulated);
  }

  bool dedup_;
  std::unordered_multimap<uint32_t, std::pair<uint64_t, uint64_t>> seen_;  // crc -> (offset, bytes)
};

}  // namespace

ImageHeader header_for(const Device& device) {
  ImageHeader h;
  h.tessera_version = TESSERA_VERSION;
  h.tessera_commit = TESSERA_COMMIT;
  h.target = device.descriptor();
  h.kernel_isa = std::string(kernel_isa_name(kernel_isa()));
  h.cpu_features = cpu_features().to_string();
  h.cpu_model = cpu_model_name();
  return h;
}

std::string prepared_weights_key(const Device& device) {
  const dnnl_version_t* v = dnnl_version();
  return fmt::format("{} kernels on {} | {} workers | oneDNN {}.{}.{}", kernel_isa_name(kernel_isa()),
                     cpu_features().to_string(), device.workers().num_threads(), v->major, v->minor, v->patch);
}

StatusOr<ImageModel> compile_model(std::string name, graph::Graph graph, Device& device,
                                   const runtime::CompileOptions& options, bool portable) {
  if (!options.intermediates_to_save.empty())
    return invalid_argument_error(
        "an image returns its model's outputs; intermediates_to_save (taps) are not stored: "
        "compile the model itself with them");
  ImageModel m;
  m.name = std::move(name);
  m.options = options;
  std::vector<graph::PassReport> passes;
  if (options.optimize) passes = graph::optimize(graph);
  runtime::CompileOptions as_loaded = options;
  as_loaded.optimize = false;  // what load_model does with the stored graph
  const uint64_t dram0 = device.memory_stats(BufferType::DRAM).allocated_bytes;
  const uint64_t l10 = device.memory_stats(BufferType::L1).allocated_bytes;
  TS_ASSIGN_OR_RETURN(auto compiled, runtime::CompiledModel::compile(graph, device, as_loaded));
  m.resident_dram_bytes = device.memory_stats(BufferType::DRAM).allocated_bytes - dram0;
  m.resident_l1_bytes = device.memory_stats(BufferType::L1).allocated_bytes - l10;
  m.report = compiled->report();
  m.report.passes = std::move(passes);
  // One run on zeros chooses each conv's kernel on this CPU (compile ran it with a chooser).
  if (!options.conv_chooser) TS_RETURN_IF_ERROR(compiled->prepare());
  for (const std::string& s : compiled->conv_selections()) m.conv_kernels.push_back(s.substr(0, s.find('\n')));
  const std::vector<runtime::PreparedLayer> prepared = compiled->prepared_weights();
  // The packed weights stay resident too.
  for (const runtime::PreparedLayer& l : prepared)
    m.resident_dram_bytes += l.weights.weight.spec().storage_bytes() + l.weights.bias.spec().storage_bytes();
  if (!portable) {
    m.prepared_for = prepared_weights_key(device);
    for (const runtime::PreparedLayer& l : prepared) {
      PreparedBlob b{.node = l.node, .key = l.weights.key, .selection = l.selection, .spec = l.weights.weight.spec()};
      b.spec.memory_config = DRAM_MEMORY_CONFIG;
      TS_ASSIGN_OR_RETURN(Tensor w, l.weights.weight.cpu());
      const auto* p = reinterpret_cast<const uint8_t*>(w.host_data());
      b.owned.assign(p, p + w.spec().storage_bytes());
      TS_ASSIGN_OR_RETURN(Tensor bias, l.weights.bias.cpu());
      if (bias.dtype() != DataType::FLOAT32 || bias.layout() != Layout::ROW_MAJOR)
        return internal_error("{}: prepared bias {}, expected float32 rows", l.node, bias.spec().to_string());
      TS_ASSIGN_OR_RETURN(std::vector<float> bv, bias.to_vector());
      const auto bd = bias.shape().dims();
      b.bias = graph::HostTensor::floats(std::vector<int64_t>(bd.begin(), bd.end()), std::move(bv));
      m.prepared.push_back(std::move(b));
    }
  }
  m.graph = std::move(graph);
  return m;
}

StatusOr<std::vector<uint8_t>> serialize_image(const ImageHeader& header, std::span<const ImageModel* const> models,
                                               const WriteOptions& options) {
  if (models.empty()) return invalid_argument_error("an image holds at least one model, got none");
  std::set<std::string> names;
  for (const ImageModel* m : models) {
    if (m->name.empty()) return invalid_argument_error("every model of an image needs a name; one has none");
    if (!names.insert(m->name).second)
      return invalid_argument_error("two models of the image are named '{}'; names must be unique", m->name);
  }
  Writer w(options.dedup_weights);
  w.fbb.Finish(w.image(header, models), fb::ImageIdentifier());
  const std::span<const uint8_t> meta(w.fbb.GetBufferPointer(), w.fbb.GetSize());
  format::Preamble p{};
  std::memcpy(p.magic, format::kMagic, sizeof p.magic);
  const bool tails = std::any_of(models.begin(), models.end(), [](const ImageModel* m) { return m->tail.has_value(); });
  p.format_major =
      header.format_major == kFormatMajor && !tails && !w.uses_int8 ? kFormatMajorWithoutTail : header.format_major;
  p.format_minor = header.format_minor;
  p.preamble_bytes = format::kPreambleBytes;
  p.meta_offset = format::kPreambleBytes;
  p.meta_bytes = meta.size();
  p.weights_offset = format::align_up(p.meta_offset + p.meta_bytes, format::kWeightsAlignment);
  p.weights_bytes = w.weights.size();
  p.meta_crc = format::crc32_of(meta);
  p.weights_crc = format::crc32_of(w.weights);
  p.preamble_crc = format::preamble_crc(p);
  std::vector<uint8_t> out(p.weights_offset + p.weights_bytes, 0);
  std::memcpy(out.data(), &p, sizeof p);
  std::memcpy(out.data() + p.meta_offset, meta.data(), meta.size());
  if (!w.weights.empty()) std::memcpy(out.data() + p.weights_offset, w.weights.data(), w.weights.size());
  return out;
}

Status write_image(const std::string& path, const ImageHeader& header, std::span<const ImageModel* const> models,
                   const WriteOptions& options) {
  TS_ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, serialize_image(header, models, options));
  // Written beside the target and renamed over it: a reader never sees half an image.
  const std::string tmp = path + ".partial";
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) return invalid_argument_error("cannot write '{}': {}", tmp, std::strerror(errno));
  const bool wrote = std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
  const int err = errno;
  if (std::fclose(f) != 0 || !wrote) {
    std::remove(tmp.c_str());
    return resource_exhausted_error("writing '{}' ({} bytes) failed: {}", tmp, bytes.size(), std::strerror(err));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return invalid_argument_error("cannot rename '{}' to '{}': {}", tmp, path, std::strerror(errno));
  }
  return ok_status();
}

}  // namespace tessera::image
