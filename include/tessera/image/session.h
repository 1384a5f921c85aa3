// The embedded runtime's front door: a compiled image (.tsi) loaded onto the
// device it was compiled for, run with host arrays. What a C++ program that
// ships a model links (libtessera_embedded, `find_package(Tessera)` or
// `pkg-config tessera`): no importer, no protobuf, no Python.
//
//   TS_ASSIGN_OR_RETURN(auto s, tessera::Session::open("resnet50.tsi"));
//   TS_ASSIGN_OR_RETURN(tessera::Tensor x, tessera::cnn::load_npy("image.npy"));
//   TS_ASSIGN_OR_RETURN(std::vector<tessera::Tensor> ys, s->run({x}));
//
// examples/embedded/ is a whole program.
#pragma once

#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "tessera/image/image.h"
#include "tessera/tensor/tensor.h"

namespace tessera {

struct SessionOptions {
  std::string model;      // a merged image's model by name (empty: its only one)
  std::string device;     // empty: the image's target ("cpu", "wormhole_b0")
  int worker_threads = 0; // 0: one per physical core
  bool pin_threads = true;
};

class Session {
 public:
  ~Session();
  // Opens and verifies the image, opens its device and loads the model.
  // The image's errors (image.h), the device's, and INVALID_ARGUMENT for an
  // image with several models and no SessionOptions::model.
  static StatusOr<std::unique_ptr<Session>> open(const std::string& image_path, const SessionOptions& options = {});

  const image::ModelInfo& model() const { return info_; }  // name, inputs, outputs, report
  const std::vector<std::string>& notes() const { return notes_; }  // the load's (image::LoadedModel::notes)
  Device& device() const { return *device_; }
  runtime::CompiledModel& compiled() const { return *model_; }
  // The model's host tail, null where it has none: with compiled(), what the
  // run_inference queues take (InferenceQueue::Options::tail).
  const graph::HostTail* tail() const { return tail_ ? &*tail_ : nullptr; }

  // One host array per input, in order, of the input's volume (float32 or
  // another dtype, converted); returns one host float32 array per output in
  // the output's shape. INVALID_ARGUMENT naming the input for a wrong count
  // or volume.
  // FAILED_PRECONDITION for a model with a host tail (a detector's
  // post-processing: its outputs' shapes depend on the data and some are
  // int64): run_outputs returns those.
  StatusOr<std::vector<Tensor>> run(std::span<const Tensor> inputs);
  // The same inputs; every output of the model as the model defines it,
  // float32 or int64, in the shape its data gives (empty ones too), through
  // the host tail where the model has one.
  StatusOr<std::vector<graph::HostTensor>> run_outputs(std::span<const Tensor> inputs);
  // The model's output names, in order (the host tail's where it has one).
  std::vector<std::string> output_names() const;

 private:
  Session() = default;
  StatusOr<std::vector<Tensor>> run_device(std::span<const Tensor> inputs);  // the compiled model's outputs, on the host
  std::shared_ptr<Device> device_;
  std::unique_ptr<runtime::CompiledModel> model_;
  std::optional<graph::HostTail> tail_;
  image::ModelInfo info_;
  std::vector<std::string> notes_;
};

}  // namespace tessera
