// run_inference queues: every sample out once, in push order, as a direct
// run computes it; errors at push; clean stops.
#include "tessera/runtime/inference_queue.h"

#include <gtest/gtest.h>

#include <cstring>
#include <thread>

#include "onnx_model_builder.h"
#include "tessera/device/device.h"
#include "tessera/import/onnx.h"

namespace tessera::runtime {
namespace {

struct Fixture {
  std::shared_ptr<Device> device =
      open_device({.descriptor = "cpu", .trace_region_size = 1 << 20, .num_command_queues = 2}).value();
  std::unique_ptr<CompiledModel> model = CompiledModel::compile(
      importer::import_onnx_bytes(testing_onnx::small_cnn(1).bytes()).value(), *device, {}).value();
  Tensor sample(int i) const {
    std::vector<float> v(3 * 16 * 16);
    for (size_t k = 0; k < v.size(); ++k) v[k] = std::sin(0.1f * static_cast<float>(k) + static_cast<float>(i));
    return Tensor::from_vector(v, Shape{1, 3, 16, 16}, DataType::FLOAT32).value();
  }
  // Every output's values, one after another (small_cnn has two: logits and up).
  std::vector<float> direct(int i) const {
    const Tensor in[] = {to_device(sample(i), *device).value()};
    std::vector<float> all;
    const std::vector<Tensor> ys = model->run(in).value();
    for (const Tensor& y : ys) {
      const std::vector<float> v = y.cpu().value().to_vector().value();
      all.insert(all.end(), v.begin(), v.end());
    }
    return all;
  }
};

TEST(InferenceQueue, EverySampleOnceInOrderAsADirectRun) {
  Fixture f;
  for (bool pipeline : {true, false}) {
    const int n = 64;
    auto q = InferenceQueue::start(*f.model, *f.device, {.input_count = n, .capacity = 4, .use_pipeline = pipeline});
    ASSERT_TRUE(q.ok()) << q.status().to_string();
    std::thread producer([&] {
      for (int i = 0; i < n; ++i) ASSERT_TRUE((*q)->push({f.sample(i)}).ok());
      EXPECT_EQ((*q)->push({f.sample(0)}).code(), StatusCode::kFailedPrecondition);  // past input_count
    });
    std::vector<std::vector<float>> got;
    for (int i = 0; i < n; ++i) {
      auto o = (*q)->pop();
      ASSERT_TRUE(o.ok()) << o.status().to_string();
      ASSERT_TRUE(o->status.ok()) << o->status.to_string();
      EXPECT_EQ(o->index, static_cast<uint64_t>(i));
      ASSERT_EQ(o->outputs.size(), 2u);
      std::vector<float> all;
      for (const Tensor& y : o->outputs) {
        const std::vector<float> v = y.to_vector().value();
        all.insert(all.end(), v.begin(), v.end());
      }
      got.push_back(std::move(all));
    }
    producer.join();
    EXPECT_EQ((*q)->pop().status().code(), StatusCode::kOutOfRange);
    EXPECT_EQ((*q)->completed(), static_cast<uint64_t>(n));
    for (int i : {0, 1, n / 2, n - 1}) {
      const std::vector<float> want = f.direct(i);
      ASSERT_EQ(got[static_cast<size_t>(i)].size(), want.size());
      EXPECT_EQ(std::memcmp(got[static_cast<size_t>(i)].data(), want.data(), want.size() * 4), 0)
          << "sample " << i << (pipeline ? " (pipeline)" : " (run)");
    }
  }
}

TEST(InferenceQueue, RunsUntilStoppedAndDrainsWhatWasPushed) {
  Fixture f;
  auto q = InferenceQueue::start(*f.model, *f.device, {.input_count = 0, .capacity = 8}).value();
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(q->push({{"x", f.sample(i)}}).ok());  // by name
  // Stopping waits for the five pushed samples even though nothing popped them yet.
  ASSERT_TRUE(q->stop().ok());
  EXPECT_EQ(q->push({f.sample(0)}).code(), StatusCode::kFailedPrecondition);
  for (uint64_t i = 0; i < 5; ++i) {
    auto o = q->pop();
    ASSERT_TRUE(o.ok()) << o.status().to_string();
    EXPECT_EQ(o->index, i);
    EXPECT_TRUE(o->status.ok());
  }
  EXPECT_EQ(q->pop().status().code(), StatusCode::kOutOfRange);
}

TEST(InferenceQueue, BadSamplesAreRefusedAtPush) {
  Fixture f;
  auto q = InferenceQueue::start(*f.model, *f.device, {.input_count = 0}).value();
  const Status count = q->push(std::vector<Tensor>{});
  EXPECT_EQ(count.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(count.message().find("takes 1 input(s) per sample, got 0"), std::string::npos) << count.message();
  const Tensor small = Tensor::from_vector(std::vector<float>(10), Shape{10}, DataType::FLOAT32).value();
  const Status volume = q->push({small});
  EXPECT_NE(volume.message().find("input 'x': expected a host tensor of 768 values"), std::string::npos)
      << volume.message();
  const Status name = q->push({{"image", f.sample(0)}});
  EXPECT_NE(name.message().find("no input 'x'"), std::string::npos) << name.message();
  EXPECT_EQ(InferenceQueue::start(*f.model, *f.device, {.capacity = 0}).status().code(), StatusCode::kInvalidArgument);
}

TEST(InferenceQueue, DestroyedWithOutputsNotPoppedShutsDownCleanly) {
  Fixture f;
  auto q = InferenceQueue::start(*f.model, *f.device, {.input_count = 0, .capacity = 1}).value();
  ASSERT_TRUE(q->push({f.sample(0)}).ok());
  ASSERT_TRUE(q->push({f.sample(1)}).ok());
  q.reset();  // no pop: the destructor stops and joins
  SUCCEED();
}

}  // namespace
}  // namespace tessera::runtime
