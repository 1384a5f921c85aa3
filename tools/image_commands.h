// The command line's image subcommands: `tessera compile`, `tessera info`
// and `tessera merge` (tessera/image/image.h has the format).
#pragma once

#include <string>
#include <vector>

#include "model_runner.h"
#include "tessera/base/status.h"

namespace tessera::tools {

struct CompileRequest {
  std::string model;   // ONNX file
  std::string output;  // .tsi
  std::string name;    // the model's name in the image (default: the file's stem)
  std::string target = "cpu";  // cpu | wormhole_b0: compiled for that device, present or emulated
  ModelOptions options;
  int workers = 0;
  bool pin = true;
  bool portable = false;  // image::compile_model's
};
Status compile_command(const CompileRequest& request);

Status info_command(const std::string& path, bool json);

// Merges the models of `inputs` (names made unique: a second 'm' becomes
// 'm_2') into `output`; identical weights stored once unless `separate`.
Status merge_command(const std::vector<std::string>& inputs, const std::string& output, bool separate);

}  // namespace tessera::tools
