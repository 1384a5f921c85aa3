#include "tessera/device/profiler.h"

#include <cstdio>
#include <map>

#include "command_queue.h"

namespace tessera {

ProfileSink& profile_sink(Device& device);  // device.cc

double DeviceProfile::total_us() const {
  double t = 0;
  for (const OpTiming& o : ops) t += o.duration_us();
  return t;
}

Status enable_profiler(Device& device, size_t capacity) {
  TS_RETURN_IF_ERROR(synchronize_device(device));  // no queue is recording while the buffer changes
  ProfileSink& p = profile_sink(device);
  p.enabled.store(false);
  p.records.assign(capacity, {});
  p.next.store(0);
  p.dropped.store(0);
  p.enabled.store(true);
  return ok_status();
}

Status disable_profiler(Device& device) {
  TS_RETURN_IF_ERROR(synchronize_device(device));
  profile_sink(device).enabled.store(false);
  return ok_status();
}

StatusOr<DeviceProfile> read_profile(Device& device) {
  TS_RETURN_IF_ERROR(synchronize_device(device));
  ProfileSink& p = profile_sink(device);
  if (!p.enabled.load()) return failed_precondition_error("read_profile: the profiler of device {} is not enabled",
                                                          device.id());
  DeviceProfile out;
  const size_t n = std::min(p.next.load(), p.records.size());
  out.ops.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    const ProfileSink::Record& r = p.records[i];
    out.ops.push_back({r.program->key, r.program->kernel_name, r.cq_id, r.traced, r.start_ns, r.end_ns});
  }
  out.dropped = p.dropped.exchange(0);
  p.next.store(0);
  return out;
}

namespace {

// Kernel names and op keys are printable ASCII; quotes and backslashes are the only characters to escape.
std::string json_escaped(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out;
}

}  // namespace

Status write_chrome_trace(const DeviceProfile& profile, const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (!f) return invalid_argument_error("write_chrome_trace: cannot open {} for writing", path);
  const int64_t t0 = profile.ops.empty() ? 0 : profile.ops.front().start_ns;
  std::fprintf(f, "{\"traceEvents\":[\n");
  for (size_t i = 0; i < profile.ops.size(); ++i) {
    const OpTiming& o = profile.ops[i];
    std::fprintf(f,
                 "%s{\"name\":\"%s\",\"ph\":\"X\",\"pid\":0,\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f,"
                 "\"args\":{\"traced\":%s,\"op\":\"%s\"}}",
                 i ? ",\n" : "", json_escaped(o.kernel_name).c_str(), o.cq_id,
                 static_cast<double>(o.start_ns - t0) / 1e3, o.duration_us(), o.traced ? "true" : "false",
                 json_escaped(o.key).c_str());
  }
  std::fprintf(f, "\n]}\n");
  if (std::fclose(f) != 0) return internal_error("write_chrome_trace: writing {} failed", path);
  return ok_status();
}

}  // namespace tessera
