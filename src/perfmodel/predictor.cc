#include "tessera/perfmodel/predictor.h"

#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tessera/perfmodel/features.h"

namespace tessera::perfmodel {
namespace {

using nlohmann::json;

template <class T>
Status read_array(const json& j, const char* key, std::vector<T>& out, std::string_view where) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_array())
    return invalid_argument_error("{}: '{}' is missing or not an array", where, key);
  out.clear();
  out.reserve(it->size());
  for (const json& v : *it) {
    if (!v.is_number()) return invalid_argument_error("{}: '{}' holds a non-number", where, key);
    out.push_back(v.get<T>());
  }
  return ok_status();
}

StatusOr<Forest::Tree> parse_tree(const json& j, size_t num_features, std::string_view where) {
  Forest::Tree t;
  TS_RETURN_IF_ERROR(read_array(j, "left", t.left, where));
  TS_RETURN_IF_ERROR(read_array(j, "right", t.right, where));
  TS_RETURN_IF_ERROR(read_array(j, "feature", t.feature, where));
  TS_RETURN_IF_ERROR(read_array(j, "value", t.value, where));
  TS_RETURN_IF_ERROR(read_array(j, "default_left", t.default_left, where));
  const size_t n = t.left.size();
  if (n == 0 || t.right.size() != n || t.feature.size() != n || t.value.size() != n || t.default_left.size() != n)
    return invalid_argument_error("{}: a tree's arrays differ in length", where);
  // Children must point forward (XGBoost numbers nodes breadth-first), so every walk ends, and each node
  // but the root has one parent, so that the tree is one (finalize lays out each node once).
  std::vector<uint8_t> parents(n, 0);
  for (size_t i = 0; i < n; ++i) {
    const bool leaf = t.left[i] < 0;
    if (!std::isfinite(t.value[i])) return invalid_argument_error("{}: a tree holds a non-finite value", where);
    if (leaf) continue;
    if (t.left[i] <= static_cast<int32_t>(i) || t.right[i] <= static_cast<int32_t>(i) ||
        static_cast<size_t>(t.left[i]) >= n || static_cast<size_t>(t.right[i]) >= n || t.feature[i] < 0 ||
        static_cast<size_t>(t.feature[i]) >= num_features)
      return invalid_argument_error("{}: a tree node points outside the tree or the features", where);
    if (++parents[static_cast<size_t>(t.left[i])] > 1 || ++parents[static_cast<size_t>(t.right[i])] > 1 ||
        t.left[i] == t.right[i])
      return invalid_argument_error("{}: a tree node has two parents (not a tree)", where);
  }
  return t;
}

struct Cache {
  std::mutex mu;
  std::map<std::string, std::pair<std::string, std::shared_ptr<const Predictor>>> by_path;  // path -> (stamp, model)
};
Cache& cache() {
  static Cache c;
  return c;
}

}  // namespace

void Forest::finalize() {
  nodes_.clear();
  roots_.clear();
  for (const Tree& t : trees) {
    const uint32_t root = static_cast<uint32_t>(nodes_.size());
    roots_.push_back(root);
    // Breadth first from the root, each node's two children given adjacent slots.
    std::vector<int32_t> order = {0};
    nodes_.push_back({});
    for (size_t k = 0; k < order.size(); ++k) {
      const size_t i = static_cast<size_t>(order[k]);
      Node& n = nodes_[root + k];
      n.value = t.value[i];
      n.feature = static_cast<uint16_t>(std::max(0, t.feature[i]));
      n.default_left = t.default_left[i];
      n.left = -1;
      if (t.left[i] < 0) continue;
      n.left = static_cast<int32_t>(order.size());
      order.push_back(t.left[i]);
      order.push_back(t.right[i]);
      nodes_.resize(nodes_.size() + 2);
    }
  }
}

double Forest::eval(const float* x) const {
  double sum = base;
  for (uint32_t root : roots_) {
    const Node* t = nodes_.data() + root;
    int32_t i = 0;
    while (t[i].left >= 0) {
      const float v = x[t[i].feature];
      i = t[i].left + (std::isnan(v) ? !t[i].default_left : !(v < t[i].value));
    }
    sum += t[i].value;
  }
  return sum;
}

std::string predictor_json(const MachineFingerprint& machine, std::string_view commit,
                           const std::vector<FamilyModel>& families, std::string_view metrics_json) {
  json j = {{"format", "tessera-predictor"},
            {"version", Predictor::kFormatVersion},
            {"commit", commit},
            {"created", utc_now()},
            {"machine", json::parse(to_json(machine))}};
  json fams = json::object();
  for (const FamilyModel& f : families) {
    json trees = json::array();
    for (const Forest::Tree& t : f.forest.trees)
      trees.push_back({{"left", t.left},
                       {"right", t.right},
                       {"feature", t.feature},
                       {"value", t.value},
                       {"default_left", t.default_left}});
    fams[f.family] = {{"feature_names", f.feature_names}, {"base", f.forest.base}, {"trees", trees}};
  }
  j["families"] = fams;
  j["metrics"] = json::parse(metrics_json.empty() ? "{}" : metrics_json, nullptr, false);
  return j.dump();
}

