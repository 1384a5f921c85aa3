// Reading compiled images: the preamble and checksums first, then the
// FlatBuffers verifier, then every offset and id the metadata holds, before
// anything is trusted.
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <set>

#include "image_format.h"
#include "image_generated.h"
#include "tessera/base/aligned.h"
#include "tessera/base/thread_pool.h"
#include "tessera/graph/shape_inference.h"
#include "tessera/image/image.h"
#include "tessera/numerics/bfloat16.h"
#include "tessera/ops/conv2d_weights.h"

namespace tessera::image {

namespace {

template <typename... Args>
Status damaged(fmt::format_string<Args...> f, Args&&... args) {
  return Status(StatusCode::kDataLoss, fmt::format(f, std::forward<Args>(args)...));
}

std::string str(const flatbuffers::String* s) { return s ? s->str() : std::string(); }

template <typename T>
std::vector<T> vec(const flatbuffers::Vector<T>* v) {
  return v ? std::vector<T>(v->begin(), v->end()) : std::vector<T>();
}

std::vector<std::string> strings(const flatbuffers::Vector<flatbuffers::Offset<flatbuffers::String>>* v) {
  std::vector<std::string> out;
  if (v)
    for (const auto* s : *v) out.push_back(str(s));
  return out;
}

StatusOr<runtime::CompileOptions> options_of(const fb::Options* o, const std::string& model) {
  runtime::CompileOptions c;
  if (!o) return damaged("model '{}': no compile options in section 'meta'", model);
  const auto dtype = parse_data_type(str(o->dtype())), wdtype = parse_data_type(str(o->weights_dtype()));
  if (!dtype || !wdtype)
    return damaged("model '{}': compile options name dtypes '{}' / '{}', expected Tessera dtype names", model,
                   str(o->dtype()), str(o->weights_dtype()));
  c.dtype = *dtype, c.weights_dtype = *wdtype;
  const auto fidelity = parse_math_fidelity(str(o->math_fidelity()));
  if (!fidelity) return damaged("model '{}': unknown math fidelity '{}'", model, str(o->math_fidelity()));
  c.math_fidelity = *fidelity;
  c.allow_fallback = o->allow_fallback();
  if (o->apply_conv_sharding() >= 0) c.apply_conv_sharding = o->apply_conv_sharding() != 0;
  if (o->micro_batch() >= 0) c.micro_batch = static_cast<uint32_t>(o->micro_batch());
  c.micro_batch_cache_bytes = o->micro_batch_cache_bytes();
  if (o->precision()) {
    StatusOr<runtime::PrecisionConfig> p = runtime::parse_precision_config(str(o->precision()));
    if (!p.ok()) return damaged("model '{}': its precision rules do not parse: {}", model, p.status().message());
    c.precision = std::move(*p);
  }
  if (o->numerics()) {
    const auto n = runtime::parse_numerics(str(o->numerics()));
    if (!n) return damaged("model '{}': unknown numerics '{}'", model, str(o->numerics()));
    c.numerics = *n;
  }
  c.optimize = false;  // the stored graph is the passes' result
  return c;
}

runtime::CompileReport report_of(const fb::Report* r) {
  runtime::CompileReport out;
  if (!r) return out;
  if (r->passes())
    for (const auto* p : *r->passes()) out.passes.push_back({str(p->name()), p->rewrites()});
  out.fallbacks = strings(r->fallbacks());
  out.device_ops = r->device_ops();
  out.layout_conversions = r->layout_conversions();
  out.conv_flops = r->conv_flops();
  out.conv_plans = strings(r->conv_plans());
  return out;
}

DeviceDescriptor target_of(const fb::Target* t) {
  DeviceDescriptor d;
  if (!t) return d;
  d.name = str(t->name());
  d.grid = {t->grid_x(), t->grid_y()};
  d.l1_size_per_core = t->l1_size_per_core();
  d.shared_cache_size = t->shared_cache_size();
  d.num_dram_banks = t->num_dram_banks();
  d.dram_bank_size = t->dram_bank_size();
  d.l1_alignment = t->l1_alignment();
  d.dram_alignment = t->dram_alignment();
  d.dram_page_alignment = t->dram_page_alignment();
  d.isa = str(t->isa());
  if (t->disabled_cores())
    for (const auto* c : *t->disabled_cores()) d.disabled_cores.push_back({c->x(), c->y()});
  d.host_cores = t->host_cores();
  d.emulated = t->emulated();
  return d;
}

const char* storage_name(fb::Storage s) {
  switch (s) {
    case fb::Storage::FLOAT32:
      return "float32";
    case fb::Storage::INT64:
      return "int64";
    case fb::Storage::BFLOAT16:
      return "bfloat16";
    case fb::Storage::PREPARED:
      return "prepared";
    case fb::Storage::BFLOAT8_B:
      return "bfloat8_b";
    case fb::Storage::BFLOAT4_B:
      return "bfloat4_b";
    case fb::Storage::BFLOAT2_B:
      return "bfloat2_b";
    case fb::Storage::INT8:
      return "int8";
  }
  return "unknown";
}

bool is_block_storage(fb::Storage s) {
  return s == fb::Storage::BFLOAT8_B || s == fb::Storage::BFLOAT4_B || s == fb::Storage::BFLOAT2_B;
}

// Checks a tensor reference against the weights section: a known storage
// matching its type, dims whose volume fits, bytes = volume * element size,
// inside the section.
// FlatBuffers' verifier checks the alignment of scalars and of a vector's
// length, not of its elements: a forged table can place 8-byte elements
// off their alignment, which reading would not survive on every CPU.
bool aligned(const flatbuffers::Vector<int64_t>* v) {
  // (An empty vector may sit anywhere: it has no element to read.)
  return !v || v->size() == 0 || reinterpret_cast<uintptr_t>(v->Data()) % alignof(int64_t) == 0;
}

// The tiles a block-float Conv weight is stored as (conv2d_weights.h), or
// nullopt for dims that are not a conv weight's.
std::optional<TensorSpec> block_float_tiles(const fb::Tensor* t) {
  if (!t->dims() || t->dims()->size() != 4) return std::nullopt;
  uint64_t rows = 1;
  for (uint32_t k = 0; k < 4; ++k) {
    const int64_t d = t->dims()->Get(k);
    if (d <= 0 || d > (int64_t{1} << 20)) return std::nullopt;
    if (k > 0) rows *= static_cast<uint64_t>(d);
  }
  if (rows > (uint64_t{1} << 30)) return std::nullopt;
  return TensorSpec{Shape{1, 1, static_cast<uint32_t>(rows), static_cast<uint32_t>(t->dims()->Get(0))},
                    t->storage() == fb::Storage::BFLOAT8_B   ? DataType::BFLOAT8_B
                    : t->storage() == fb::Storage::BFLOAT4_B ? DataType::BFLOAT4_B
                                                             : DataType::BFLOAT2_B,
                    Layout::TILE, DRAM_MEMORY_CONFIG};
}

Status check_tensor(const fb::Tensor* t, uint64_t weights_bytes, const std::string& what, bool prepared_ok = false) {
  if (!t->dims()) return damaged("{}: a constant with no dims", what);
  if (!aligned(t->dims())) return damaged("{}: misaligned dims", what);
  uint64_t volume = 1;
  for (int64_t d : *t->dims()) {
    if (d < 0 || d > (int64_t{1} << 40) || (d && volume > (uint64_t{1} << 40) / static_cast<uint64_t>(d)))
      return damaged("{}: a constant with dims out of range", what);
    volume *= static_cast<uint64_t>(d);
  }
  if (t->storage() == fb::Storage::PREPARED) {  // a conv's: only its prepared weights are stored
    if (!prepared_ok || t->type() != fb::ElemType::FLOAT32 || t->offset() != 0 || t->bytes() != 0)
      return damaged("{}: a constant stored as prepared weights where only a value's float32 constant may be", what);
    return ok_status();
  }
  if (is_block_storage(t->storage())) {
    const std::optional<TensorSpec> tiles = block_float_tiles(t);
    if (!tiles || t->type() != fb::ElemType::FLOAT32)
      return damaged("{}: block-float storage for {} elements of dims {}, expected a conv weight's 4 dims", what,
                     volume, t->dims()->size());
    if (t->bytes() != tiles->storage_bytes())
      return damaged("{}: {} bytes for the tiles {}, which hold {}", what, t->bytes(), tiles->to_string(),
                     tiles->storage_bytes());
  } else {
    uint64_t elem = 0;
    if (t->type() == fb::ElemType::FLOAT32 && t->storage() == fb::Storage::FLOAT32) elem = 4;
    if (t->type() == fb::ElemType::FLOAT32 && t->storage() == fb::Storage::BFLOAT16) elem = 2;
    if (t->type() == fb::ElemType::FLOAT32 && t->storage() == fb::Storage::INT8) elem = 1;
    if (t->type() == fb::ElemType::INT64 && t->storage() == fb::Storage::INT64) elem = 8;
    if (!elem)
      return damaged("{}: element type {} stored as {}, which this Tessera cannot read", what,
                     static_cast<int>(t->type()), static_cast<int>(t->storage()));
    if (t->bytes() != volume * elem)
      return damaged("{}: {} bytes for {} elements of {} bytes", what, t->bytes(), volume, elem);
  }
  if (t->offset() % format::kTensorAlignment != 0)
    return damaged("{}: at offset {} of section 'weights', expected a multiple of {}", what, t->offset(),
                   format::kTensorAlignment);
  if (t->offset() > weights_bytes || t->bytes() > weights_bytes - t->offset())
    return damaged("{}: bytes [{}, +{}) outside section 'weights' ({} bytes)", what, t->offset(), t->bytes(),
                   weights_bytes);
  return ok_status();
}

template <typename T>
void resize_untouched(std::vector<T>& v, size_t n) {
  // Large arrays are first touched here (aligned.h).
  v.reserve(n);
  advise_huge_pages(v.data(), n * sizeof(T));
  v.resize(n);
}

graph::HostTensor decode_tensor(const fb::Tensor* t, std::span<const uint8_t> weights) {
  graph::HostTensor h;
  h.dims = vec(t->dims());
  const uint8_t* p = weights.data() + t->offset();
  if (t->storage() == fb::Storage::PREPARED) return h;  // dims only: prepared weights serve its readers
  if (is_block_storage(t->storage())) {
    const TensorSpec spec = *block_float_tiles(t);  // checked by check_tensor
    Tensor tiles = allocate_tensor_on_host(spec);
    std::memcpy(tiles.host_data(), p, t->bytes());
    const std::vector<uint32_t> d(h.dims.begin(), h.dims.end());
    h.f = conv2d_weights_from_tiles(tiles, Shape(std::span<const uint32_t>(d))).value();  // shapes checked above
    return h;
  }
  if (t->type() == fb::ElemType::INT64) h.type = graph::ElemType::INT64;
  if (t->bytes() == 0) return h;  // an empty constant (an If branch's (0, 4) boxes): no bytes to copy
  if (t->type() == fb::ElemType::INT64) {
    resize_untouched(h.i, t->bytes() / 8);
    std::memcpy(h.i.data(), p, t->bytes());
  } else if (t->storage() == fb::Storage::INT8) {
    resize_untouched(h.f, t->bytes());
    const auto* q = reinterpret_cast<const int8_t*>(p);
    std::copy(q, q + h.f.size(), h.f.begin());
  } else if (t->storage() == fb::Storage::BFLOAT16) {
    resize_untouched(h.f, t->bytes() / 2);
    bfloat16_to_float(reinterpret_cast<const uint16_t*>(p), h.f.data(), h.f.size());  // aligned (check_tensor)
  } else {
    resize_untouched(h.f, t->bytes() / 4);
    std::memcpy(h.f.data(), p, t->bytes());
  }
  return h;
}

// A graph table with no prepared constants (a host tail, If's branches):
// every table present, every constant inside the weights, every value id in
// range, subgraphs likewise (nested at most kMaxGraphDepth deep).
constexpr int kMaxGraphDepth = 8;
Status check_plain_graph(const fb::Graph* g, uint64_t weights_bytes, const std::string& what, int depth = 0) {
  if (!g || !g->values() || !g->nodes() || !g->inputs() || !g->outputs())
    return damaged("{}: an incomplete graph", what);
  if (depth > kMaxGraphDepth) return damaged("{}: graphs nested more than {} deep", what, kMaxGraphDepth);
  const auto nv = static_cast<int>(g->values()->size());
  for (const fb::Value* v : *g->values()) {
    if (!aligned(v->dims())) return damaged("{}: value '{}' has misaligned dims", what, str(v->name()));
    if (v->constant())
      TS_RETURN_IF_ERROR(check_tensor(v->constant(), weights_bytes, fmt::format("{}: value '{}'", what, str(v->name()))));
  }
  for (const auto* ids : {g->inputs(), g->outputs()})
    for (int id : *ids)
      if (id < 0 || id >= nv) return damaged("{}: graph input/output {} of {} values", what, id, nv);
  for (const fb::Node* n : *g->nodes()) {
    for (const auto* ids : {n->inputs(), n->outputs()})
      if (ids)
        for (int id : *ids)
          if (id < -1 || id >= nv)
            return damaged("{}: node '{}' refers to value {}, the graph has {}", what, str(n->name()), id, nv);
    if (n->attrs())
      for (const fb::Attribute* a : *n->attrs()) {
        if (!aligned(a->ints())) return damaged("{}: node '{}' has a misaligned attribute", what, str(n->name()));
        if (a->t()) TS_RETURN_IF_ERROR(check_tensor(a->t(), weights_bytes, fmt::format("{}: node '{}'", what, str(n->name()))));
        if (a->kind() == fb::AttrKind::GRAPH)
          TS_RETURN_IF_ERROR(check_plain_graph(a->g(), weights_bytes,
                                               fmt::format("{}: node '{}' attribute '{}'", what, str(n->name()),
                                                           str(a->name())),
                                               depth + 1));
      }
  }
  return ok_status();
}

// The graph a table holds, as stored (check_plain_graph or Image::verify
// checked it at open).
StatusOr<graph::Graph> decode_graph(const fb::Graph* fg, std::span<const uint8_t> weights) {
  graph::Graph g;
  g.opset = fg->opset();
  for (const fb::Value* v : *fg->values()) {
    graph::Value val;
    val.name = str(v->name());
    val.type = v->type() == fb::ElemType::INT64 ? graph::ElemType::INT64 : graph::ElemType::FLOAT32;
    val.dims = vec(v->dims());
    val.has_shape = v->has_shape();
    if (v->constant()) val.constant = decode_tensor(v->constant(), weights);
    g.values.push_back(std::move(val));
  }
  for (const fb::Node* fn : *fg->nodes()) {
    graph::Node n;
    n.name = str(fn->name());
    n.op_type = str(fn->op_type());
    n.inputs = vec(fn->inputs());
    n.outputs = vec(fn->outputs());
    if (fn->attrs())
      for (const fb::Attribute* a : *fn->attrs()) {
        graph::Attribute at;
        if (a->kind() > fb::AttrKind::MAX) return damaged("node '{}': an attribute of unknown kind", n.name);
        at.kind = static_cast<graph::Attribute::Kind>(a->kind());
        at.i = a->i(), at.f = a->f(), at.s = str(a->s());
        at.ints = vec(a->ints()), at.floats = vec(a->floats());
        if (a->t()) at.t = decode_tensor(a->t(), weights);
        if (a->strings())
          for (const flatbuffers::String* s : *a->strings()) at.strings.push_back(str(s));
        if (a->kind() == fb::AttrKind::GRAPH) {
          if (!a->g()) return damaged("node '{}': graph attribute '{}' holds no graph", n.name, str(a->name()));
          TS_ASSIGN_OR_RETURN(graph::Graph sub, decode_graph(a->g(), weights));
          at.g = std::make_shared<const graph::Graph>(std::move(sub));
        }
        n.attrs[str(a->name())] = std::move(at);
      }
    g.nodes.push_back(std::move(n));
  }
  g.inputs = vec(fg->inputs());
  g.outputs = vec(fg->outputs());
  return g;
}

const fb::Image* root(std::span<const uint8_t> meta) { return fb::GetImage(meta.data()); }

// A prepared weights entry against the graph and the weights section: a conv
// node of the model, a device tensor spec whose bytes are stored 4096-aligned
// inside the section, a float32 bias.
StatusOr<TensorSpec> check_prepared(const fb::PreparedWeights* p, const fb::Graph* g, uint64_t weights_bytes,
                                    const std::string& model) {
  const std::string node = str(p->node());
  const std::string what = fmt::format("model '{}': the prepared weights of '{}'", model, node);
  bool conv = false;
  for (const fb::Node* n : *g->nodes())
    conv = conv || (str(n->name()) == node && (str(n->op_type()) == "Conv" || str(n->op_type()) == "ConvTranspose"));
  if (!conv) return damaged("{}: the graph has no Conv or ConvTranspose node of that name", what);
  const auto dtype = parse_data_type(str(p->weight_dtype()));
  const std::string layout = str(p->weight_layout());
  if (!dtype || (layout != "ROW_MAJOR" && layout != "TILE"))
    return damaged("{}: dtype '{}' and layout '{}', expected Tessera names", what, str(p->weight_dtype()), layout);
  if (!p->weight_dims() || !aligned(p->weight_dims()) || p->weight_dims()->size() == 0 ||
      p->weight_dims()->size() > static_cast<uint32_t>(Shape::kMaxRank))
    return damaged("{}: missing, misaligned or too many dims", what);
  std::vector<uint32_t> dims;
  for (int64_t d : *p->weight_dims()) {
    if (d <= 0 || d > (int64_t{1} << 31)) return damaged("{}: a dim of {}", what, d);
    dims.push_back(static_cast<uint32_t>(d));
  }
  TensorSpec spec{Shape(std::span<const uint32_t>(dims)), *dtype, layout == "TILE" ? Layout::TILE : Layout::ROW_MAJOR,
                  DRAM_MEMORY_CONFIG};
  if (spec.shape.volume() > (uint64_t{1} << 36) || !spec.validate().ok())
    return damaged("{}: not a valid tensor: {}", what, spec.to_string());
  if (p->weight_bytes() != spec.storage_bytes())
    return damaged("{}: {} bytes for {}, which holds {}", what, p->weight_bytes(), spec.to_string(),
                   spec.storage_bytes());
  if (p->weight_offset() % format::kWeightsAlignment != 0 || p->weight_offset() > weights_bytes ||
      p->weight_bytes() > weights_bytes - p->weight_offset())
    return damaged("{}: bytes [{}, +{}) of section 'weights' ({} bytes), expected inside it at a multiple of {}", what,
                   p->weight_offset(), p->weight_bytes(), weights_bytes, format::kWeightsAlignment);
  if (!p->bias() || p->bias()->type() != fb::ElemType::FLOAT32 || p->bias()->storage() != fb::Storage::FLOAT32)
    return damaged("{}: no float32 bias", what);
  TS_RETURN_IF_ERROR(check_tensor(p->bias(), weights_bytes, what + " bias"));
  return spec;
}

}  // namespace

struct Image::Mapping {
  void* addr = MAP_FAILED;
  size_t size = 0;
  int fd = -1;  // kept open: prepared weights map from it
  std::vector<uint8_t> owned;
  std::span<const uint8_t> bytes() const {
    return owned.empty() && addr != MAP_FAILED ? std::span(static_cast<const uint8_t*>(addr), size)
                                               : std::span<const uint8_t>(owned);
  }
  ~Mapping() {
    if (addr != MAP_FAILED) munmap(addr, size);
    if (fd >= 0) ::close(fd);
  }
};

Image::~Image() = default;

StatusOr<std::unique_ptr<Image>> Image::open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return not_found_error("cannot open image '{}': {}", path, std::strerror(errno));
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return invalid_argument_error("'{}' is not a regular file", path);
  }
  auto m = std::make_unique<Mapping>();
  m->size = static_cast<size_t>(st.st_size);
  if (m->size < format::kPreambleBytes) {
    ::close(fd);
    return damaged("'{}' is {} bytes; an image starts with a {}-byte preamble (truncated?)", path, m->size,
                   format::kPreambleBytes);
  }
  m->addr = mmap(nullptr, m->size, PROT_READ, MAP_PRIVATE, fd, 0);
  const int err = errno;
  m->fd = fd;
  if (m->addr == MAP_FAILED) return internal_error("cannot map '{}': {}", path, std::strerror(err));
  auto r = verify(std::move(m));
  if (!r.ok()) return r.status().annotate(path);
  return r;
}

