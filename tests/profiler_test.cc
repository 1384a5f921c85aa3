// The device profiler: one record per launch (eager and replayed), from both
// queues, none lost (counted as dropped past the capacity), a readable
// Chrome trace, and its errors.
#include "tessera/device/profiler.h"

#include <fstream>
#include <sstream>

#include "tessera/ops/eltwise.h"
#include "test_util.h"

namespace tessera {
namespace {

TEST(Profiler, RecordsEagerAndReplayedLaunchesOnBothQueues) {
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({.trace_region_size = 1 << 20, .num_command_queues = 2}));
  Tensor h = testing::random_tensor(Shape{64, 64}, DataType::FLOAT32, Layout::ROW_MAJOR, 1);
  ASSERT_OK_AND_ASSIGN(Tensor x, to_device(h, *dev));
  ASSERT_OK(relu(x).status());  // compiled before profiling starts
  EXPECT_ERROR(read_profile(*dev), StatusCode::kFailedPrecondition, "profiler of device 0 is not enabled");
  ASSERT_OK(enable_profiler(*dev));
  for (int i = 0; i < 5; ++i) ASSERT_OK(relu(x).status());
  // Queue 1's output may reuse a buffer queue 0's discarded outputs are still
  // being written to: wait for queue 0 first, as users must (TSan caught it).
  ASSERT_OK(synchronize_device(*dev));
  ASSERT_OK(relu(x, {.cq_id = 1}).status());
  ASSERT_OK(synchronize_device(*dev));  // and the replay below reuses queue 1's
  ASSERT_OK_AND_ASSIGN(TraceId tid, begin_trace_capture(*dev, 0));
  for (int i = 0; i < 3; ++i) ASSERT_OK(relu(x).status());
  ASSERT_OK(end_trace_capture(*dev, tid, 0));
  ASSERT_OK(execute_trace(*dev, tid, 0, true));
  ASSERT_OK_AND_ASSIGN(DeviceProfile p, read_profile(*dev));
  ASSERT_EQ(p.ops.size(), 9u);  // 5 + 1 eager, 3 replayed (capture records, it does not run)
  EXPECT_EQ(p.dropped, 0u);
  int traced = 0, cq1 = 0;
  for (const OpTiming& o : p.ops) {
    traced += o.traced;
    cq1 += o.cq_id == 1;
    EXPECT_GE(o.end_ns, o.start_ns);
    EXPECT_NE(o.kernel_name.find("relu"), std::string::npos);
    EXPECT_EQ(o.key.rfind("relu", 0), 0u);
  }
  EXPECT_EQ(traced, 3);
  EXPECT_EQ(cq1, 1);
  EXPECT_GT(p.total_us(), 0.0);
  // Reading clears.
  ASSERT_OK_AND_ASSIGN(DeviceProfile empty, read_profile(*dev));
  EXPECT_TRUE(empty.ops.empty());

  const std::string path = ::testing::TempDir() + "tessera_profile.json";
  ASSERT_OK(write_chrome_trace(p, path));
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_EQ(text.str().rfind("{\"traceEvents\":[", 0), 0u);
  EXPECT_NE(text.str().find("\"ph\":\"X\""), std::string::npos);
  EXPECT_NE(text.str().find("\"op\":\"" + p.ops[0].key + "\""), std::string::npos);  // which op each bar is
  EXPECT_ERROR(write_chrome_trace(p, "/nonexistent-dir/x.json"), StatusCode::kInvalidArgument, "cannot open");
  ASSERT_OK(release_trace(*dev, tid));
}

// traced_kernel_times: each replay's launches summed, whether the trace fits
// or (without a TRACE region) the calls run eagerly instead.
TEST(Profiler, KernelTimesPerRunTracedOrEager) {
  for (uint64_t region : {uint64_t{1} << 20, uint64_t{0}}) {
    SCOPED_TRACE(region);
    ASSERT_OK_AND_ASSIGN(auto dev, open_device({.trace_region_size = region}));
    Tensor h = testing::random_tensor(Shape{64, 64}, DataType::FLOAT32, Layout::ROW_MAJOR, 1);
    ASSERT_OK_AND_ASSIGN(Tensor x, to_device(h, *dev));
    const auto call = [&]() -> Status {
      TS_RETURN_IF_ERROR(relu(x).status());
      return unary(x, {UnaryOpType::SIGMOID}).status();
    };
    ASSERT_OK(call());  // compiled first, as the contract asks
    ASSERT_OK_AND_ASSIGN(TracedTimes t, traced_kernel_times(*dev, call, 4));
    EXPECT_EQ(t.ns.size(), 4u);
    EXPECT_EQ(t.launches, 2u);
    EXPECT_NE(t.kernels.find("relu"), std::string::npos) << t.kernels;
    EXPECT_NE(t.kernels.find(" "), std::string::npos) << t.kernels;  // two names
    for (double ns : t.ns) EXPECT_GT(ns, 0.0);
    EXPECT_ERROR(read_profile(*dev), StatusCode::kFailedPrecondition, "not enabled");  // off after
    EXPECT_ERROR(traced_kernel_times(*dev, call, 0).status(), StatusCode::kInvalidArgument, "at least 1");
    ASSERT_OK(close_device(*dev));
  }
}

TEST(Profiler, CountsWhatExceedsTheCapacity) {
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({}));
  ASSERT_OK_AND_ASSIGN(Tensor x,
                       to_device(testing::random_tensor(Shape{32, 32}, DataType::FLOAT32, Layout::ROW_MAJOR, 1), *dev));
  ASSERT_OK(enable_profiler(*dev, 4));
  for (int i = 0; i < 10; ++i) ASSERT_OK(relu(x).status());
  ASSERT_OK_AND_ASSIGN(DeviceProfile p, read_profile(*dev));
  EXPECT_EQ(p.ops.size(), 4u);
  EXPECT_EQ(p.dropped, 6u);
  ASSERT_OK(disable_profiler(*dev));
  EXPECT_ERROR(read_profile(*dev), StatusCode::kFailedPrecondition, "not enabled");
}

}  // namespace
}  // namespace tessera
