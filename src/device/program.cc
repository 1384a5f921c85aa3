#include "tessera/device/program.h"

namespace tessera {

StatusOr<const Program*> ProgramCache::get_or_compile(const std::string& key, bool allow_compile,
                                                      const std::function<StatusOr<Program>()>& compile) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = programs_.find(key);
    if (it != programs_.end()) {
      ++hits_;
      return it->second.get();
    }
    if (!allow_compile)
      return failed_precondition_error(
          "program cache miss during trace capture: '{}' was not compiled before capture; run the op once "
          "with the same inputs before begin_trace_capture",
          key);
    ++misses_;
  }
  TS_ASSIGN_OR_RETURN(Program p, compile());
  p.key = key;
  std::lock_guard<std::mutex> lock(mu_);
  auto [it, inserted] = programs_.try_emplace(key, std::make_unique<Program>(std::move(p)));
  return it->second.get();
}

const Program* ProgramCache::find(const std::string& key) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = programs_.find(key);
  return it == programs_.end() ? nullptr : it->second.get();
}

size_t ProgramCache::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return programs_.size();
}
uint64_t ProgramCache::hits() const {
  std::lock_guard<std::mutex> lock(mu_);
  return hits_;
}
uint64_t ProgramCache::misses() const {
  std::lock_guard<std::mutex> lock(mu_);
  return misses_;
}

}  // namespace tessera
