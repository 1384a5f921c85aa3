// The command line's predictor subcommands (tessera/perfmodel):
//
//   tessera sweep [--db perf.sqlite] [--ops conv2d,linear,...] [--budget 20m] [--batch 16] [--replays 9] [--passes 3]
//                 [--workers N] [--seed S] [--dry-run] [--export csv -o FILE]
//   tessera train-predictor [--db perf.sqlite] [-o predictor.json] [--machine ID] [--min-rows N] [--report R.md]
//                           [--test-csv T.csv]
//   tessera predict --op JSON [--predictor predictor.json]
//   tessera predict MODEL.onnx|MODEL.tsi [--dtype D] [--batch B] [--explain] [--predictor predictor.json]
//   tessera sweep --models A.onnx,B.onnx [--dtype D] [--model-batch B]   (their ops, before or instead of the spaces)
#pragma once

#include <memory>

#include "tessera/base/status.h"

namespace CLI {
class App;
}

namespace tessera::tools {

class PredictorCommands {
 public:
  explicit PredictorCommands(CLI::App& app);  // adds the subcommands
  ~PredictorCommands();
  bool chosen() const;  // one of them was on the command line
  Status run();

  struct State;

 private:
  std::unique_ptr<State> s_;
};

// "20m", "90s", "1h", "1h30m" or plain seconds.
StatusOr<double> parse_duration_seconds(std::string_view text);

}  // namespace tessera::tools
