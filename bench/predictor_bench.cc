// Predictor query throughput: single-op predictions per second from C++
// after load, one thread, over queries drawn from every sweep space (parsed
// once, as a compiler holding its ops' queries would), and the cost of
// parsing a query's JSON besides.
//
//   bench_predictor predictor.json
#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <vector>

#include "tessera/perfmodel/predictor.h"
#include "tessera/perfmodel/sweep.h"

using namespace tessera::perfmodel;

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: bench_predictor predictor.json\n");
    return 2;
  }
  auto p = Predictor::load(argv[1]);
  if (!p.ok()) {
    std::fprintf(stderr, "%s\n", p.status().to_string().c_str());
    return 1;
  }
  std::vector<OpQuery> queries;
  std::vector<std::string> texts;
  for (const std::string& space : sweep_ops()) {
    auto qs = sample_space(space, 256, 0);
    if (!qs.ok()) continue;
    for (const OpQuery& q : *qs)
      if ((*p)->predict(q).ok()) queries.push_back(q), texts.push_back(to_json(q));
  }
  if (queries.empty()) {
    std::fprintf(stderr, "bench_predictor: the model answers none of the sampled queries\n");
    return 1;
  }
  using Clock = std::chrono::steady_clock;
  auto rate = [&](auto&& body, size_t per_round) {
    std::vector<double> r;
    for (int rep = 0; rep < 7; ++rep) {
      const auto t0 = Clock::now();
      body();
      r.push_back(static_cast<double>(per_round) / std::chrono::duration<double>(Clock::now() - t0).count());
    }
    std::sort(r.begin(), r.end());
    return std::array<double, 3>{r[0], r[3], r[6]};
  };
  double sink = 0;
  const auto predict = rate(
      [&] {
        for (int k = 0; k < 10; ++k)
          for (const OpQuery& q : queries) sink += *(*p)->predict(q);
      },
      queries.size() * 10);
  const auto parse_predict = rate(
      [&] {
        for (const std::string& t : texts) sink += *(*p)->predict_json(t);
      },
      texts.size());
  std::printf("%zu queries over %zu families; predictions per second, one thread (min / median / max of 7):\n",
              queries.size(), (*p)->families().size());
  std::printf("  predict(OpQuery):      %.0f / %.0f / %.0f\n", predict[0], predict[1], predict[2]);
  std::printf("  predict_json(text):    %.0f / %.0f / %.0f\n", parse_predict[0], parse_predict[1], parse_predict[2]);
  return sink > 0 ? 0 : 1;
}
