// A compiled image (.tsi): one file that holds one or more compiled models,
// ready to load and run with no importer, no protobuf and no Python.
//
//   // offline, on any machine (tessera compile does this):
//   TS_ASSIGN_OR_RETURN(image::ImageModel m, image::compile_model("resnet50", std::move(g), *device, options));
//   TS_RETURN_IF_ERROR(image::write_image("resnet50.tsi", image::header_for(*device), {&m}));
//   // anywhere (the embedded runtime, tessera_runtime):
//   TS_ASSIGN_OR_RETURN(auto img, image::Image::open("resnet50.tsi"));
//   TS_ASSIGN_OR_RETURN(auto model, image::load_model(*img, 0, *device));
//   TS_ASSIGN_OR_RETURN(auto outs, model.model->run({x}));
//
// What an image holds: a header (format version, the Tessera version and
// commit that wrote it, the target device's descriptor, the kernel ISA tier
// and CPU it was compiled on), then per model its compile options, its graph
// after the compiler's passes with its constants (weights folded, fused,
// in the weights section, 64-byte aligned; conv weights of a portable model
// with bfloat16 or block-float weights in that dtype, the values its convs
// compute with, at its size), its convs' prepared weights (4096-byte
// aligned), its
// input and output names, shapes and dtypes, and the compile report.
// Loading plans and lowers that graph for the device at hand: the same
// lowering `tessera run` does after its passes, so the outputs are
// bit-identical; a portable image's kernels are chosen for the CPU that
// loads it (compiled with AVX-512 kernels, it loads on an AVX2-only CPU, with
// a note that the kernels were re-selected).
//
// The file (image_format.h's layout, all integers little-endian):
//   [0, 64)   preamble: magic, format version, the offsets, sizes and CRC-32s
//             of the two sections, the preamble's own CRC-32;
//   meta      a FlatBuffers table (src/image/image.fbs), verified before use;
//   weights   raw arrays, 4096-byte aligned in the file (mmap-able).
//
// Compatibility: an image loads in any Tessera with the same major format
// version (kFormatMajor) and an equal or newer minor one; fields are only
// appended within a major version, so a newer minor image loads too, its
// new fields ignored. Format 1 images (before prepared weights) load in
// format 2 readers; another major version is refused, naming both.
//
// Prepared weights: by default a model's conv weights are stored as its
// kernels read them on the compiling CPU (packed, padded, transformed), and
// loading maps them into device memory with no copy; they serve where the
// kernel tier, CPU features, worker count and oneDNN version are the same
// (prepared_weights_key), and anywhere else loading fails naming what
// differs. `tessera compile --portable` stores the weight constants instead:
// such an image loads on any CPU, choosing and packing its kernels there.
//
// Errors: every defect of a file (short, wrong magic, another major
// version, a bad checksum, a FlatBuffers table that does not verify, an
// offset outside the weights, a graph that refers to values it does not
// have) is DATA_LOSS or FAILED_PRECONDITION naming the section and what was
// expected; nothing in a file can crash the reader.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/base/status.h"
#include "tessera/device/descriptor.h"
#include "tessera/graph/graph.h"
#include "tessera/graph/host_tail.h"
#include "tessera/runtime/compiled_model.h"
#include "tessera/tensor/tensor_spec.h"

namespace tessera {
class Device;
class ThreadPool;
}

