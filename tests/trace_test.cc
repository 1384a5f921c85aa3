// Trace capture and replay: replay equals eager execution bit for bit,
// replay allocates nothing, every refused operation during capture, size
// limits, release.
#include <atomic>
#include <cstdlib>
#include <new>

#include "tessera/ops/data_movement.h"
#include "tessera/ops/eltwise.h"
#include "test_util.h"

// Counts every heap allocation in this test binary. GCC cannot see that the
// replaced operator new allocates with malloc, hence the pragma.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
static std::atomic<uint64_t> g_heap_allocations{0};
void* operator new(std::size_t n) {
  g_heap_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }

namespace tessera {
namespace {

// The model: rows -> tiles -> relu -> (+ itself) -> bfloat8_b -> float32 -> rows.
StatusOr<Tensor> model(const Tensor& input) {
  TS_ASSIGN_OR_RETURN(Tensor t, tilize(input, {.dtype = DataType::BFLOAT16}));
  TS_ASSIGN_OR_RETURN(Tensor r, relu(t));
  TS_ASSIGN_OR_RETURN(Tensor s, add(r, t));
  TS_ASSIGN_OR_RETURN(Tensor b, typecast(s, DataType::BFLOAT8_B));
  TS_ASSIGN_OR_RETURN(Tensor f, typecast(b, DataType::FLOAT32));
  return untilize(f);
}

const MemoryConfig kHeightSharded{TensorMemoryLayout::HEIGHT_SHARDED, BufferType::L1,
                                  ShardSpec{CoreRange({0, 0}, {0, 0}), {96, 64}, ShardOrientation::ROW_MAJOR}};

TEST(Trace, ReplayEqualsEagerBitForBit) {
  for (const MemoryConfig& mc : {DRAM_MEMORY_CONFIG, L1_MEMORY_CONFIG, kHeightSharded}) {
    SCOPED_TRACE(mc.to_string());
    ASSERT_OK_AND_ASSIGN(auto dev, open_device({.trace_region_size = 1 << 20, .num_command_queues = 2}));
    const Shape shape{1, 1, 96, 64};
    std::vector<Tensor> inputs;
    for (uint32_t i = 0; i < 8; ++i) inputs.push_back(testing::random_tensor(shape, DataType::FLOAT32, Layout::ROW_MAJOR, i));
    // Eager results.
    std::vector<std::vector<std::byte>> eager;
    for (const Tensor& h : inputs) {
      ASSERT_OK_AND_ASSIGN(Tensor d, to_device(h, *dev, mc));
      ASSERT_OK_AND_ASSIGN(Tensor out, model(d));
      ASSERT_OK_AND_ASSIGN(Tensor host, out.cpu());
      eager.push_back(testing::host_bytes(host));
    }
    // Capture once on a persistent input, then refill and replay.
    ASSERT_OK_AND_ASSIGN(Tensor input, to_device(inputs[0], *dev, mc));
    ASSERT_OK(model(input).status());  // compile run
    ASSERT_OK_AND_ASSIGN(TraceId tid, begin_trace_capture(*dev, 0));
    ASSERT_OK_AND_ASSIGN(Tensor output, model(input));
    ASSERT_OK(end_trace_capture(*dev, tid, 0));
    ASSERT_OK_AND_ASSIGN(TraceInfo info, trace_info(*dev, tid));
    EXPECT_EQ(info.num_launches, 6u);
    for (size_t i = 0; i < inputs.size(); ++i) {
      uint8_t cq = static_cast<uint8_t>(i % 2);  // replay on either queue
      ASSERT_OK(copy_host_to_device_tensor(inputs[i], input, cq));
      ASSERT_OK(execute_trace(*dev, tid, cq, /*blocking=*/false));
      ASSERT_OK_AND_ASSIGN(Tensor host, output.cpu(true, cq));
      ASSERT_EQ(testing::host_bytes(host), eager[i]) << "input " << i;
    }
    ASSERT_OK(release_trace(*dev, tid));
    EXPECT_EQ(dev->memory_stats(BufferType::TRACE).allocated_bytes, 0u);
    EXPECT_ERROR(execute_trace(*dev, tid, 0), StatusCode::kNotFound, "does not exist");
  }
}

TEST(Trace, ReplayAllocatesNothing) {
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({.trace_region_size = 1 << 20}));
  Tensor h = testing::random_tensor(Shape{1, 1, 256, 256}, DataType::FLOAT32, Layout::ROW_MAJOR, 1);
  ASSERT_OK_AND_ASSIGN(Tensor input, to_device(h, *dev));
  ASSERT_OK(model(input).status());
  ASSERT_OK_AND_ASSIGN(TraceId tid, begin_trace_capture(*dev, 0));
  ASSERT_OK_AND_ASSIGN(Tensor output, model(input));
  ASSERT_OK(end_trace_capture(*dev, tid, 0));
  ASSERT_OK(execute_trace(*dev, tid, 0, true));  // warm
  const uint64_t device_before = dev->allocation_count();
  const uint64_t heap_before = g_heap_allocations.load();
  for (int i = 0; i < 20; ++i) ASSERT_OK(execute_trace(*dev, tid, 0, true));
  const uint64_t heap_after = g_heap_allocations.load();
  EXPECT_EQ(dev->allocation_count(), device_before);
  EXPECT_EQ(heap_after - heap_before, 0u);
  // Eager execution of the same model does allocate (sanity check of the counter).
  ASSERT_OK(model(input).status());
  EXPECT_GT(g_heap_allocations.load(), heap_after);
  EXPECT_GT(dev->allocation_count(), device_before);
}

TEST(Trace, RefusedDuringCapture) {
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({.trace_region_size = 1 << 20, .num_command_queues = 2}));
  Tensor h = testing::random_tensor(Shape{64, 64}, DataType::BFLOAT16, Layout::TILE, 1);
  ASSERT_OK_AND_ASSIGN(Tensor d, to_device(h, *dev));
  ASSERT_OK(relu(d).status());
  ASSERT_OK(synchronize_device(*dev));  // cq 1 reads d below: order it after cq 0's write
  ASSERT_OK_AND_ASSIGN(Event other, record_event(*dev, 1));
  ASSERT_OK_AND_ASSIGN(TraceId tid, begin_trace_capture(*dev, 0));
  EXPECT_ERROR(begin_trace_capture(*dev, 0), StatusCode::kFailedPrecondition, "already capturing");
  EXPECT_ERROR(execute_trace(*dev, tid, 0), StatusCode::kFailedPrecondition, "cannot be nested");
  EXPECT_ERROR(record_event(*dev, 0), StatusCode::kFailedPrecondition, "cannot be recorded during trace capture");
  EXPECT_ERROR(wait_for_event(0, other), StatusCode::kFailedPrecondition, "cannot be waited on during trace capture");
  // An op never run before capture: a program cache miss.
  EXPECT_ERROR(add(d, d), StatusCode::kFailedPrecondition, "program cache miss during trace capture");
  EXPECT_ERROR(typecast(d, DataType::FLOAT32), StatusCode::kFailedPrecondition, "was not compiled before capture");
  // The other queue is not capturing: everything works there.
  ASSERT_OK(record_event(*dev, 1).status());
  ASSERT_OK(d.cpu(true, 1).status());
  ASSERT_OK(relu(d).status());  // compiled: recorded
  EXPECT_ERROR(copy_host_to_device_tensor(h, d, 0), StatusCode::kFailedPrecondition,
               "writes are not supported during trace capture");
  EXPECT_ERROR(d.cpu(true, 0), StatusCode::kFailedPrecondition, "reads are not supported during trace capture");
  // The trace saw a refused command: it cannot be used.
  EXPECT_ERROR(end_trace_capture(*dev, tid, 0), StatusCode::kFailedPrecondition, "unusable");
  EXPECT_ERROR(end_trace_capture(*dev, tid, 0), StatusCode::kFailedPrecondition, "is not capturing");
  ASSERT_OK(synchronize_device(*dev));
}

