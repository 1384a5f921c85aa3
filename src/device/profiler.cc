#include "tessera/device/profiler.h"

#include <algorithm>
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
  if (!p.enabled.load())
    return failed_precondition_error("read_profile: the profiler of device {} is not enabled", device.id());
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

// Each of `runs` equal runs' launches summed, from a profile of exactly those runs.
StatusOr<TracedTimes> per_run_times(const StatusOr<DeviceProfile>& profile, uint32_t runs) {
  if (!profile.ok()) return profile.status();
  const size_t n = profile->ops.size();
  if (n == 0 || n % runs != 0 || profile->dropped)
    return internal_error("kernel times: {} launches recorded over {} runs ({} dropped)", n, runs, profile->dropped);
  TracedTimes t{.ns = std::vector<double>(runs, 0.0), .launches = static_cast<uint32_t>(n / runs)};
  for (size_t i = 0; i < n; ++i)
    t.ns[i / t.launches] += static_cast<double>(profile->ops[i].end_ns - profile->ops[i].start_ns);
  for (size_t i = 0; i < t.launches; ++i) t.kernels += (i ? " " : "") + profile->ops[i].kernel_name;
  return t;
}

// Without room for a trace: `call` once untimed, then `runs` times back to back.
StatusOr<TracedTimes> eager_kernel_times(Device& device, const std::function<Status()>& call, uint32_t runs) {
  Status run = call();
  if (run.ok()) run = synchronize_device(device);
  if (run.ok()) run = enable_profiler(device, std::max<size_t>(1 << 14, size_t{runs} * 64));
  for (uint32_t r = 0; run.ok() && r < runs; ++r) run = call();
  StatusOr<DeviceProfile> profile = run.ok() ? read_profile(device) : StatusOr<DeviceProfile>(run);
  (void)disable_profiler(device);
  return per_run_times(profile, runs);
}

}  // namespace

StatusOr<TracedTimes> traced_kernel_times(Device& device, const std::function<Status()>& call, uint32_t replays,
                                          uint8_t cq_id) {
  if (replays == 0) return invalid_argument_error("traced_kernel_times: replays must be at least 1");
  TS_RETURN_IF_ERROR(synchronize_device(device));
  TS_ASSIGN_OR_RETURN(TraceId trace, begin_trace_capture(device, cq_id));
  Status captured = call();
  Status ended = end_trace_capture(device, trace, cq_id);
  auto release = [&] { (void)release_trace(device, trace); };
  if (!captured.ok() || !ended.ok()) {
    release();
    if (captured.ok() && ended.code() == StatusCode::kResourceExhausted)
      return eager_kernel_times(device, call, replays);
    return captured.ok() ? ended : captured;
  }
  Status run = execute_trace(device, trace, cq_id, true);  // warm: caches and page tables as in steady state
  if (run.ok()) run = enable_profiler(device, std::max<size_t>(1 << 14, size_t{replays} * 64));
  for (uint32_t r = 0; run.ok() && r < replays; ++r) run = execute_trace(device, trace, cq_id, true);
  StatusOr<DeviceProfile> profile = run.ok() ? read_profile(device) : StatusOr<DeviceProfile>(run);
  (void)disable_profiler(device);
  release();
  return per_run_times(profile, replays);
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