namespace tessera::image {

inline constexpr uint16_t kFormatMajor = 3;
inline constexpr uint16_t kFormatMinor = 0;
// Format 1 (no prepared weights) is a subset of format 2: both load.
inline constexpr uint16_t kOldestFormatMajor = 1;
// Format 3 is format 2 with host tails (ImageModel::tail) and int8 storage
// of integer-valued constants (a QDQ model's weights), which a reader must
// not ignore: an image that uses neither is written as format 2, so that
// format 2 readers load it, and one that does as 3, which they refuse naming
// the version.
inline constexpr uint16_t kFormatMajorWithoutTail = 2;

// Who wrote an image, for what.
struct ImageHeader {
  uint16_t format_major = kFormatMajor, format_minor = kFormatMinor;
  std::string tessera_version;  // "0.1.0"
  std::string tessera_commit;   // git describe of the writing build
  DeviceDescriptor target;      // the device compiled for
  std::string kernel_isa;       // "avx512" | "avx2" | "scalar": the tier kernels were chosen for
  std::string cpu_features;     // the compiling CPU's (CpuFeatures::to_string)
  std::string cpu_model;        // "AMD EPYC 9B45", from /proc/cpuinfo; empty where unknown
};
// This build's versions, `device`'s descriptor, this CPU's tier and features.
ImageHeader header_for(const Device& device);

// A conv's weights as its kernel reads them on the CPU that compiled the
// image (runtime::PreparedLayer's, on the host).
struct PreparedBlob {
  std::string node, key, selection;
  TensorSpec spec;  // of the device tensor (ROW_MAJOR or TILE, interleaved DRAM)
  std::vector<uint8_t> owned;     // the bytes, or empty when they are `mapped`
  std::span<const uint8_t> mapped;  // the bytes in an opened image
  uint64_t file_offset = 0;         // where `mapped` starts in the image's file
  graph::HostTensor bias;  // float32, in the device tensor's dims
  std::span<const uint8_t> bytes() const { return owned.empty() ? mapped : std::span<const uint8_t>(owned); }
};

// Where prepared weights serve: the kernel tier, CPU features, worker count
// and oneDNN version they were packed for (another of any packs otherwise).
std::string prepared_weights_key(const Device& device);

// One model of an image.
struct ImageModel {
  std::string name;
  runtime::CompileOptions options;  // as given to compile (optimize: whether the passes ran)
  graph::Graph graph;               // after the passes
  runtime::CompileReport report;    // as compiled
  uint64_t resident_dram_bytes = 0, resident_l1_bytes = 0;  // its constants on the device
  // Per conv, "<node>: <kernel> for <problem>" as the compiling CPU chose it.
  std::vector<std::string> conv_kernels;
  // The convs' weights as their kernels read them, valid where
  // prepared_weights_key() is `prepared_for`; the weight and bias constants
  // only these read are then not stored (they hold dims and no values).
  std::vector<PreparedBlob> prepared;
  std::string prepared_for;
  // The nodes the host evaluates on the device part's outputs (a detector's
  // post-processing: graph/host_tail.h), bound to `graph`, which is then the
  // device part; the model's outputs are the tail's.
  std::optional<graph::HostTail> tail;
};

// Runs the passes on `graph` (when options.optimize), compiles the result
// for `device` (so what cannot run is an error now, not at load), measures
// what the compiled model holds on the device, and runs it once on zeros to
// record the kernel each conv gets on this CPU and the weights it packed
// for it. `portable`: keep the weight constants instead, so the image loads
// on any CPU and packs them there (a slower load).
StatusOr<ImageModel> compile_model(std::string name, graph::Graph graph, Device& device,
                                   const runtime::CompileOptions& options, bool portable = false);

struct WriteOptions {
  // Constants with the same bytes (a model's repeated tensors, the shared
  // weights of merged models) stored once.
  bool dedup_weights = true;
};
// Writes the models (names unique and non-empty) into one image at `path`.
Status write_image(const std::string& path, const ImageHeader& header, std::span<const ImageModel* const> models,
                   const WriteOptions& options = {});
// The same, into memory.
StatusOr<std::vector<uint8_t>> serialize_image(const ImageHeader& header, std::span<const ImageModel* const> models,
                                               const WriteOptions& options = {});

// A tensor's name, dims and dtype.
struct IoInfo {
  std::string name;
  std::vector<int64_t> dims;
  std::string dtype;  // "float32"
};

struct ModelInfo {
  std::string name;
  runtime::CompileOptions options;
  runtime::CompileReport report;
  std::vector<IoInfo> inputs, outputs;
  std::vector<std::pair<std::string, int>> op_counts;        // by op type, sorted
  std::vector<std::pair<std::string, uint64_t>> weight_bytes;  // by storage dtype, as stored
  uint64_t num_constants = 0;
  uint64_t resident_dram_bytes = 0, resident_l1_bytes = 0;
  std::vector<std::string> conv_kernels;  // ImageModel::conv_kernels
  uint64_t prepared_layers = 0, prepared_bytes = 0;  // ImageModel::prepared
  std::string prepared_for;
  // A host tail (ImageModel::tail): its nodes, their op types, and the
  // model's output names (`outputs` are then the device part's).
  int host_tail_nodes = 0;
  std::vector<std::pair<std::string, int>> host_tail_ops;  // sorted
  std::vector<std::string> model_outputs;
};

struct ImageInfo {
  ImageHeader header;
  uint64_t file_bytes = 0, meta_bytes = 0, weights_bytes = 0;
  std::vector<ModelInfo> models;
};
// What `tessera info` prints: the text, or one JSON object.
std::string info_text(const ImageInfo& info);
std::string info_json(const ImageInfo& info);

// An opened, verified image. Opening checks the preamble and the metadata's
// checksum and verifies the metadata; models decode on demand. The weights
// section's checksum is checked before any of its bytes run: by load_model
// as it maps them (reading them through the device's mapping fills its page
// tables too, so one pass over the file does both, on the device's workers),
// or by verify_weights() (tessera info and merge call it). from_bytes checks
// it at once.
class Image {
 public:
  ~Image();
  // Reads the file (mapped, not copied).
  static StatusOr<std::unique_ptr<Image>> open(const std::string& path);
  // An image in memory (tests, fuzzing, images embedded in a program).
  static StatusOr<std::unique_ptr<Image>> from_bytes(std::vector<uint8_t> bytes);

