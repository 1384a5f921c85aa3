// A model's host tail: the nodes whose output shapes depend on the values
// they read (NonMaxSuppression, NonZero, If: a detector's post-processing) and
// every node that reads their results, directly or not. Tessera's shapes
// are static, so the device runs the rest of the model (the prefix) and the
// host evaluates the tail on the prefix's results, node by node, with the
// shapes the data gives (graph::evaluate: the reference kernels, in double
// where it matters, on one core: RetinaNet's tail 15 ms, SSDlite's, whose
// NMS meets 27,000 candidates, 113 ms; bench/RESULTS.md).
//
//   graph::Graph g = import...;                      // shapes not inferred yet
//   auto tail = graph::HostTail::split(g);           // g becomes the prefix
//   infer_shapes(g); if (*tail) (*tail)->bind_prefix(g);
//   ... compile and run g; outputs = (*tail)->run(prefix outputs)
#pragma once

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "tessera/graph/graph.h"

namespace tessera::graph {

// Whether `op_type`'s output shape depends on its inputs' values.
bool has_data_dependent_shape(const std::string& op_type);

class HostTail {
 public:
  // Takes the tail out of `g` (imported, shapes not yet inferred): nullopt
  // and `g` unchanged when no node has a data-dependent output shape.
  // Otherwise `g` keeps the prefix, and its outputs become the model's
  // outputs the prefix makes (in model order), then the values the tail
  // reads from the prefix. UNIMPLEMENTED naming the node when a tail node's
  // op has no host kernel; INVALID_ARGUMENT when a tail node reads a graph
  // input directly (the prefix returns only values it computes).
  static StatusOr<std::optional<HostTail>> split(Graph& g);

  // After the prefix's shapes are inferred: the type and shape of each value
  // the tail reads. A constant there (folded by shape inference: an image
  // size from Shape) the tail takes as it is, and the prefix stops returning
  // it. INVALID_ARGUMENT when `prefix` is not the graph split() left.
  Status bind_prefix(Graph& prefix);

  // The model's outputs, in the model's order, from the prefix's outputs
  // (its graph's outputs, in order; float32 values standing for integers
  // become int64 where the tail reads an integer value).
  StatusOr<std::vector<HostTensor>> run(const std::vector<HostTensor>& prefix_outputs) const;

  // The model's output names, in order.
  const std::vector<std::string>& output_names() const { return names_; }
  size_t num_prefix_outputs() const {
    return prefix_outputs_ + static_cast<size_t>(std::count_if(pos_.begin(), pos_.end(), [](int p) { return p >= 0; }));
  }
  size_t num_nodes() const { return tail_.nodes.size(); }
  // "5 node(s) from NonMaxSuppression '/nms': Gather x3, NonMaxSuppression,
  // Squeeze": its op types, the most frequent first (six at most).
  std::string summary() const;

  // What an image keeps of a bound tail (image/image.h), field for field.
  struct Parts {
    Graph tail;  // inputs: the boundary values; outputs: the model's outputs it makes
    std::vector<std::string> names;
    std::vector<int> source;
    uint64_t prefix_outputs = 0;
    std::vector<int> boundary, pos;
    std::string first;
  };
  Parts parts() const;
  // A bound tail from what parts() gave, every index checked against the
  // others (an image's bytes are not trusted): INVALID_ARGUMENT naming the
  // first that is out of range; UNIMPLEMENTED for a node with no host kernel.
  static StatusOr<HostTail> from_parts(Parts p);

 private:
  Graph tail_;  // inputs: the boundary values; outputs: the model's outputs it makes
  std::vector<std::string> names_;
  // Per model output: its index among the prefix's outputs (>= 0) or among
  // the tail's (-1 - index).
  std::vector<int> source_;
  size_t prefix_outputs_ = 0;
  std::vector<int> boundary_;  // the tail's input value ids, in prefix output order
  std::vector<int> pos_;       // each tail input's index among the prefix's outputs (-1: a constant bind_prefix took)
  std::string first_;          // the first data-dependent node's label
};

}  // namespace tessera::graph
