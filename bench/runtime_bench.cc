// Runtime benchmarks of the device layer, each beside its anchor, in one run:
//   1. dispatch overhead: a chain of 100 small ops, eager vs traced replay,
//      and the worker pool's cost of splitting a launch over two threads;
//   2. host <-> device transfer bandwidth vs memcpy of the same bytes;
//   3. tilize, bfloat8_b / bfloat4_b pack and unpack throughput vs this
//      machine's memory bandwidth (read, write, copy), 1 thread and all cores.
//
//   bench_runtime [--quick]
#include <chrono>
#include <cstring>
#include <string>
#include <thread>

#include "harness.h"
#include "tessera/base/cpu_features.h"
#include "tessera/base/thread_pool.h"
#include "tessera/numerics/block_float.h"
#include "tessera/numerics/convert.h"
#include "tessera/numerics/tilize.h"
#include "tessera/ops/pool2d.h"
#include "tessera/tessera.h"

namespace {

using namespace tessera;
using bench::Bandwidth;
using bench::measure_bandwidth;
using bench::time_it;

using bench::value_or_die;

void dispatch_overhead(int reps) {
  std::printf("\n## Dispatch overhead: chain of 100 small ops (relu on one bf16 tile, cpu device)\n\n");
  std::printf("| mode | us per op (median) | min | max | vs eager |\n|---|---|---|---|---|\n");
  auto dev = value_or_die(open_device({.trace_region_size = 1 << 20}));
  Tensor h = value_or_die(Tensor::from_vector(std::vector<float>(1024, -1.5f), Shape{32, 32}, DataType::BFLOAT16,
                                              Layout::TILE));
  Tensor in = value_or_die(to_device(h, *dev, L1_MEMORY_CONFIG));
  auto chain = [&] {
    Tensor x = in;
    for (int i = 0; i < 100; ++i) x = value_or_die(relu(x));
    return x;
  };
  chain();
  CHECK_OK(synchronize_device(*dev));
  auto eager = time_it(reps, [&] {
    chain();
    CHECK_OK(synchronize_device(*dev));
  });
  TraceId tid = value_or_die(begin_trace_capture(*dev, 0));
  Tensor out = chain();
  CHECK_OK(end_trace_capture(*dev, tid, 0));
  auto traced = time_it(reps, [&] { CHECK_OK(execute_trace(*dev, tid, 0, true)); });
  auto row = [&](const char* name, bench::Timing t) {
    std::printf("| %s | %.2f | %.2f | %.2f | %.1fx |\n", name, t.median_s * 1e4, t.min_s * 1e4, t.max_s * 1e4,
                eager.median_s / t.median_s);
  };
  row("eager (validate, allocate, cache lookup, enqueue, run)", eager);
  row("traced replay (execute_trace)", traced);
}

// The pool alone: parallel_for over two chunks of busy work, one per thread,
// beside the same work run on the caller alone. The difference is what a
// launch split over two workers pays for the split (the second worker's
// pick-up and the join).
void pool_launch_rows(int reps, const std::vector<int>& cpus, bool pin) {
  if (pin) pin_current_thread(cpus[0]);
  ThreadPool pool(2, pin ? std::vector<int>{cpus[1]} : std::vector<int>{});
  auto busy = [](double us) {
    const auto t0 = std::chrono::steady_clock::now();
    while (std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() < us) {
    }
  };
  for (double us : {0.0, 1.0, 2.0, 4.0, 8.0}) {
    auto fn = [&](uint32_t b, uint32_t e) { busy(us * (e - b)); };
    auto time_calls = [&](uint32_t grain) {
      // 200 calls back to back per repetition, as a trace replay launches.
      return time_it(reps, [&] {
        for (int i = 0; i < 200; ++i) pool.parallel_for(2, grain, fn);
      });
    };
    const bench::Timing one = time_calls(2), two = time_calls(1);
    const double k = 1e6 / 200;
    std::printf("| %.0f | %.2f | %.2f | %.2f..%.2f | %.2f |\n", us, one.median_s * k, two.median_s * k, two.min_s * k,
                two.max_s * k, two.median_s * k - us);
  }
}

void pool_launch(int reps) {
  std::printf("\n## Pool launch: two chunks of busy work on a 2-thread pool vs the caller alone\n\n");
  std::printf("| work per chunk (us) | one thread us (median) | two threads us (median) | min..max | overhead us |\n");
  std::printf("|---|---|---|---|---|\n");
  // The caller and worker pinned as a device pins its queue thread and
  // worker, so that the placement probe below speaks for the two threads
  // timed. The caller is a thread of its own: main stays unpinned.
  const std::vector<int>& cpus = physical_core_cpus();
  const bool pin = cpus.size() >= 2;
  std::thread([&] { pool_launch_rows(reps, cpus, pin); }).join();
  if (pin)
    std::printf("\nA cache line's round trip between the two cores after the table: %.0f ns (on the Zen 5 VM about "
                "100 with its two vCPUs in one core complex, where a launch costs about 0.25 us, and about 500 in two, "
                "about 0.8 us; on the Intel VM about 300-450, about 0.9 us).\n",
                bench::core_round_trip_ns(cpus[0], cpus[1]));
}

void transfers(int reps) {
  std::printf("\n## Host <-> device transfers vs memcpy of the same bytes (cpu device)\n\n");
  std::printf("A transfer runs on the queue thread plus the device's workers; it is compared with memcpy split over\n"
              "the same number of threads, in the same run.\n\n");
  std::printf("| transfer | threads | MiB | GB/s (median) | min..max | memcpy GB/s (median) | ratio |\n"
              "|---|---|---|---|---|---|---|\n");
  const int all = static_cast<int>(std::thread::hardware_concurrency());
  for (int threads : {1, all}) {
    auto dev = value_or_die(open_device({.worker_threads = threads}));
    ThreadPool pool(threads);
    for (uint32_t mib : {1u, 16u, 64u}) {
      const uint32_t rows = mib * 1024 / 4;  // 1024 floats per row = 4 KiB
      Shape shape{1, 1, rows, 1024};
      Tensor h = allocate_tensor_on_host({shape, DataType::FLOAT32, Layout::TILE});
      Tensor back = allocate_tensor_on_host(h.spec());
      Tensor d = value_or_die(to_device(h, *dev, DRAM_MEMORY_CONFIG));
      const size_t bytes = h.spec().storage_bytes();
      std::vector<std::byte> a(bytes, std::byte{1}), b(bytes, std::byte{2});
      const uint32_t parts = static_cast<uint32_t>(threads);
      auto mc = time_it(reps, [&] {
        auto body = [&](uint32_t s, uint32_t e) {
          for (uint32_t p = s; p < e; ++p)
            std::memcpy(b.data() + bytes * p / parts, a.data() + bytes * p / parts,
                        bytes * (p + 1) / parts - bytes * p / parts);
        };
        pool.parallel_for(parts, 1, body);
      });
      auto w = time_it(reps, [&] {
        CHECK_OK(copy_host_to_device_tensor(h, d, 0));
        CHECK_OK(synchronize_device(*dev));
      });
      auto r = time_it(reps, [&] { CHECK_OK(copy_device_to_host_tensor(d, back, true, 0)); });
      auto gbs = [&](double sec) { return bytes / sec / 1e9; };
      for (auto [name, t] : {std::pair{"host->device", w}, std::pair{"device->host", r}})
        std::printf("| %s (TILE f32, DRAM interleaved) | %d | %u | %.1f | %.1f..%.1f | %.1f | %.2f |\n", name, threads,
                    mib, gbs(t.median_s), gbs(t.max_s), gbs(t.min_s), gbs(mc.median_s), gbs(t.median_s) / gbs(mc.median_s));
    }
  }
}

void numerics(int reps) {
  std::printf("\n## Tilize and block-float throughput vs memory bandwidth\n\n");
  const size_t tiles = 16384;  // 64 MiB of fp32: well past the caches
  const size_t n = tiles * 1024;
  std::vector<float> src(n), dst(n);
  for (size_t i = 0; i < n; ++i) src[i] = static_cast<float>(i % 1000) * 0.37f - 100.0f;
  std::vector<std::byte> bfp8(tiles * 1088), bfp4(tiles * 576);
  std::vector<uint16_t> bf16(n);
  for (int threads : {1, static_cast<int>(std::thread::hardware_concurrency())}) {
    ThreadPool pool(threads);
    Bandwidth bw = measure_bandwidth(pool, n * 4, reps);
    std::printf("### %d thread(s): memory read %.1f GB/s, write %.1f GB/s, copy (read+write) %.1f GB/s\n\n", threads,
                bw.read, bw.write, bw.copy);
    std::printf("| kernel | bytes moved per tile | GB/s (median) | %% of copy bandwidth |\n|---|---|---|---|\n");
    const uint32_t chunks = static_cast<uint32_t>(threads) * 8;
    auto run = [&](const char* name, double bytes_per_tile, auto fn) {
      auto t = time_it(reps, [&] {
        auto body = [&](uint32_t s, uint32_t e) {
          for (uint32_t c = s; c < e; ++c) fn(tiles * c / chunks, tiles * (c + 1) / chunks);
        };
        pool.parallel_for(chunks, 1, body);
      });
      double gbs = bytes_per_tile * tiles / t.median_s / 1e9;
      std::printf("| %s | %.0f | %.2f | %.0f%% |\n", name, bytes_per_tile, gbs, 100.0 * gbs / bw.copy);
    };
    // Tilize a (tiles/32) x 32*1024 fp32 matrix: 32 tile rows per band.
    const uint32_t cols = 32 * 1024, rows = static_cast<uint32_t>(n / cols);
    run("tilize f32 (rows -> tiles)", 8192, [&](size_t t0, size_t t1) {
      // Whole tile rows only: split by tile row.
      size_t tr0 = t0 / 1024, tr1 = t1 / 1024;
      if (tr1 > tr0)
        tilize(reinterpret_cast<const std::byte*>(src.data()) + tr0 * 32 * cols * 4, cols * 4,
               static_cast<uint32_t>((tr1 - tr0) * 32), cols, reinterpret_cast<std::byte*>(dst.data()) + tr0 * 32 * cols * 4,
               4);
    });
    (void)rows;
    run("untilize f32 (tiles -> rows)", 8192, [&](size_t t0, size_t t1) {
      size_t tr0 = t0 / 1024, tr1 = t1 / 1024;
      if (tr1 > tr0)
        untilize(reinterpret_cast<const std::byte*>(src.data()) + tr0 * 32 * cols * 4, static_cast<uint32_t>((tr1 - tr0) * 32),
                 cols, reinterpret_cast<std::byte*>(dst.data()) + tr0 * 32 * cols * 4, cols * 4, 4);
    });
    run("pack bfloat8_b (f32 tiles -> bfp8)", 4096 + 1088, [&](size_t a, size_t b) {
      pack_bfp_tiles(src.data() + a * 1024, bfp8.data() + a * 1088, b - a, DataType::BFLOAT8_B);
    });
    run("unpack bfloat8_b (bfp8 -> f32 tiles)", 4096 + 1088, [&](size_t a, size_t b) {
      unpack_bfp_tiles(bfp8.data() + a * 1088, dst.data() + a * 1024, b - a, DataType::BFLOAT8_B);
    });
    run("pack bfloat4_b", 4096 + 576, [&](size_t a, size_t b) {
      pack_bfp_tiles(src.data() + a * 1024, bfp4.data() + a * 576, b - a, DataType::BFLOAT4_B);
    });
    run("unpack bfloat4_b", 4096 + 576, [&](size_t a, size_t b) {
      unpack_bfp_tiles(bfp4.data() + a * 576, dst.data() + a * 1024, b - a, DataType::BFLOAT4_B);
    });
    run("f32 -> bf16", 4096 + 2048, [&](size_t a, size_t b) {
      float_to_bfloat16(src.data() + a * 1024, bf16.data() + a * 1024, (b - a) * 1024);
    });
    std::printf("\n");
  }
}

// max_pool2d over the UNet's four pools and ResNet-50's stem pool: bytes read
// and written per call against the 2-thread copy bandwidth measured here.
void pools(int reps) {
  ThreadPool pool(static_cast<int>(std::thread::hardware_concurrency()));
  const Bandwidth bw = measure_bandwidth(pool, size_t{256} << 20, reps);
  std::printf("\n## max_pool2d vs memory bandwidth (cpu device, DRAM, back to back)\n\n");
  std::printf("Copy bandwidth (read+write) in this run: %.1f GB/s on %u threads.\n\n", bw.copy,
              std::thread::hardware_concurrency());
  std::printf("| layer | dtype | MB moved | ms (median) | GB/s | %% of copy bandwidth |\n|---|---|---|---|---|---|\n");
  auto dev = value_or_die(open_device({}));
  struct P {
    const char* name;
    uint32_t h, w, c, k, s, pad;
  };
  for (P l : {P{"unet pool1 2x2", 480, 640, 32, 2, 2, 0}, P{"unet pool2 2x2", 240, 320, 64, 2, 2, 0},
              P{"unet pool3 2x2", 120, 160, 128, 2, 2, 0}, P{"unet pool4 2x2", 60, 80, 256, 2, 2, 0},
              P{"resnet50 stem 3x3 s2 p1", 112, 112, 64, 3, 2, 1}}) {
    for (DataType dt : {DataType::FLOAT32, DataType::BFLOAT16}) {
      Pool2dParams p;
      p.input_height = l.h;
      p.input_width = l.w;
      p.channels = l.c;
      p.kernel_size = {l.k, l.k};
      p.stride = {l.s, l.s};
      p.padding = {l.pad, l.pad};
      Tensor x = allocate_tensor_on_host({Shape{1, l.h, l.w, l.c}, dt, Layout::ROW_MAJOR});
      Tensor d = value_or_die(to_device(x, *dev));
      (void)value_or_die(max_pool2d(d, p));
      CHECK_OK(synchronize_device(*dev));
      auto t = time_it(reps, [&] {
        for (int i = 0; i < 10; ++i) (void)value_or_die(max_pool2d(d, p));
        CHECK_OK(synchronize_device(*dev));
      });
      const double bytes = double(element_size(dt)) * l.c * (double(l.h) * l.w + double(p.output_height()) * p.output_width());
      const double s = t.median_s / 10;
      std::printf("| %s %ux%ux%u | %s | %.1f | %.3f | %.1f | %.0f%% |\n", l.name, l.h, l.w, l.c,
                  std::string(data_type_name(dt)).c_str(), bytes / 1e6, s * 1e3, bytes / s / 1e9,
                  100 * bytes / s / 1e9 / bw.copy);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  const bool quick = argc > 1 && std::string(argv[1]) == "--quick";
  const int reps = quick ? 5 : 21;
  std::printf("# Tessera runtime benchmarks (%s)\n", cpu_features().to_string().c_str());
  dispatch_overhead(reps);
  pool_launch(reps);
  transfers(reps);
  numerics(reps);
  pools(reps);
  return 0;
}
