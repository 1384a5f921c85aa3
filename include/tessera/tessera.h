// Tessera: everything a user of the device runtime needs, in one include.
#pragma once

#include "tessera/base/status.h"
#include "tessera/device/device.h"
#include "tessera/numerics/bfloat16.h"
#include "tessera/numerics/block_float.h"
#include "tessera/ops/data_movement.h"
#include "tessera/ops/eltwise.h"
#include "tessera/tensor/tensor.h"
// The compiler: ONNX import, the graph IR and compiled models.
#include "tessera/import/onnx.h"
#include "tessera/runtime/compiled_model.h"