StatusOr<std::unique_ptr<Image>> Image::from_bytes(std::vector<uint8_t> bytes) {
  auto m = std::make_unique<Mapping>();
  m->owned = std::move(bytes);
  TS_ASSIGN_OR_RETURN(std::unique_ptr<Image> img, verify(std::move(m)));
  TS_RETURN_IF_ERROR(img->verify_weights());
  return img;
}

Status Image::verify_weights(std::span<const WeightsView> views, ThreadPool* pool) const {
  if (weights_verified_.load(std::memory_order_acquire)) return ok_status();
  // The section in order: the views, and the image's own bytes around them.
  std::vector<WeightsView> sorted(views.begin(), views.end());
  std::sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) { return a.file_offset < b.file_offset; });
  std::vector<std::span<const uint8_t>> pieces;
  uint64_t at = 0;
  for (const WeightsView& v : sorted) {
    const uint64_t off = v.file_offset - weights_offset_;
    if (v.file_offset < weights_offset_ || off > weights_.size() || v.bytes.size() > weights_.size() - off)
      return invalid_argument_error("verify_weights: {} bytes at file offset {} leave the weights section [{}, {})",
                                    v.bytes.size(), v.file_offset, weights_offset_, weights_offset_ + weights_.size());
    const uint64_t end = off + v.bytes.size();
    if (end <= at) continue;  // (weights stored once for two layers: two views of the same bytes)
    if (off > at) pieces.push_back(weights_.subspan(at, off - at));
    const uint64_t skip = at > off ? at - off : 0;
    pieces.push_back({reinterpret_cast<const uint8_t*>(v.bytes.data()) + skip, v.bytes.size() - skip});
    at = end;
  }
  if (at < weights_.size()) pieces.push_back(weights_.subspan(at));
  // 1 MiB chunks, their CRCs in parallel, combined in order (zlib's crc32_combine).
  constexpr size_t kChunk = size_t{1} << 20;
  std::vector<std::span<const uint8_t>> chunks;
  for (std::span<const uint8_t> p : pieces)
    for (size_t o = 0; o < p.size(); o += kChunk) chunks.push_back(p.subspan(o, std::min(kChunk, p.size() - o)));
  std::vector<uint32_t> crcs(chunks.size());
  auto run = [&](uint32_t begin, uint32_t end) {
    for (uint32_t i = begin; i < end; ++i) crcs[i] = format::crc32_of(chunks[i]);
  };
  const auto n = static_cast<uint32_t>(chunks.size());
  if (pool)
    pool->parallel_for(n, 1, run);
  else
    run(0, n);
  uLong crc = 0;
  for (size_t i = 0; i < chunks.size(); ++i) crc = crc32_combine(crc, crcs[i], static_cast<z_off_t>(chunks[i].size()));
  if (crc != weights_crc_)
    return damaged("section 'weights': CRC-32 {:08x} recorded, {:08x} computed (the file is damaged)", weights_crc_,
                   static_cast<uint32_t>(crc));
  weights_verified_.store(true, std::memory_order_release);
  return ok_status();
}

