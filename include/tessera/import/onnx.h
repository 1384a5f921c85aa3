// ONNX in: a ModelProto (opsets 1-17 of the default domain) to the graph IR.
// The only Tessera library that links protobuf (Debian's libonnx-dev).
//
//   TS_ASSIGN_OR_RETURN(graph::Graph g, importer::import_onnx("resnet50.onnx"));
//
// What the importer does: reads initializers (raw_data, typed fields,
// external data next to the model) and Constant nodes as constants; turns
// Identity into an alias; sorts nodes that are not in topological order;
// fixes symbolic input dims (batch) to the given shapes; then infers every
// shape, folding constant subgraphs (graph/shape_inference.h).
//
// Errors: NOT_FOUND for a missing file; INVALID_ARGUMENT for anything
// malformed, naming the node, its op type and the attribute or input
// (truncated files, wrong attribute types, cycles, inputs no one provides,
// declared shapes over the limits); UNIMPLEMENTED for valid ONNX that
// Tessera does not support (other domains, opsets outside 1-17, sparse
// tensors, unsupported element types), also naming what.
#pragma once
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/graph/graph.h"
#include "tessera/graph/shape_inference.h"

namespace tessera::importer {

struct OnnxImportOptions {
  // Shapes for graph inputs, by name; they override the file's and fill
  // its symbolic dims. Unnamed inputs get their symbolic dims from
  // `symbolic_dim` (the batch, usually).
  std::map<std::string, std::vector<int64_t>> input_shapes;
  int64_t symbolic_dim = 1;
  // Guards against hostile files (see shape_inference.h).
  graph::InferOptions infer;
  // Skip shape inference (the caller binds constant inputs first and then
  // calls graph::infer_shapes itself).
  bool infer_shapes = true;
};

StatusOr<graph::Graph> import_onnx(const std::string& path, const OnnxImportOptions& options = {});
// From serialized bytes; `base_dir` resolves external data (empty: none allowed).
StatusOr<graph::Graph> import_onnx_bytes(std::string_view bytes, const OnnxImportOptions& options = {},
                                         const std::string& base_dir = "");

// A serialized TensorProto file (the ONNX test data's input_0.pb).
StatusOr<graph::HostTensor> load_tensor_proto(const std::string& path);

// Initializers of an ONNX model as graph host tensors, keyed by name
// (raw_data or typed fields; external data files resolved next to the
// model). For TT-CNN weights (device-ready float32 tensors) see
// tessera/import/onnx_weights.h.
StatusOr<std::map<std::string, graph::HostTensor>> load_onnx_initializer_tensors(const std::string& path);

// ONNX op types the importer's shape inference knows (the runtime's
// supported list is runtime::supported_ops()).
std::vector<std::string> importable_ops();

}  // namespace tessera::importer
