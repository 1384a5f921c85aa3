#include "tessera/perfmodel/dataset.h"

#include <sqlite3.h>

#include <fstream>

namespace tessera::perfmodel {
namespace {

constexpr int kSchemaVersion = 1;

constexpr const char* kSchema = R"sql(
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS machines(id INTEGER PRIMARY KEY, static_key TEXT UNIQUE NOT NULL,
                                    fingerprint TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS measurements(
  id INTEGER PRIMARY KEY, machine_id INTEGER NOT NULL REFERENCES machines(id),
  commit_id TEXT NOT NULL, measured_at TEXT NOT NULL, source TEXT NOT NULL,
  op TEXT NOT NULL, family TEXT NOT NULL, query TEXT NOT NULL, status TEXT NOT NULL,
  time_ns REAL NOT NULL, min_ns REAL NOT NULL, max_ns REAL NOT NULL,
  run_a_ns REAL NOT NULL, run_b_ns REAL NOT NULL, passes INTEGER NOT NULL,
  replays INTEGER NOT NULL, launches INTEGER NOT NULL, kernels TEXT NOT NULL,
  UNIQUE(machine_id, commit_id, query));
)sql";

// A prepared statement, finalized on scope exit.
class Stmt {
 public:
  Stmt(sqlite3* db, const char* sql) : db_(db) { rc_ = sqlite3_prepare_v2(db, sql, -1, &s_, nullptr); }
  ~Stmt() { sqlite3_finalize(s_); }
  Status status() const { return rc_ == SQLITE_OK ? ok_status() : internal_error("sqlite: {}", sqlite3_errmsg(db_)); }
  Stmt& bind(int i, std::string_view v) {
    sqlite3_bind_text(s_, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
    return *this;
  }
  Stmt& bind(int i, double v) {
    sqlite3_bind_double(s_, i, v);
    return *this;
  }
  Stmt& bind(int i, int64_t v) {
    sqlite3_bind_int64(s_, i, v);
    return *this;
  }
  // SQLITE_ROW, SQLITE_DONE or an error status.
  StatusOr<bool> step() {
    const int rc = sqlite3_step(s_);
    if (rc == SQLITE_ROW) return true;
    if (rc == SQLITE_DONE) return false;
    return internal_error("sqlite: {}", sqlite3_errmsg(db_));
  }
  std::string text(int i) const {
    const auto* p = reinterpret_cast<const char*>(sqlite3_column_text(s_, i));
    return p ? std::string(p) : std::string();
  }
  double real(int i) const { return sqlite3_column_double(s_, i); }
  int64_t integer(int i) const { return sqlite3_column_int64(s_, i); }

 private:
  sqlite3* db_;
  sqlite3_stmt* s_ = nullptr;
  int rc_;
};

std::string static_key(MachineFingerprint m) {
  m.fma_gflops = m.bf16_gflops = m.dram_gbps = m.cache_gbps = 0;
  return to_json(m);
}

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string q = "\"";
  for (char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
  return q + "\"";
}

constexpr const char* kRowColumns =
    "machine_id, commit_id, measured_at, source, op, family, query, status, time_ns, min_ns, max_ns, "
    "run_a_ns, run_b_ns, passes, replays, launches, kernels";

MeasurementRow read_row(const Stmt& s) {
  return {.machine_id = s.integer(0),
          .commit = s.text(1),
          .measured_at = s.text(2),
          .source = s.text(3),
          .op = s.text(4),
          .family = s.text(5),
          .query = s.text(6),
          .status = s.text(7),
          .time_ns = s.real(8),
          .min_ns = s.real(9),
          .max_ns = s.real(10),
          .run_a_ns = s.real(11),
          .run_b_ns = s.real(12),
          .passes = static_cast<uint32_t>(s.integer(13)),
          .replays = static_cast<uint32_t>(s.integer(14)),
          .launches = static_cast<uint32_t>(s.integer(15)),
          .kernels = s.text(16)};
}

}  // namespace

StatusOr<std::unique_ptr<Dataset>> Dataset::open(const std::string& path) {
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr) != SQLITE_OK) {
    Status s = invalid_argument_error("dataset {}: cannot open: {}", path, db ? sqlite3_errmsg(db) : "out of memory");
    sqlite3_close(db);
    return s;
  }
  std::unique_ptr<Dataset> d(new Dataset(db));
  sqlite3_busy_timeout(db, 5000);
  // Rows reach the OS at once (a process that dies keeps them) without an fsync per row.
  if (Status s = d->exec("PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;"); !s.ok()) return s.annotate(path);
  if (Status s = d->exec(kSchema); !s.ok()) return s.annotate("dataset " + path + " (is it an SQLite file?)");
  Stmt get(db, "SELECT value FROM meta WHERE key = 'schema_version'");
  TS_RETURN_IF_ERROR(get.status());
  TS_ASSIGN_OR_RETURN(bool found, get.step());
  if (!found) {
    Stmt put(db, "INSERT INTO meta(key, value) VALUES('schema_version', ?)");
    put.bind(1, std::to_string(kSchemaVersion));
    TS_RETURN_IF_ERROR(put.step().status());
  } else if (get.text(0) != std::to_string(kSchemaVersion)) {
    return failed_precondition_error("dataset {}: schema version {}, this Tessera reads version {}", path, get.text(0),
                                     kSchemaVersion);
  }
  return d;
}

Dataset::~Dataset() { sqlite3_close(db_); }

Status Dataset::exec(const char* sql) {
  char* err = nullptr;
  if (sqlite3_exec(db_, sql, nullptr, nullptr, &err) == SQLITE_OK) return ok_status();
  Status s = internal_error("sqlite: {}", err ? err : sqlite3_errmsg(db_));
  sqlite3_free(err);
  return s;
}