StatusOr<std::unique_ptr<Image>> Image::verify(std::unique_ptr<Mapping> mapping) {
  const std::span<const uint8_t> file = mapping->bytes();
  if (file.size() < format::kPreambleBytes)
    return damaged("{} bytes; an image starts with a {}-byte preamble (truncated?)", file.size(),
                   format::kPreambleBytes);
  format::Preamble p;
  std::memcpy(&p, file.data(), sizeof p);
  if (std::memcmp(p.magic, format::kMagic, sizeof p.magic) != 0)
    return invalid_argument_error("not a Tessera image: expected the magic bytes 'TSIMAGE\\x1a', found '{}'",
                                  fmt::format("{:02x}", fmt::join(std::span(file.data(), 8), " ")));
  if (format::preamble_crc(p) != p.preamble_crc)
    return damaged("section 'preamble': CRC-32 {:08x} recorded, {:08x} computed (the file is damaged)", p.preamble_crc,
                   format::preamble_crc(p));
  if (p.format_major < kOldestFormatMajor || p.format_major > kFormatMajor)
    return failed_precondition_error(
        "image format {}.{}, this Tessera reads formats {}.x to {}.x (images of another major version must be "
        "compiled again from the model with this Tessera's `tessera compile`)",
        p.format_major, p.format_minor, kOldestFormatMajor, kFormatMajor);
  if (p.preamble_bytes != format::kPreambleBytes || p.meta_offset != format::kPreambleBytes)
    return damaged("section 'preamble': a {}-byte preamble and metadata at offset {}, expected {} and {}",
                   p.preamble_bytes, p.meta_offset, format::kPreambleBytes, format::kPreambleBytes);
  const uint64_t size = file.size();
  if (p.meta_bytes > size - p.meta_offset)
    return damaged("section 'meta': {} bytes at offset {} past the end of the {}-byte file (truncated?)", p.meta_bytes,
                   p.meta_offset, size);
  if (p.weights_offset % format::kWeightsAlignment != 0 || p.weights_offset < p.meta_offset + p.meta_bytes ||
      p.weights_offset > size || p.weights_bytes > size - p.weights_offset)
    return damaged(
        "section 'weights': {} bytes at offset {} (a multiple of 4096) do not fit the {}-byte file after the metadata "
        "(truncated?)",
        p.weights_bytes, p.weights_offset, size);
  auto img = std::unique_ptr<Image>(new Image());
  img->meta_ = file.subspan(p.meta_offset, p.meta_bytes);
  img->weights_ = file.subspan(p.weights_offset, p.weights_bytes);
  img->weights_offset_ = p.weights_offset;
  if (const uint32_t c = format::crc32_of(img->meta_); c != p.meta_crc)
    return damaged("section 'meta': CRC-32 {:08x} recorded, {:08x} computed (the file is damaged)", p.meta_crc, c);
  img->weights_crc_ = p.weights_crc;  // (checked before the weights are used: verify_weights)
  flatbuffers::Verifier v(img->meta_.data(), img->meta_.size());
  if (!fb::VerifyImageBuffer(v))
    return damaged("section 'meta': not a valid image table (FlatBuffers verification failed)");
  const fb::Image* r = root(img->meta_);
  ImageInfo& info = img->info_;
  info.header = {.format_major = p.format_major,
                 .format_minor = p.format_minor,
                 .tessera_version = str(r->tessera_version()),
                 .tessera_commit = str(r->tessera_commit()),
                 .target = target_of(r->target()),
                 .kernel_isa = str(r->kernel_isa()),
                 .cpu_features = str(r->cpu_features()),
                 .cpu_model = str(r->cpu_model())};
  info.file_bytes = size, info.meta_bytes = p.meta_bytes, info.weights_bytes = p.weights_bytes;
  if (!r->target()) return damaged("section 'meta': no target device");
  if (!r->models() || r->models()->size() == 0) return damaged("section 'meta': no models");
  for (const fb::Model* m : *r->models()) {
    ModelInfo mi;
    mi.name = str(m->name());
    TS_ASSIGN_OR_RETURN(mi.options, options_of(m->options(), mi.name));
    mi.report = report_of(m->report());
    if (m->report()) mi.resident_dram_bytes = m->report()->resident_dram_bytes();
    if (m->report()) mi.resident_l1_bytes = m->report()->resident_l1_bytes();
    if (m->report()) mi.conv_kernels = strings(m->report()->conv_kernels());
    const fb::Graph* g = m->graph();
    if (!g || !g->values() || !g->nodes() || !g->inputs() || !g->outputs())
      return damaged("model '{}': an incomplete graph in section 'meta'", mi.name);
    const int nv = static_cast<int>(g->values()->size());
    std::map<std::string, uint64_t> bytes;
    auto count = [&](const fb::Tensor* t, const std::string& what, bool value) -> Status {
      TS_RETURN_IF_ERROR(check_tensor(t, p.weights_bytes, fmt::format("model '{}': {}", mi.name, what), value));
      if (t->storage() != fb::Storage::PREPARED) bytes[storage_name(t->storage())] += t->bytes();
      ++mi.num_constants;
      return ok_status();
    };
    for (const fb::Value* v : *g->values()) {
      if (!aligned(v->dims())) return damaged("model '{}': value '{}' has misaligned dims", mi.name, str(v->name()));
      if (v->constant()) TS_RETURN_IF_ERROR(count(v->constant(), fmt::format("value '{}'", str(v->name())), true));
    }
    if (m->prepared())
      for (const fb::PreparedWeights* pw : *m->prepared()) {
        TS_RETURN_IF_ERROR(check_prepared(pw, g, p.weights_bytes, mi.name).status());
        ++mi.prepared_layers;
        mi.prepared_bytes += pw->weight_bytes() + pw->bias()->bytes();
        bytes["prepared"] += pw->weight_bytes() + pw->bias()->bytes();
      }
    mi.prepared_for = str(m->prepared_for());
    std::map<std::string, int> ops;
    for (const fb::Node* n : *g->nodes()) {
      ++ops[str(n->op_type())];
      for (const auto* ids : {n->inputs(), n->outputs()})
        if (ids)
          for (int id : *ids)
            if (id < -1 || id >= nv)
              return damaged("model '{}': node '{}' refers to value {}, the graph has {}", mi.name, str(n->name()), id,
                             nv);
      if (n->attrs())
        for (const fb::Attribute* a : *n->attrs()) {
          if (!aligned(a->ints()))
            return damaged("model '{}': node '{}' has a misaligned attribute", mi.name, str(n->name()));
          if (a->t()) TS_RETURN_IF_ERROR(count(a->t(), fmt::format("node '{}' attribute", str(n->name())), false));
          if (a->kind() == fb::AttrKind::GRAPH)
            TS_RETURN_IF_ERROR(check_plain_graph(a->g(), p.weights_bytes,
                                                 fmt::format("model '{}': node '{}'", mi.name, str(n->name()))));
        }
    }
    if (const fb::Tail* t = m->tail()) {
      TS_RETURN_IF_ERROR(check_plain_graph(t->graph(), p.weights_bytes, fmt::format("model '{}': host tail", mi.name)));
      mi.host_tail_nodes = static_cast<int>(t->graph()->nodes()->size());
      std::map<std::string, int> tail_ops;
      for (const fb::Node* n : *t->graph()->nodes()) ++tail_ops[str(n->op_type())];
      mi.host_tail_ops.assign(tail_ops.begin(), tail_ops.end());
      if (t->names())
        for (const flatbuffers::String* n : *t->names()) mi.model_outputs.push_back(str(n));
    }
    mi.op_counts.assign(ops.begin(), ops.end());
    mi.weight_bytes.assign(bytes.begin(), bytes.end());
    for (const auto* ids : {g->inputs(), g->outputs()})
      for (int id : *ids) {
        if (id < 0 || id >= nv) return damaged("model '{}': graph input/output {} of {} values", mi.name, id, nv);
        const fb::Value* v = g->values()->Get(static_cast<flatbuffers::uoffset_t>(id));
        (ids == g->inputs() ? mi.inputs : mi.outputs)
            .push_back({str(v->name()), vec(v->dims()), v->type() == fb::ElemType::FLOAT32 ? "float32" : "int64"});
      }
    info.models.push_back(std::move(mi));
  }
  img->mapping_ = std::move(mapping);
  return img;
}

