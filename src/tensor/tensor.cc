#include "tessera/tensor/tensor.h"

#include <cstring>

#include "tessera/base/aligned.h"
#include "tessera/numerics/convert.h"
#include "tessera/numerics/tilize.h"

namespace tessera {

namespace {

// Logical rows x width (rows = volume / width) <-> the TILE 2D view where the
// second-to-last dim of every slice is padded to 32 rows.
struct Slices {
  uint64_t outer;
  uint32_t h, w, hp;
};
Slices slices_of(const Shape& s) {
  uint32_t w = s[-1], h = s.rank() >= 2 ? s[-2] : 1;
  return {s.volume() / (uint64_t{w} * h), h, w, static_cast<uint32_t>(align_up(h, kTileHeight))};
}

// Row-major elements (logical) -> tiles.
void tilize_logical(const std::byte* rm, const Shape& shape, std::byte* tiles, uint32_t es) {
  Slices s = slices_of(shape);
  const uint64_t slice_tiles = uint64_t{s.hp / 32} * div_up(s.w, 32);
  for (uint64_t o = 0; o < s.outer; ++o)
    tilize(rm + o * s.h * s.w * es, size_t{s.w} * es, s.h, s.w, tiles + o * slice_tiles * 1024 * es, es);
}

void untilize_logical(const std::byte* tiles, const Shape& shape, std::byte* rm, uint32_t es) {
  Slices s = slices_of(shape);
  const uint64_t slice_tiles = uint64_t{s.hp / 32} * div_up(s.w, 32);
  for (uint64_t o = 0; o < s.outer; ++o)
    untilize(tiles + o * slice_tiles * 1024 * es, s.h, s.w, rm + o * s.h * s.w * es, size_t{s.w} * es, es);
}

}  // namespace

StatusOr<uint64_t> Tensor::buffer_address() const {
  if (!buffer_) return failed_precondition_error("buffer_address: tensor {} is on the host", spec_.to_string());
  if (!buffer_->is_allocated())
    return failed_precondition_error("buffer_address: tensor {} has been deallocated", spec_.to_string());
  return buffer_->address();
}

StatusOr<Tensor> Tensor::view(const Shape& shape) const {
  if (spec_.layout != Layout::ROW_MAJOR || shape.volume() != spec_.shape.volume() || shape.rank() == 0)
    return failed_precondition_error("view: {} cannot be viewed as {} without moving data", spec_.to_string(),
                                     shape.to_string());
  TensorSpec spec = spec_;
  spec.shape = shape;
  auto dense = [&](const TensorSpec& s) {
    if (!buffer_) return true;  // host storage is packed
    const MemoryConfig& mc = s.memory_config;
    if (mc.is_sharded()) return false;
    const Device& dev = buffer_->device();
    const uint32_t banks =
        mc.buffer_type == BufferType::DRAM ? dev.descriptor().num_dram_banks : dev.descriptor().num_cores();
    return banks == 1 && (uint64_t{s.unit_cols()} * s.unit_bytes()) % dev.alignment(mc.buffer_type) == 0;
  };
  if (shape[-1] != spec_.shape[-1] && !(dense(spec_) && dense(spec)))
    return failed_precondition_error("view: {} cannot be viewed as {} without moving data", spec_.to_string(),
                                     shape.to_string());
  TS_RETURN_IF_ERROR(spec.validate());
  Tensor t = *this;
  t.spec_ = spec;
  return t;
}

StatusOr<Tensor> Tensor::batch_view(uint32_t first, uint32_t count) const {
  const Shape& s = spec_.shape;
  if (s.rank() == 0 || spec_.layout != Layout::ROW_MAJOR || spec_.memory_config.is_sharded())
    return failed_precondition_error("batch_view: {} is not a ROW_MAJOR interleaved tensor with a batch dim",
                                     spec_.to_string());
  if (count == 0 || first > s[0] || count > s[0] - first)
    return out_of_range_error("batch_view: items [{}, {}) of {}, which has {}", first, uint64_t{first} + count,
                              spec_.to_string(), s[0]);
  std::vector<uint32_t> dims(s.dims().begin(), s.dims().end());
  dims[0] = count;
  Tensor t = *this;
  t.spec_.shape = Shape(std::span<const uint32_t>(dims));
  const uint64_t rows_per_item = s.volume() / s[0] / s[-1];  // ROW_MAJOR pages: one row each
  if (!buffer_) {
    const uint64_t offset = first * rows_per_item * s[-1] * spec_.unit_bytes();
    t.host_ = std::shared_ptr<std::byte[]>(host_, host_.get() + offset);
    return t;
  }
  const Device& dev = buffer_->device();
  const uint32_t banks = spec_.memory_config.buffer_type == BufferType::DRAM ? dev.descriptor().num_dram_banks
                                                                             : dev.descriptor().num_cores();
  const uint64_t first_row = first * rows_per_item;
  if (first_row % banks != 0)
    return failed_precondition_error("batch_view: item {} of {} starts at row {}, not the start of a round of {} banks",
                                     first, spec_.to_string(), first_row, banks);
  const uint64_t page = align_up(uint64_t{spec_.unit_cols()} * spec_.unit_bytes(), dev.alignment(buffer_->type()));
  t.buffer_ = Buffer::view(buffer_, first_row / banks * page,
                           t.spec_.device_bytes_per_bank(dev.descriptor(), dev.alignment(buffer_->type())));
  if (!t.buffer_) return internal_error("batch_view: items [{}, {}) lie outside the buffer of {}", first,
                                        uint64_t{first} + count, spec_.to_string());
  return t;
}

Tensor allocate_tensor_on_host(const TensorSpec& spec) {
  Tensor t;
  t.spec_ = spec;
  t.host_ = make_aligned_bytes(spec.storage_bytes());
  return t;
}

StatusOr<Tensor> allocate_tensor_on_device(const TensorSpec& spec, Device& device) {
  TS_RETURN_IF_ERROR(spec.validate_for_device(device.descriptor()));
  const BufferType type = spec.memory_config.buffer_type;
  uint64_t bytes = spec.device_bytes_per_bank(device.descriptor(), device.alignment(type));
  Tensor t;
  t.spec_ = spec;
  TS_ASSIGN_OR_RETURN(t.buffer_, device.allocate_buffer(type, bytes, spec.to_string()));
  return t;
}

StatusOr<Tensor> Tensor::from_vector(const std::vector<float>& values, const Shape& shape, DataType dtype,
                                     Layout layout) {
  TensorSpec spec{shape, dtype, layout, DRAM_MEMORY_CONFIG};
  TS_RETURN_IF_ERROR(spec.validate());
  if (values.size() != shape.volume())
    return invalid_argument_error("from_vector: shape {} needs {} values, found {}", shape.to_string(),
                                  shape.volume(), values.size());
  Tensor t = allocate_tensor_on_host(spec);
  if (layout == Layout::ROW_MAJOR) {
    convert_from_float(values.data(), t.host_data(), dtype, values.size());
    return t;
  }
  const size_t n = size_t{spec.unit_rows()} * spec.unit_cols() * kTileElements;
  std::vector<float> tiles(n);
  tilize_logical(reinterpret_cast<const std::byte*>(values.data()), shape, reinterpret_cast<std::byte*>(tiles.data()),
                 4);
  convert_from_float(tiles.data(), t.host_data(), dtype, n);
  return t;
}

StatusOr<Tensor> Tensor::from_integers(const std::vector<int64_t>& values, const Shape& shape, DataType dtype,
                                       Layout layout) {
  if (is_floating(dtype))
    return invalid_argument_error("from_integers: expected an integer dtype, found {}", data_type_name(dtype));
  TensorSpec spec{shape, dtype, layout, DRAM_MEMORY_CONFIG};
  TS_RETURN_IF_ERROR(spec.validate());
  if (values.size() != shape.volume())
    return invalid_argument_error("from_integers: shape {} needs {} values, found {}", shape.to_string(),
                                  shape.volume(), values.size());
  const uint32_t es = element_size(dtype);
  std::vector<std::byte> rm(values.size() * es);
  for (size_t i = 0; i < values.size(); ++i) {
    int64_t v = saturate_integer(values[i], dtype);
    std::memcpy(rm.data() + i * es, &v, es);  // little-endian: low bytes
  }
  Tensor t = allocate_tensor_on_host(spec);
  if (layout == Layout::ROW_MAJOR)
    std::memcpy(t.host_data(), rm.data(), rm.size());
  else
    tilize_logical(rm.data(), shape, t.host_data(), es);
  return t;
}

StatusOr<std::vector<float>> Tensor::to_vector() const {
  if (is_on_device())
    return failed_precondition_error("to_vector: tensor {} is on device; read it with cpu() first",
                                     spec_.to_string());
  std::vector<float> out(spec_.shape.volume());
  if (spec_.layout == Layout::ROW_MAJOR) {
    convert_to_float(host_data(), spec_.dtype, out.data(), out.size());
    return out;
  }
  const size_t n = size_t{spec_.unit_rows()} * spec_.unit_cols() * kTileElements;
  std::vector<float> tiles(n);
  convert_to_float(host_data(), spec_.dtype, tiles.data(), n);
  untilize_logical(reinterpret_cast<const std::byte*>(tiles.data()), spec_.shape,
                   reinterpret_cast<std::byte*>(out.data()), 4);
  return out;
}

StatusOr<Tensor> host_to_layout(const Tensor& host, Layout layout) {
  if (host.is_on_device()) return failed_precondition_error("host_to_layout: tensor is on device");
  if (host.layout() == layout) return host;
  TensorSpec spec = host.spec();
  spec.layout = layout;
  TS_RETURN_IF_ERROR(spec.validate().annotate("to_layout"));
  Tensor out = allocate_tensor_on_host(spec);
  const uint32_t es = element_size(host.dtype());
  if (layout == Layout::TILE)
    tilize_logical(host.host_data(), host.shape(), out.host_data(), es);
  else
    untilize_logical(host.host_data(), host.shape(), out.host_data(), es);
  return out;
}

StatusOr<Tensor> host_typecast(const Tensor& host, DataType dtype) {
  if (host.is_on_device()) return failed_precondition_error("host_typecast: tensor is on device");
  TensorSpec spec = host.spec();
  spec.dtype = dtype;
  TS_RETURN_IF_ERROR(spec.validate().annotate("typecast"));
  Tensor out = allocate_tensor_on_host(spec);
  const uint64_t n = host.layout() == Layout::TILE ? uint64_t{spec.unit_rows()} * spec.unit_cols() * kTileElements
                                                   : host.shape().volume();
  convert_elements(host.host_data(), host.dtype(), out.host_data(), dtype, n);
  return out;
}

void deallocate(Tensor& t, bool force) {
  if (!t.is_on_device()) return;
  if (force || t.buffer().use_count() == 1) t.buffer()->deallocate();
}

}  // namespace tessera