  const ImageInfo& info() const { return info_; }
  size_t num_models() const { return info_.models.size(); }
  // NOT_FOUND naming the models there are.
  StatusOr<size_t> find_model(std::string_view name) const;
  // Model `index`'s options, graph (constants copied out of the weights
  // section), report and prepared weights (referring to the mapped file).
  StatusOr<ImageModel> model(size_t index) const;
  // The opened file (for mapping prepared weights), -1 for from_bytes.
  int file_descriptor() const;

  // Part of the weights section where a device maps it: its offset in the
  // file and its bytes as mapped.
  struct WeightsView {
    uint64_t file_offset = 0;
    std::span<const std::byte> bytes;
  };
  // The weights section's CRC-32 against the preamble's, once (later calls
  // return at once): `views` read where they lie, the rest through the
  // image's own mapping, in 1 MiB chunks on `pool` when given (views may
  // overlap: the first in file order is read). DATA_LOSS naming the
  // section; INVALID_ARGUMENT for a view outside it.
  Status verify_weights(std::span<const WeightsView> views = {}, ThreadPool* pool = nullptr) const;

  struct Mapping;

 private:
  Image() = default;
  static StatusOr<std::unique_ptr<Image>> verify(std::unique_ptr<Mapping> mapping);
  std::unique_ptr<Mapping> mapping_;
  std::span<const uint8_t> meta_, weights_;
  uint64_t weights_offset_ = 0;  // of the weights section in the file
  uint32_t weights_crc_ = 0;     // as the preamble records it
  mutable std::atomic<bool> weights_verified_{false};
  ImageInfo info_;
};

struct LoadedModel {
  std::unique_ptr<runtime::CompiledModel> model;
  // Where the model has a host tail, `model` is its device part: the
  // model's outputs are tail->run(model's outputs).
  std::optional<graph::HostTail> tail;
  // What the load did that the user should know: kernels re-selected for
  // another ISA tier, a CPU other than the compiling one.
  std::vector<std::string> notes;
};
// Lowers model `index` of `image` onto `device`. FAILED_PRECONDITION when the
// image was compiled for another kind of device (a wormhole_b0 image on the
// CPU device, or back), naming both descriptors.
StatusOr<LoadedModel> load_model(const Image& image, size_t index, Device& device);

}  // namespace tessera::image
