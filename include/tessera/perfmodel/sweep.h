// Sweeps (`tessera sweep`): measure ops over their parameter spaces into a
// Dataset.
//
// Each op has a space (sweep.cc, kSpaces: one generator per op mapping a
// point of the unit cube to a query: shapes log-uniform over the sizes
// vision models use, dtypes, layouts, buffer types, kernel sizes, strides,
// groups, activations, ...). Points are drawn in Latin-hypercube batches
// (each dimension stratified; deterministic per op and batch, so a resumed
// sweep redraws the same points and skips the ones the dataset has).
// Configurations an op refuses are stored with their error and not timed
// again; so is a point whose measuring killed the process (its row, written
// before measuring, says so). Work per point is capped (FLOPs and bytes) so that no point runs
// for long.
//
// The sweep runs ops round robin, a batch at a time, until the time budget
// is spent, committing to the dataset after every batch. Each point of a
// batch is measured `passes` times, in passes over the batch, and the
// median kept: on a shared machine a memory-bound op's time drifts by 10%
// and more over seconds, and two single measurements of one point agreed
// within +-10% only 64-90% of the time (Zen 5 VM, bench/RESULTS.md).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "tessera/perfmodel/dataset.h"
#include "tessera/perfmodel/op_query.h"

namespace tessera::perfmodel {

struct SweepOptions {
  std::vector<std::string> ops;  // empty: every space (none when `queries` are given)
  double budget_seconds = 1200;  // wall time for measuring
  uint32_t batch = 16;           // points per op per round (one Latin hypercube)
  uint32_t passes = 3;           // each point measured this many times, a pass over its batch apart
  uint32_t replays = 9;          // at least; short ops replay more (measure.h)
  uint32_t workers = 0;          // device workers (0: one per physical core)
  uint64_t seed = 1;
  std::string source = "lhs";  // recorded with each row
  bool verbose = false;        // each point to stderr before it is measured
  // Queries measured before the spaces' points (a model's ops: model_queries.h), once each.
  std::vector<OpQuery> queries;
  std::string queries_source = "model";
};

struct SweepProgress {
  double elapsed_seconds = 0, budget_seconds = 0;
  std::string op;
  uint64_t measured = 0, refused = 0, skipped = 0;  // skipped: already in the dataset
};

struct SweepResult {
  uint64_t measured = 0, refused = 0, skipped = 0;
  double seconds = 0;
  MachineFingerprint machine;
};

// The conv kernels this CPU's tier has (src/ops/conv/select.h's names) for
// conv2d, or conv_transpose2d when `transposed`: what the sweep names in a
// conv query's "algorithm" beside "auto" (a shape a named kernel cannot run
// is refused by conv2d's own check).
std::vector<std::string> conv_algorithms_of_this_tier(bool transposed);
// `queries` with every conv2d / conv_transpose2d query also asked once per
// kernel of this tier: a model's convs measured on each kernel that can
// run them, for the predicted selection (--select predicted).
std::vector<OpQuery> with_each_conv_algorithm(const std::vector<OpQuery>& queries);

// The ops with a sweep space, in table order.
std::vector<std::string> sweep_ops();
// `n` points of op's space from batch `batch` (deterministic): for tests and `tessera sweep --dry-run`.
StatusOr<std::vector<OpQuery>> sample_space(std::string_view op, uint32_t n, uint64_t batch, uint64_t seed = 1);
// n points of a Latin hypercube in [0,1)^dims (each dimension's n strata hit once).
std::vector<std::vector<double>> latin_hypercube(uint32_t n, uint32_t dims, uint64_t seed);

StatusOr<SweepResult> run_sweep(Dataset& dataset, const SweepOptions& options,
                                const std::function<void(const SweepProgress&)>& progress = {});

}  // namespace tessera::perfmodel
