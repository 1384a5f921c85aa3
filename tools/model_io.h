// A model's inputs and outputs as files, for the command line: inputs from
// .npy / .npz files by input name, checked against the shapes the model
// declares; every output to an .npz, one .npy, or a .npy per output in a
// directory; references checked output by output.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "tessera/base/status.h"
#include "tessera/graph/graph.h"
#include "tessera/tensor/tensor.h"

namespace tessera::tools {

// A graph input as the file declares it: -1 marks a symbolic dim ('N', 'batch', unknown).
struct DeclaredInput {
  std::string name;
  std::vector<int64_t> dims;
};
// From an ONNX file, or a compiled image's model `model_name` (its only one
// when empty), whose dims are all fixed.
StatusOr<std::vector<DeclaredInput>> declared_inputs(const std::string& model_path,
                                                     const std::string& model_name = "");

// Host float32 arrays by input name, from `specs`: "x.npy" (the next input
// without a file, in the model's order), "name=x.npy", or "all.npz" (arrays
// named after inputs). Other dtypes are converted to float32 and each
// conversion gets a line in `notes`. InvalidArgument for an unknown name, an
// input given twice, or more files than inputs.
StatusOr<std::map<std::string, Tensor>> read_inputs(const std::vector<std::string>& specs,
                                                    const std::vector<DeclaredInput>& declared,
                                                    std::vector<std::string>* notes);

// Checks an array's shape against its declared input: the same rank, and
// every static dim equal except the leading one (the batch Tessera compiles
// for). InvalidArgument naming both shapes otherwise.
Status check_input_shape(const DeclaredInput& input, const Shape& shape, const std::string& source);

// Writes the outputs (names and host tensors, in the model's order):
// `path` ending in .npz gets all of them keyed by name; a .npy path the only
// one (InvalidArgument when there are several); `dir` one output_file each.
// DIR/NAME.npy for output NAME, characters other than letters, digits, '-',
// '_' and '.' replaced by '_'.
std::string output_file(const std::string& dir, const std::string& name);

Status write_outputs(const std::string& path, const std::string& dir, const std::vector<std::string>& names,
                     const std::vector<Tensor>& outputs);

// The seeds' PCC rule (`threshold`) for each output against `reference`: an
// .npz by output name (each output must be there), a directory holding an
// output_file per output (what --output-dir writes), or one .npy for a model
// with one output. Prints a line per output; FailedPrecondition when one is
// below the threshold.
// `integer`, when given, marks outputs holding integers (indices): those must
// equal the reference exactly.
Status check_references(const std::string& reference, const std::vector<std::string>& names,
                        const std::vector<Tensor>& outputs, double threshold, const std::vector<bool>& integer = {});

// As write_outputs and check_references, for outputs of a host tail
// (graph/host_tail.h): any shape, empty ones too, int64 ones written as
// '<i8'. An empty output cannot be checked against a reference yet
// (UNIMPLEMENTED naming it).
Status write_host_outputs(const std::string& path, const std::string& dir, const std::vector<std::string>& names,
                          const std::vector<graph::HostTensor>& outputs);
Status check_host_references(const std::string& reference, const std::vector<std::string>& names,
                             const std::vector<graph::HostTensor>& outputs, double threshold);

}  // namespace tessera::tools
