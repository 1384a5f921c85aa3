#include "tessera/device/device.h"

#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <vector>

#include "test_macros.h"

namespace tessera {
namespace {

TEST(Device, OpenValidatesParameters) {
  EXPECT_ERROR(open_device({.num_command_queues = 3}), StatusCode::kInvalidArgument,
               "num_command_queues must be 1 or 2, found 3");
  EXPECT_ERROR(open_device({.num_command_queues = 0}), StatusCode::kInvalidArgument, "found 0");
  EXPECT_ERROR(open_device({.descriptor = "wormhole_b0", .l1_small_size = 2000000}), StatusCode::kInvalidArgument,
               "l1_small_size 2000000 B does not fit in the 1499136 B of L1 per core");
  EXPECT_ERROR(open_device({.descriptor = "wormhole_b0", .trace_region_size = uint64_t{2} << 30}),
               StatusCode::kInvalidArgument, "trace_region_size");
  EXPECT_ERROR(open_device({.descriptor = "nope"}), StatusCode::kInvalidArgument, "unknown device descriptor");
}

TEST(Device, RegionsAreReservedAtOpen) {
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({.descriptor = "wormhole_b0", .l1_small_size = 16384,
                                              .trace_region_size = 1 << 20, .num_command_queues = 2}));
  EXPECT_EQ(dev->memory_stats(BufferType::L1_SMALL).bank_size, 16384u);
  EXPECT_EQ(dev->memory_stats(BufferType::L1).bank_size, 1499136u - 16384);
  EXPECT_EQ(dev->memory_stats(BufferType::L1).num_banks, 64u);
  EXPECT_EQ(dev->memory_stats(BufferType::TRACE).bank_size, 1u << 20);
  EXPECT_EQ(dev->memory_stats(BufferType::DRAM).bank_size, (uint64_t{1} << 30) - (1 << 20));
  EXPECT_EQ(dev->memory_stats(BufferType::DRAM).num_banks, 12u);
  EXPECT_OK(close_device(*dev));
  EXPECT_OK(close_device(*dev));  // idempotent
  EXPECT_ERROR(dev->allocate_buffer(BufferType::L1, 64), StatusCode::kFailedPrecondition, "closed");
}

// Exhausting each region gives RESOURCE_EXHAUSTED naming the request, the
// region and what is free.
TEST(Device, ExhaustionErrorsForEveryRegion) {
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({.descriptor = "wormhole_b0", .l1_small_size = 4096,
                                              .trace_region_size = 8192}));
  struct Case { BufferType type; uint64_t size; const char* region; };
  for (Case c : {Case{BufferType::L1, 1499136, "L1 buffer across 64 banks"},
                 Case{BufferType::L1_SMALL, 8192, "L1_SMALL buffer across 64 banks"},
                 Case{BufferType::DRAM, uint64_t{2} << 30, "DRAM buffer across 12 banks"},
                 Case{BufferType::TRACE, 16384, "TRACE buffer across 1 banks"}}) {
    auto r = dev->allocate_buffer(c.type, c.size, "conv1 output");
    ASSERT_FALSE(r.ok()) << buffer_type_name(c.type);
    EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted);
    const std::string& m = r.status().message();
    EXPECT_NE(m.find("Out of Memory: Not enough space to allocate"), std::string::npos) << m;
    EXPECT_NE(m.find(c.region), std::string::npos) << m;
    EXPECT_NE(m.find(fmt::format("each bank needs to store {} B", c.size)), std::string::npos) << m;
    EXPECT_NE(m.find("B free"), std::string::npos) << m;
    EXPECT_NE(m.find("conv1 output"), std::string::npos) << m;
  }
  // Fill L1 with two buffers; the third fails and reports what is left.
  ASSERT_OK_AND_ASSIGN(auto a, dev->allocate_buffer(BufferType::L1, 700000));
  ASSERT_OK_AND_ASSIGN(auto b, dev->allocate_buffer(BufferType::L1, 700000));
  EXPECT_ERROR(dev->allocate_buffer(BufferType::L1, 700000), StatusCode::kResourceExhausted, "with 95040 B free");
  b.reset();  // freed with its last reference
  EXPECT_OK(dev->allocate_buffer(BufferType::L1, 700000).status());
}

