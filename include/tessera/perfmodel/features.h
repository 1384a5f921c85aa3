// What the predictor learns from: an op query's physics (FLOPs, bytes moved,
// arithmetic intensity, its roofline times on the machine's measured peaks,
// its working set against each cache level, tiles per worker) beside the raw
// parameters (input dims, dtypes, layouts, the op's arguments).
//
// Each family has one fixed feature layout (feature_names), the op's index
// in its family the first feature, so that one model serves the family's
// ops. A feature a query does not have (a second input, an argument of
// another op) is NaN: missing to the trees.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/perfmodel/machine.h"
#include "tessera/perfmodel/op_query.h"

namespace tessera::perfmodel {

struct OpCost {
  double flops = 0;          // 2 per multiply-add; 1 per element of element-wise math
  double bytes_read = 0;     // inputs and weights, at their dtypes
  double bytes_written = 0;  // outputs
  double output_elements = 0;
  double bytes() const { return bytes_read + bytes_written; }
};

// The op's work. Conv output sizes follow its kernel, stride, padding and
// dilation; an invalid configuration gives zero output (validate elsewhere).
OpCost op_cost(const OpQuery& q);

// The time no kernel can beat on `m`: FLOPs at the peak for the op's dtype
// and bytes at the cache bandwidth, whichever is longer (nanoseconds, > 0).
double roofline_floor_ns(const OpQuery& q, const OpCost& c, const MachineFingerprint& m);

std::vector<std::string> feature_names(std::string_view family);
// Appends the query's features in its family's layout; returns its
// roofline_floor_ns, which the features are computed from.
double append_features(const OpQuery& q, const MachineFingerprint& m, std::vector<float>& out);

}  // namespace tessera::perfmodel
