// The command line of the bounded mutation fuzzers (tests/fuzz/*_fuzz.cc):
//   NAME [--seconds S] [--seed N] [SEED_FILE ...]
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <vector>

namespace tessera::fuzz {

struct FuzzArgs {
  double seconds = 10;
  uint32_t seed = 1;
  std::vector<std::string> files;  // the seed files' bytes
};

// nullopt (after a message naming the file) when a seed file cannot be read.
inline std::optional<FuzzArgs> parse_fuzz_args(int argc, char** argv, const char* name) {
  FuzzArgs a;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--seconds" && i + 1 < argc) a.seconds = std::atof(argv[++i]);
    else if (arg == "--seed" && i + 1 < argc) a.seed = static_cast<uint32_t>(std::atoi(argv[++i]));
    else {
      std::ifstream in(arg, std::ios::binary);
      if (!in) {
        std::fprintf(stderr, "%s: cannot open %s\n", name, arg.c_str());
        return std::nullopt;
      }
      a.files.emplace_back(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    }
  }
  return a;
}

}  // namespace tessera::fuzz
