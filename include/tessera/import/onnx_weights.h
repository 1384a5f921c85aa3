// ONNX initializers as TT-CNN weights: the reference model's state dict for
// the builder (cnn/weights.h), read from the model file. A library of its own
// (tessera_onnx_weights) so that the importer links neither the CNN library
// nor the ops.
//
//   TS_ASSIGN_OR_RETURN(cnn::WeightMap sd, importer::load_onnx_initializers("unet.onnx"));
#pragma once

#include <string>

#include "tessera/cnn/weights.h"

namespace tessera::importer {

// Initializers as float32 host tensors, keyed by name (raw_data or typed
// fields; external data files resolved next to the model; a scalar becomes
// shape (1); empty initializers are skipped). Errors: NOT_FOUND for a missing
// file; INVALID_ARGUMENT for a malformed one, an integer value float32 cannot
// hold exactly, or a rank above Shape::kMaxRank; UNIMPLEMENTED for sparse
// initializers.
StatusOr<cnn::WeightMap> load_onnx_initializers(const std::string& path);

}  // namespace tessera::importer
