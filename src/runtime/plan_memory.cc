// Memory planning: every intermediate released after its last reader.
#include "lowering.h"

namespace tessera::runtime {

std::vector<std::vector<int>> plan_liveness(const Graph& g, std::span<const FusedConcat> fused_concats,
                                            std::span<const MicroBatch> micro_batches) {
  // The last step reading each value; graph outputs live to the end.
  std::vector<int> last(g.values.size(), -1);
  for (size_t ni = 0; ni < g.nodes.size(); ++ni)
    for (int in : g.nodes[ni].inputs)
      if (in >= 0) last[static_cast<size_t>(in)] = static_cast<int>(ni);
  for (int o : g.outputs) last[static_cast<size_t>(o)] = -1;
  for (int i : g.inputs) last[static_cast<size_t>(i)] = -1;  // owned by the caller
  // A fused channel concat's inputs are read by its conv (fused_concats).
  for (const auto& [conv, ins] : fused_concats)
    for (int in : ins)
      if (last[static_cast<size_t>(in)] >= 0)
        last[static_cast<size_t>(in)] = std::max(last[static_cast<size_t>(in)], static_cast<int>(conv));
  std::set<int> held;  // a micro-batch's output part lives to the group's end (run_micro_batch)
  for (const MicroBatch& mb : micro_batches) {
    held.insert(mb.in);  // read through in_part; released by run_micro_batch
    held.insert(mb.out_part);
    last[static_cast<size_t>(mb.out_part)] = -1;
  }
  std::vector<std::vector<int>> release(g.nodes.size());
  for (size_t v = 0; v < last.size(); ++v)
    if (last[v] >= 0 && !g.values[v].constant) release[static_cast<size_t>(last[v])].push_back(static_cast<int>(v));
  // Outputs nobody reads (a Dropout mask, a skipped optional) go right away.
  for (size_t ni = 0; ni < g.nodes.size(); ++ni)
    for (int o : g.nodes[ni].outputs)
      if (last[static_cast<size_t>(o)] < 0 && !held.count(o) &&
          std::find(g.outputs.begin(), g.outputs.end(), o) == g.outputs.end())
        release[ni].push_back(o);
  return release;
}

}  // namespace tessera::runtime
