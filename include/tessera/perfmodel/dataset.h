// The predictor's versioned dataset: an SQLite file (Debian's libsqlite3)
// holding every measurement with its full query (canonical JSON), the
// machine it was measured on (fingerprint with measured peaks), the Tessera
// commit and the date. Points an op refused are kept too (status holds the
// error), so that a resumed sweep skips them.
//
// Schema (version 1):
//   meta(key, value)                       schema_version
//   machines(id, static_key, fingerprint)  static_key: the fingerprint without
//                                          peaks; fingerprint: the latest, with them
//   measurements(id, machine_id, commit_id, measured_at, source, op, family,
//                query, status, time_ns, min_ns, max_ns, run_a_ns,
//                run_b_ns, passes, replays, launches, kernels)  unique (machine_id, commit_id, query)
//
// Not thread-safe: one Dataset per thread.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "tessera/base/status.h"
#include "tessera/perfmodel/machine.h"

struct sqlite3;

namespace tessera::perfmodel {

struct MeasurementRow {
  int64_t machine_id = 0;
  std::string commit, measured_at, source;  // source: "sobol", "lhs", a model's name
  std::string op, family, query;            // query: to_json(OpQuery)
  std::string status = "ok";                // "ok" or the op's error
  double time_ns = 0, min_ns = 0, max_ns = 0;
  // time_ns: the median over passes of each pass's time (measure.h);
  // run_a_ns / run_b_ns: the first two passes' (the measurement's repeatability).
  double run_a_ns = 0, run_b_ns = 0;
  uint32_t passes = 0, replays = 0, launches = 0;  // replays: over every pass
  std::string kernels;
};

class Dataset {
 public:
  // Opens or creates the file; a file with another schema version is FAILED_PRECONDITION.
  static StatusOr<std::unique_ptr<Dataset>> open(const std::string& path);
  ~Dataset();
  Dataset(const Dataset&) = delete;
  Dataset& operator=(const Dataset&) = delete;

  // The machine's id, adding it (or updating its peaks) as needed.
  StatusOr<int64_t> machine_id(const MachineFingerprint& m);
  StatusOr<MachineFingerprint> machine(int64_t id);
  // Every machine id with its fingerprint, in id order.
  StatusOr<std::vector<std::pair<int64_t, MachineFingerprint>>> machines();

  StatusOr<bool> contains(int64_t machine_id, std::string_view commit, std::string_view query);
  Status add(const MeasurementRow& row);  // replaces the row of the same machine, commit and query
  Status remove(int64_t machine_id, std::string_view commit, std::string_view query);
  // The rows of `machine_id` (0: every machine); `ok_only` leaves the refused points out.
  StatusOr<std::vector<MeasurementRow>> rows(int64_t machine_id = 0, bool ok_only = true);
  // Every row as CSV with a header line (fields quoted as RFC 4180 says).
  Status export_csv(const std::string& path);

  Status begin();  // a transaction around many adds (a sweep commits every few seconds)
  Status commit();

 private:
  explicit Dataset(sqlite3* db) : db_(db) {}
  Status exec(const char* sql);
  sqlite3* db_;
};

}  // namespace tessera::perfmodel