int Image::file_descriptor() const { return mapping_->fd; }

StatusOr<size_t> Image::find_model(std::string_view name) const {
  std::string names;
  for (size_t i = 0; i < info_.models.size(); ++i) {
    if (info_.models[i].name == name) return i;
    names += (i ? ", '" : "'") + info_.models[i].name + "'";
  }
  return not_found_error("the image has no model '{}' (its models: {})", name, names);
}

StatusOr<ImageModel> Image::model(size_t index) const {
  if (index >= info_.models.size())
    return out_of_range_error("model {} of an image with {} model(s)", index, info_.models.size());
  const fb::Model* m = root(meta_)->models()->Get(static_cast<flatbuffers::uoffset_t>(index));
  const fb::Graph* fg = m->graph();
  ImageModel out;
  out.name = info_.models[index].name;
  out.options = info_.models[index].options;
  out.report = info_.models[index].report;
  out.resident_dram_bytes = info_.models[index].resident_dram_bytes;
  out.resident_l1_bytes = info_.models[index].resident_l1_bytes;
  out.conv_kernels = info_.models[index].conv_kernels;
  out.prepared_for = info_.models[index].prepared_for;
  if (m->prepared())
    for (const fb::PreparedWeights* pw : *m->prepared()) {
      TS_ASSIGN_OR_RETURN(TensorSpec spec, check_prepared(pw, fg, weights_.size(), out.name));  // verified at open
      PreparedBlob b{.node = str(pw->node()), .key = str(pw->key()), .selection = str(pw->selection()), .spec = spec};
      b.mapped = weights_.subspan(pw->weight_offset(), pw->weight_bytes());
      b.file_offset = weights_offset_ + pw->weight_offset();
      b.bias = decode_tensor(pw->bias(), weights_);
      out.prepared.push_back(std::move(b));
    }
  TS_ASSIGN_OR_RETURN(out.graph, decode_graph(fg, weights_));
  graph::Graph& g = out.graph;
  // The graph as the compiler left it: in topological order, each value
  // produced once, every value read known, and the shapes shape inference
  // gives; anything else is a damaged or forged image, refused here rather
  // than trusted by the kernels.
  std::vector<bool> ready(g.values.size(), false);
  for (size_t v = 0; v < g.values.size(); ++v) ready[v] = g.values[v].constant.has_value();
  for (int i : g.inputs) {
    if (!g.values[static_cast<size_t>(i)].has_shape) return damaged("model '{}': input {} has no shape", out.name, i);
    ready[static_cast<size_t>(i)] = true;
  }
  for (size_t ni = 0; ni < g.nodes.size(); ++ni) {
    const graph::Node& n = g.nodes[ni];
    for (int in : n.inputs)
      if (in >= 0 && !ready[static_cast<size_t>(in)])
        return damaged("model '{}': {} reads value {} before anything produces it", out.name, n.label(), in);
    for (int o : n.outputs) {
      if (o < 0 || ready[static_cast<size_t>(o)])
        return damaged("model '{}': {} writes value {}, produced already", out.name, n.label(), o);
      ready[static_cast<size_t>(o)] = true;
      g.values[static_cast<size_t>(o)].producer = static_cast<int>(ni);
    }
  }
  for (int o : g.outputs)
    if (!ready[static_cast<size_t>(o)]) return damaged("model '{}': output {} is never produced", out.name, o);
  // A constant stored as prepared weights has no values: only the weight and
  // bias of a conv with prepared weights may read it, and such a conv's input
  // must not be a constant (shape inference would evaluate it).
  std::set<std::string> prepared;
  for (const PreparedBlob& b : out.prepared) prepared.insert(b.node);
  auto elided = [&](int v) {
    const auto& c = g.values[static_cast<size_t>(v)].constant;
    return v >= 0 && c && c->size() != static_cast<size_t>(c->volume());
  };
  for (const graph::Node& n : g.nodes)
    for (size_t k = 0; k < n.inputs.size(); ++k)
      if (elided(n.inputs[k]) && ((k != 1 && k != 2) || (n.op_type != "Conv" && n.op_type != "ConvTranspose") ||
                                  !prepared.contains(n.name) || n.inputs[0] < 0 || g.is_constant(n.inputs[0])))
        return damaged("model '{}': {} reads '{}', whose values only prepared conv weights hold", out.name, n.label(),
                       g.values[static_cast<size_t>(n.inputs[k])].name);
  for (int o : g.outputs)
    if (elided(o)) return damaged("model '{}': output {} is a constant with no values", out.name, o);
  std::vector<std::vector<int64_t>> stored;
  for (const graph::Value& v : g.values) stored.push_back(v.dims);
  if (Status st = graph::infer_shapes(g); !st.ok()) return damaged("model '{}': {}", out.name, st.message());
  for (size_t v = 0; v < g.values.size(); ++v)
    if (g.values[v].dims != stored[v])
      return damaged("model '{}': value '{}' is stored as {}, its producer gives {}", out.name, g.values[v].name,
                     graph::dims_to_string(stored[v]), graph::dims_to_string(g.values[v].dims));
  if (const fb::Tail* t = m->tail()) {  // (check_plain_graph checked its graph at open)
    graph::HostTail::Parts parts;
    TS_ASSIGN_OR_RETURN(parts.tail, decode_graph(t->graph(), weights_));
    if (t->names())
      for (const flatbuffers::String* n : *t->names()) parts.names.push_back(str(n));
    parts.source = vec(t->source()), parts.boundary = vec(t->boundary()), parts.pos = vec(t->pos());
    parts.prefix_outputs = t->prefix_outputs();
    parts.first = str(t->first());
    auto tail = graph::HostTail::from_parts(std::move(parts));
    if (!tail.ok()) return damaged("model '{}': {}", out.name, tail.status().message());
    if (tail->num_prefix_outputs() != g.outputs.size())
      return damaged("model '{}': its host tail reads {} outputs of the device part, which has {}", out.name,
                     tail->num_prefix_outputs(), g.outputs.size());
    out.tail = std::move(*tail);
  }
  return out;
}

}  // namespace tessera::image