TEST(Trace, TooLargeForTheRegionStatesTheSizeItNeeds) {
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({.trace_region_size = 4096}));
  Tensor h = testing::random_tensor(Shape{64, 64}, DataType::BFLOAT16, Layout::TILE, 1);
  ASSERT_OK_AND_ASSIGN(Tensor d, to_device(h, *dev));
  ASSERT_OK(relu(d).status());
  ASSERT_OK_AND_ASSIGN(TraceId tid, begin_trace_capture(*dev, 0));
  for (int i = 0; i < 20; ++i) ASSERT_OK(relu(d).status());
  Status s = end_trace_capture(*dev, tid, 0);
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(s.message().find("Creating trace buffers of size"), std::string::npos) << s.to_string();
  EXPECT_NE(s.message().find("but only 4096B is allocated for trace region"), std::string::npos) << s.to_string();
  // A device without a trace region cannot hold any trace.
  ASSERT_OK_AND_ASSIGN(auto none, open_device({}));
  ASSERT_OK_AND_ASSIGN(TraceId t2, begin_trace_capture(*none, 0));
  EXPECT_ERROR(end_trace_capture(*none, t2, 0), StatusCode::kResourceExhausted, "but only 0B is allocated");
}

TEST(Trace, ManyTracesShareTheRegion) {
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({.trace_region_size = 64 * 1024}));
  Tensor h = testing::random_tensor(Shape{64, 64}, DataType::BFLOAT16, Layout::TILE, 1);
  ASSERT_OK_AND_ASSIGN(Tensor d, to_device(h, *dev));
  ASSERT_OK(relu(d).status());
  std::vector<TraceId> ids;
  Status full;
  for (int i = 0; i < 100 && full.ok(); ++i) {
    ASSERT_OK_AND_ASSIGN(TraceId tid, begin_trace_capture(*dev, 0));
    for (int k = 0; k < 5; ++k) ASSERT_OK(relu(d).status());
    full = end_trace_capture(*dev, tid, 0);
    if (full.ok()) ids.push_back(tid);
  }
  EXPECT_EQ(full.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(full.message().find("is free; release unused traces"), std::string::npos) << full.to_string();
  ASSERT_GT(ids.size(), 1u);
  ASSERT_OK(release_trace(*dev, ids[0]));
  ASSERT_OK_AND_ASSIGN(TraceId again, begin_trace_capture(*dev, 0));
  ASSERT_OK(relu(d).status());
  ASSERT_OK(end_trace_capture(*dev, again, 0));
}

}  // namespace
}  // namespace tessera

