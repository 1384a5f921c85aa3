// The command line of the bounded mutation fuzzers (tests/fuzz/*_fuzz.cc):
//   NAME [--seconds S] [--seed N] [SEED_FILE ...]
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <optional>
#include <random>
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
    if (arg == "--seconds" && i + 1 < argc)
      a.seconds = std::atof(argv[++i]);
    else if (arg == "--seed" && i + 1 < argc)
      a.seed = static_cast<uint32_t>(std::atoi(argv[++i]));
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

// The text fuzzers' loop: for `args.seconds`, mutate a random seed with 1-4
// edits (a byte changed, the text cut, a run erased, or a token from
// `tokens` where a value stood) and hand it to `target`. Returns the inputs run.
template <class Target>
uint64_t mutate_text(const FuzzArgs& args, const std::vector<std::string>& seeds,
                     const std::vector<std::string>& tokens, Target target) {
  std::mt19937 rng(args.seed);
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(args.seconds);
  uint64_t runs = 0;
  while (std::chrono::steady_clock::now() < end) {
    std::string m = seeds[rng() % seeds.size()];
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits && !m.empty(); ++e) {
      const size_t at = rng() % m.size();
      switch (rng() % 5) {
        case 0:
          m[at] = static_cast<char>(rng());
          break;
        case 1:
          m.resize(at);
          break;
        case 2:
          m.erase(at, std::min<size_t>(rng() % 16, m.size() - at));
          break;
        default: {  // a number, array or word where one stood
          size_t stop = at;
          while (stop < m.size() && m[stop] != ',' && m[stop] != '}' && m[stop] != ']') ++stop;
          m.replace(at, stop - at, tokens[rng() % tokens.size()]);
        }
      }
    }
    target(m);
    ++runs;
  }
  return runs;
}

}  // namespace tessera::fuzz