StatusOr<std::shared_ptr<const Predictor>> Predictor::from_json(std::string_view text, std::string_view origin) {
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object())
    return invalid_argument_error("{}: not a predictor model (not JSON; corrupt or truncated?)", origin);
  auto word = [&](const char* key) {
    auto it = j.find(key);
    return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
  };
  if (word("format") != "tessera-predictor")
    return invalid_argument_error("{}: not a predictor model (format '{}', expected 'tessera-predictor')", origin,
                                  word("format"));
  if (!j.contains("version") || !j["version"].is_number_integer() || j["version"].get<int>() != kFormatVersion)
    return failed_precondition_error("{}: predictor format version {}, this Tessera reads version {}", origin,
                                     j.contains("version") ? j["version"].dump() : "none", kFormatVersion);
  std::shared_ptr<Predictor> p(new Predictor());
  if (!j.contains("machine") || !j["machine"].is_object()) return invalid_argument_error("{}: no machine", origin);
  TS_ASSIGN_OR_RETURN(p->machine_, parse_fingerprint(j["machine"].dump()));
  if (!j.contains("commit") || !j["commit"].is_string()) return invalid_argument_error("{}: no commit", origin);
  p->commit_ = j["commit"].get<std::string>();
  p->created_ = word("created");
  auto fams = j.find("families");
  if (fams == j.end() || !fams->is_object()) return invalid_argument_error("{}: no families", origin);
  for (const auto& [name, f] : fams->items()) {
    const std::string where = fmt::format("{}: family {}", origin, name);
    FamilyModel m{.family = name};
    if (!f.is_object() || !f.contains("feature_names") || !f["feature_names"].is_array() || !f.contains("base") ||
        !f["base"].is_number() || !f.contains("trees") || !f["trees"].is_array())
      return invalid_argument_error("{}: expected feature_names, base and trees", where);
    for (const json& n : f["feature_names"]) {
      if (!n.is_string()) return invalid_argument_error("{}: a feature name is not a string", where);
      m.feature_names.push_back(n.get<std::string>());
    }
    if (m.feature_names != feature_names(name))
      return failed_precondition_error(
          "{}: its features are not this Tessera's for the family (retrain: "
          "tessera train-predictor)",
          where);
    m.forest.base = f["base"].get<float>();
    for (const json& t : f["trees"]) {
      TS_ASSIGN_OR_RETURN(Forest::Tree tree, parse_tree(t, m.feature_names.size(), where));
      m.forest.trees.push_back(std::move(tree));
    }
    m.forest.finalize();
    p->families_.push_back(std::move(m));
  }
  p->warnings_ = fingerprint_differences(p->machine_, this_machine(p->machine_.workers));
  if (p->commit_ != tessera_commit())
    p->warnings_.push_back(fmt::format("commit: {} -> {} (kernels may have changed)", p->commit_, tessera_commit()));
  return std::shared_ptr<const Predictor>(std::move(p));
}

StatusOr<std::shared_ptr<const Predictor>> Predictor::load(const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) return not_found_error("predictor model {}: no such file", path);
  const std::string stamp = fmt::format("{}:{}", st.st_size, st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec);
  Cache& c = cache();
  {
    std::lock_guard<std::mutex> lock(c.mu);
    if (auto it = c.by_path.find(path); it != c.by_path.end() && it->second.first == stamp) return it->second.second;
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return not_found_error("predictor model {}: cannot read", path);
  std::ostringstream text;
  text << in.rdbuf();
  TS_ASSIGN_OR_RETURN(auto p, from_json(text.str(), path));
  std::lock_guard<std::mutex> lock(c.mu);
  c.by_path[path] = {stamp, p};
  return p;
}

StatusOr<double> Predictor::predict(const OpQuery& q) const {
  TS_RETURN_IF_ERROR(validate(q));
  const std::string_view family = find_op(q.op)->family;
  for (const FamilyModel& m : families_) {
    if (m.family != family) continue;
    thread_local std::vector<float> x;
    x.clear();
    const double floor_ns = append_features(q, machine_, x);
    if (x.size() != m.feature_names.size())
      return internal_error("predictor: {} features for family {}, the model has {}", x.size(), family,
                            m.feature_names.size());
    const double ns = std::exp(m.forest.eval(x.data()));
    return std::max(ns, floor_ns);
  }
  return not_found_error(
      "predictor: no model for op family '{}' (op {}); sweep it (tessera sweep --ops ...) and "
      "retrain",
      family, q.op);
}

StatusOr<double> Predictor::predict_json(std::string_view query_json) const {
  TS_ASSIGN_OR_RETURN(OpQuery q, parse_op_query(query_json));
  return predict(q);
}

}  // namespace tessera::perfmodel