TEST(Device, AllocationIsDeterministicAcrossFreeAndReallocate) {
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({.descriptor = "wormhole_b0"}));
  ASSERT_OK_AND_ASSIGN(auto w, dev->allocate_buffer(BufferType::L1, 1000));
  ASSERT_OK_AND_ASSIGN(auto x, dev->allocate_buffer(BufferType::L1, 5000));
  ASSERT_OK_AND_ASSIGN(auto y, dev->allocate_buffer(BufferType::L1, 3000));
  const uint64_t captured = x->address();
  x->deallocate();
  EXPECT_FALSE(x->is_allocated());
  ASSERT_OK_AND_ASSIGN(auto x2, dev->allocate_buffer(BufferType::L1, 5000));
  EXPECT_EQ(x2->address(), captured);
  // A second device with the same sequence gets the same addresses.
  ASSERT_OK_AND_ASSIGN(auto dev2, open_device({.descriptor = "wormhole_b0"}));
  ASSERT_OK_AND_ASSIGN(auto w2, dev2->allocate_buffer(BufferType::L1, 1000));
  ASSERT_OK_AND_ASSIGN(auto x3, dev2->allocate_buffer(BufferType::L1, 5000));
  EXPECT_EQ(w2->address(), w->address());
  EXPECT_EQ(x3->address(), captured);
  EXPECT_EQ(w->address() % 16, 0u);
}

// A file's pages mapped into DRAM read as the file, take writes without
// changing it, and once freed leave plain memory behind.
TEST(Device, MapFileMapsPagesCopyOnWrite) {
  char path[] = "/tmp/tessera_map_file_XXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  std::vector<uint8_t> bytes(3 * 4096);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i * 7 + 1);
  ASSERT_EQ(write(fd, bytes.data(), bytes.size()), static_cast<ssize_t>(bytes.size()));
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({}));
  EXPECT_ERROR(dev->map_file(fd, 100, 4096), StatusCode::kInvalidArgument, "not a multiple of 4096");
  const uint64_t before = dev->memory_stats(BufferType::DRAM).allocated_bytes;
  uint64_t address = 0;
  {
    ASSERT_OK_AND_ASSIGN(auto buf, dev->map_file(fd, 4096, 5000, "test"));  // pages 1 and 2 of the file
    EXPECT_EQ(buf->size_per_bank(), 5000u);
    address = buf->address();
    std::byte* p = dev->host_address(BufferType::DRAM, 0, address);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 4096, 0u);
    EXPECT_EQ(std::memcmp(p, bytes.data() + 4096, 5000), 0);
    std::memset(p, 0, 5000);  // copy-on-write: the file keeps its bytes
    std::vector<uint8_t> file(bytes.size());
    ASSERT_EQ(pread(fd, file.data(), file.size(), 0), static_cast<ssize_t>(file.size()));
    EXPECT_EQ(file, bytes);
  }
  EXPECT_EQ(dev->memory_stats(BufferType::DRAM).allocated_bytes, before);
  // The range is device memory again: writable, and writes stay in memory.
  ASSERT_OK_AND_ASSIGN(auto again, dev->allocate_buffer(BufferType::DRAM, 3 * 4096));
  std::memset(dev->host_address(BufferType::DRAM, 0, again->address()), 0x5a, 3 * 4096);
  std::vector<uint8_t> file(bytes.size());
  ASSERT_EQ(pread(fd, file.data(), file.size(), 0), static_cast<ssize_t>(file.size()));
  EXPECT_EQ(file, bytes);
  close(fd);
  unlink(path);
  // Emulated devices interleave DRAM over banks: the caller copies instead.
  ASSERT_OK_AND_ASSIGN(auto wh, open_device({.descriptor = "wormhole_b0"}));
  EXPECT_ERROR(wh->map_file(0, 0, 4096), StatusCode::kUnimplemented, "12 banks");
}

TEST(Device, QueueIdsAreChecked) {
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({.num_command_queues = 1}));
  EXPECT_ERROR(record_event(*dev, 1), StatusCode::kOutOfRange, "cq_id 1 is out of range");
  EXPECT_ERROR(begin_trace_capture(*dev, 1), StatusCode::kOutOfRange, "cq_id 1");
  EXPECT_ERROR(synchronize_device(*dev, 1), StatusCode::kOutOfRange, "cq_id 1");
  EXPECT_ERROR(execute_trace(*dev, 0, 0), StatusCode::kNotFound, "trace 0 does not exist");
  EXPECT_ERROR(release_trace(*dev, 7), StatusCode::kNotFound, "trace 7");
}

}  // namespace
}  // namespace tessera