namespace tessera {
namespace {

// A buffer allocated after capture must never be written by a replay, even
// where it would reuse an intermediate the capture freed; release_trace gives
// every captured range back.
TEST(Trace, AllocationsAfterCaptureAreNotOverwrittenByReplay) {
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({.trace_region_size = 1 << 20}));
  const Shape shape{1, 1, 96, 64};
  Tensor h = testing::random_tensor(shape, DataType::FLOAT32, Layout::ROW_MAJOR, 1);
  ASSERT_OK_AND_ASSIGN(Tensor input, to_device(h, *dev, L1_MEMORY_CONFIG));
  ASSERT_OK(model(input).status());
  ASSERT_OK(synchronize_device(*dev));
  const uint64_t l1_before = dev->memory_stats(BufferType::L1).allocated_bytes;
  ASSERT_OK_AND_ASSIGN(TraceId tid, begin_trace_capture(*dev, 0));
  std::optional<Tensor> output;
  {
    ASSERT_OK_AND_ASSIGN(Tensor out, model(input));
    output = out;
  }
  ASSERT_OK(end_trace_capture(*dev, tid, 0));
  // New tensors of every intermediate's size, filled with a sentinel.
  std::vector<Tensor> sentinels;
  for (DataType dt : {DataType::BFLOAT16, DataType::BFLOAT8_B, DataType::FLOAT32}) {
    for (Layout layout : {Layout::TILE, Layout::ROW_MAJOR}) {
      if (is_block_float(dt) && layout == Layout::ROW_MAJOR) continue;
      ASSERT_OK_AND_ASSIGN(Tensor s, Tensor::from_vector(std::vector<float>(shape.volume(), 7.0f), shape, dt, layout));
      ASSERT_OK_AND_ASSIGN(Tensor d, to_device(s, *dev, L1_MEMORY_CONFIG));
      sentinels.push_back(d);
    }
  }
  ASSERT_OK(synchronize_device(*dev));
  for (int i = 0; i < 3; ++i) ASSERT_OK(execute_trace(*dev, tid, 0, true));
  for (const Tensor& d : sentinels) {
    ASSERT_OK_AND_ASSIGN(Tensor back, d.cpu());
    ASSERT_OK_AND_ASSIGN(auto v, back.to_vector());
    for (float x : v) ASSERT_EQ(x, 7.0f) << d.spec().to_string();
  }
  // Freeing the captured output waits for the trace; releasing the trace frees all.
  sentinels.clear();
  output.reset();
  EXPECT_GT(dev->memory_stats(BufferType::L1).allocated_bytes, l1_before);
  ASSERT_OK(release_trace(*dev, tid));
  EXPECT_EQ(dev->memory_stats(BufferType::L1).allocated_bytes, l1_before);
}

}  // namespace
}  // namespace tessera