Status Dataset::begin() { return exec("BEGIN"); }
Status Dataset::commit() { return exec("COMMIT"); }

StatusOr<int64_t> Dataset::machine_id(const MachineFingerprint& m) {
  const std::string key = static_key(m);
  Stmt up(db_,
          "INSERT INTO machines(static_key, fingerprint) VALUES(?1, ?2) "
          "ON CONFLICT(static_key) DO UPDATE SET fingerprint = ?2 RETURNING id");
  TS_RETURN_IF_ERROR(up.status());
  up.bind(1, key).bind(2, to_json(m));
  TS_ASSIGN_OR_RETURN(bool row, up.step());
  if (!row) return internal_error("sqlite: no id returned for the machine");
  return up.integer(0);
}

StatusOr<MachineFingerprint> Dataset::machine(int64_t id) {
  Stmt s(db_, "SELECT fingerprint FROM machines WHERE id = ?");
  TS_RETURN_IF_ERROR(s.status());
  s.bind(1, id);
  TS_ASSIGN_OR_RETURN(bool row, s.step());
  if (!row) return not_found_error("dataset: no machine {}", id);
  return parse_fingerprint(s.text(0));
}

StatusOr<std::vector<std::pair<int64_t, MachineFingerprint>>> Dataset::machines() {
  Stmt s(db_, "SELECT id, fingerprint FROM machines ORDER BY id");
  TS_RETURN_IF_ERROR(s.status());
  std::vector<std::pair<int64_t, MachineFingerprint>> v;
  while (true) {
    TS_ASSIGN_OR_RETURN(bool row, s.step());
    if (!row) return v;
    TS_ASSIGN_OR_RETURN(MachineFingerprint m, parse_fingerprint(s.text(1)));
    v.emplace_back(s.integer(0), std::move(m));
  }
}

StatusOr<bool> Dataset::contains(int64_t machine_id, std::string_view commit, std::string_view query) {
  Stmt s(db_, "SELECT 1 FROM measurements WHERE machine_id = ? AND commit_id = ? AND query = ?");
  TS_RETURN_IF_ERROR(s.status());
  s.bind(1, machine_id).bind(2, commit).bind(3, query);
  return s.step();
}

Status Dataset::add(const MeasurementRow& r) {
  Stmt s(db_,
         "INSERT OR REPLACE INTO measurements(machine_id, commit_id, measured_at, source, op, family, query, "
         "status, time_ns, min_ns, max_ns, run_a_ns, run_b_ns, passes, replays, launches, kernels) "
         "VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
  TS_RETURN_IF_ERROR(s.status());
  s.bind(1, r.machine_id).bind(2, r.commit).bind(3, r.measured_at).bind(4, r.source).bind(5, r.op).bind(6, r.family);
  s.bind(7, r.query).bind(8, r.status).bind(9, r.time_ns).bind(10, r.min_ns).bind(11, r.max_ns);
  s.bind(12, r.run_a_ns).bind(13, r.run_b_ns);
  s.bind(14, static_cast<int64_t>(r.passes)).bind(15, static_cast<int64_t>(r.replays));
  s.bind(16, static_cast<int64_t>(r.launches)).bind(17, r.kernels);
  return s.step().status();
}

Status Dataset::remove(int64_t machine_id, std::string_view commit, std::string_view query) {
  Stmt s(db_, "DELETE FROM measurements WHERE machine_id = ? AND commit_id = ? AND query = ?");
  TS_RETURN_IF_ERROR(s.status());
  s.bind(1, machine_id).bind(2, commit).bind(3, query);
  return s.step().status();
}

StatusOr<std::vector<MeasurementRow>> Dataset::rows(int64_t machine_id, bool ok_only) {
  const std::string sql = fmt::format("SELECT {} FROM measurements WHERE (?1 = 0 OR machine_id = ?1) {} ORDER BY id",
                                      kRowColumns, ok_only ? "AND status = 'ok'" : "");
  Stmt s(db_, sql.c_str());
  TS_RETURN_IF_ERROR(s.status());
  s.bind(1, machine_id);
  std::vector<MeasurementRow> v;
  while (true) {
    TS_ASSIGN_OR_RETURN(bool row, s.step());
    if (!row) return v;
    v.push_back(read_row(s));
  }
}

Status Dataset::export_csv(const std::string& path) {
  std::ofstream out(path);
  if (!out) return invalid_argument_error("cannot write {}", path);
  out << kRowColumns << ", machine\n";
  TS_ASSIGN_OR_RETURN(auto all, rows(0, false));
  TS_ASSIGN_OR_RETURN(auto ms, machines());
  for (const MeasurementRow& r : all) {
    std::string machine;
    for (const auto& [id, m] : ms)
      if (id == r.machine_id) machine = to_json(m);
    out << r.machine_id << ',' << csv_field(r.commit) << ',' << r.measured_at << ',' << csv_field(r.source) << ','
        << r.op << ',' << r.family << ',' << csv_field(r.query) << ',' << csv_field(r.status) << ','
        << fmt::format("{:.1f},{:.1f},{:.1f},{:.1f},{:.1f}", r.time_ns, r.min_ns, r.max_ns, r.run_a_ns, r.run_b_ns)
        << ',' << r.passes << ',' << r.replays << ',' << r.launches << ',' << csv_field(r.kernels) << ','
        << csv_field(machine) << '\n';
  }
  out.flush();
  if (!out) return internal_error("writing {} failed", path);
  return ok_status();
}

}  // namespace tessera::perfmodel
