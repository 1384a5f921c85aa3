// Weights in, for a C++ user without PyTorch: named tensors from an ONNX
// model's initializers (a reference model exported with torch.onnx.export
// keeps the state_dict names, e.g. "encoder1.enc1conv1.weight") or from
// NumPy .npy / .npz files, and the original's preprocessing:
// batch-norm folding, bias reshape to (1, 1, 1, C), and a walker that turns
// dotted names into nested module parameters with a custom hook, as
// ttnn.model_preprocessing.preprocess_model_parameters does.
//
// Every loader returns host float32 ROW_MAJOR tensors (float16, float64 and
// integer data are converted; an integer value that float32 cannot hold
// exactly is an error) and fails with INVALID_ARGUMENT naming the file and
// what was malformed; parsers are fuzzed (tests/weights_test.cc).
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "tessera/tensor/tensor.h"

namespace tessera::cnn {

using WeightMap = std::map<std::string, Tensor>;

// ONNX initializers: importer::load_onnx_initializers (tessera/import/onnx.h),
// which keeps protobuf out of this library.

// One .npy array (format versions 1-3; '<f4', '<f8', '<f2', '<i8', '<i4',
// '<i2', '|i1', '|u1', '|b1'; C or Fortran order), converted to float32.
// `dtype`, when given, receives the file's dtype as its header names it
// ('<f8'), so that a caller can say what it converted.
StatusOr<Tensor> load_npy(const std::string& path, std::string* dtype = nullptr);
StatusOr<Tensor> parse_npy(std::string_view bytes, std::string_view name = "npy", std::string* dtype = nullptr);
// Every array of an .npz archive (numpy.savez or savez_compressed), keyed by
// its name without ".npy"; `dtypes` as load_npy's, by the same keys.
StatusOr<WeightMap> load_npz(const std::string& path, std::map<std::string, std::string>* dtypes = nullptr);
// Writes one float32 array as .npy (what numpy.save writes).
Status save_npy(const std::string& path, const Tensor& array);
// Writes float32 arrays as an uncompressed .npz (what numpy.savez writes).
Status save_npz(const std::string& path, const WeightMap& arrays);
// The bytes of an .npy file (version 1) holding `bytes` of C-order data of
// numpy dtype `descr` ('<f4', '<i8') and shape `dims` (any may be 0).
std::string npy_file_bytes(std::string_view descr, std::span<const int64_t> dims, const void* data, size_t bytes);
// Writes .npy files' bytes, keyed by array name, as an uncompressed .npz.
Status save_npz_files(const std::string& path, const std::map<std::string, std::string>& npy_files);

// A BatchNorm2d's parameters, each (C).
struct BatchNorm2dParameters {
  Tensor running_mean, running_var, weight, bias;  // weight = gamma, bias = beta
  float eps = 1e-5f;
};
// Folds y = gamma * (conv(x) + b - mean) / sqrt(var + eps) + beta into the
// conv: weight (out, in/g, kh, kw) scaled per output channel, bias (1, 1, 1,
// out). `bias` may be absent (a conv with bias=False). float32 math, as the
// original's fold_batch_norm2d_into_conv2d in torch.
struct FoldedConv2d {
  Tensor weight;  // (out, in/g, kh, kw)
  Tensor bias;    // (1, 1, 1, out)
};
StatusOr<FoldedConv2d> fold_batch_norm_into_conv2d(const Tensor& weight, const std::optional<Tensor>& bias,
                                                   const BatchNorm2dParameters& bn);

// Nested parameters: a module's own tensors and its child modules.
struct ModuleParameters {
  std::map<std::string, Tensor> tensors;
  std::map<std::string, ModuleParameters> children;
  // "encoder1.enc1conv1.weight" -> that tensor; NOT_FOUND names what is missing.
  StatusOr<Tensor> at(std::string_view dotted) const;
  const ModuleParameters* child(std::string_view dotted) const;
};

// Called for every module, parents first, with its dotted path ("" for the
// root). Returning parameters replaces the module (its children are not
// walked); nullopt keeps the default: every "bias" of a module that also has
// a 4-D "weight" becomes (1, 1, 1, C), everything else is kept as loaded.
using CustomPreprocessor =
    std::function<StatusOr<std::optional<ModuleParameters>>(const std::string& path, const ModuleParameters& module)>;
StatusOr<ModuleParameters> preprocess_model_parameters(const WeightMap& state_dict,
                                                       const CustomPreprocessor& custom_preprocessor = nullptr);

}  // namespace tessera::cnn
