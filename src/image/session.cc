#include "tessera/image/session.h"

#include <fmt/format.h>

#include "tessera/device/device.h"
#include "tessera/runtime/model_outputs.h"

namespace tessera {

Session::~Session() {
  model_.reset();
  if (device_) (void)close_device(*device_);
}

StatusOr<std::unique_ptr<Session>> Session::open(const std::string& image_path, const SessionOptions& options) {
  TS_ASSIGN_OR_RETURN(auto img, image::Image::open(image_path));
  size_t index = 0;
  if (!options.model.empty()) {
    TS_ASSIGN_OR_RETURN(index, img->find_model(options.model));
  } else if (img->num_models() != 1) {
    std::string names;
    for (const auto& m : img->info().models) names += (names.empty() ? "'" : ", '") + m.name + "'";
    return invalid_argument_error("{} holds {} models ({}): name one in SessionOptions::model", image_path,
                                  img->num_models(), names);
  }
  auto s = std::unique_ptr<Session>(new Session());
  TS_ASSIGN_OR_RETURN(s->device_,
                      open_device({.descriptor = options.device.empty() ? img->info().header.target.name : options.device,
                                   .l1_small_size = 16384,
                                   .trace_region_size = 8 << 20,
                                   .num_command_queues = 2,
                                   .worker_threads = options.worker_threads,
                                   .pin_threads = options.pin_threads}));
  TS_ASSIGN_OR_RETURN(image::LoadedModel m, image::load_model(*img, index, *s->device_));
  s->model_ = std::move(m.model);
  s->tail_ = std::move(m.tail);
  s->notes_ = std::move(m.notes);
  s->info_ = img->info().models[index];
  return s;
}

std::vector<std::string> Session::output_names() const {
  return tail_ ? tail_->output_names() : model_->output_names();
}

StatusOr<std::vector<graph::HostTensor>> Session::run_outputs(std::span<const Tensor> inputs) {
  TS_ASSIGN_OR_RETURN(std::vector<Tensor> outs, run_device(inputs));
  return runtime::model_outputs(outs, tail_ ? &*tail_ : nullptr);
}

StatusOr<std::vector<Tensor>> Session::run(std::span<const Tensor> inputs) {
  if (tail_)
    return failed_precondition_error(
        "model '{}' ends in a host tail ({}): its outputs' shapes depend on the data; run it with run_outputs",
        info_.name, tail_->summary());
  return run_device(inputs);
}

StatusOr<std::vector<Tensor>> Session::run_device(std::span<const Tensor> inputs) {
  const auto& shapes = model_->input_shapes();
  if (inputs.size() != shapes.size())
    return invalid_argument_error("model '{}' takes {} input(s), got {}", info_.name, shapes.size(), inputs.size());
  std::vector<Tensor> on_device;
  for (size_t k = 0; k < inputs.size(); ++k) {
    const std::vector<uint32_t> dims(shapes[k].begin(), shapes[k].end());
    const Shape want{std::span<const uint32_t>(dims)};
    if (inputs[k].shape().volume() != want.volume())
      return invalid_argument_error("input '{}': {} values ({}), the model takes {} ({})", info_.inputs[k].name,
                                    inputs[k].shape().volume(), inputs[k].shape().to_string(), want.volume(),
                                    want.to_string());
    TS_ASSIGN_OR_RETURN(Tensor x, inputs[k].view(want));
    TS_ASSIGN_OR_RETURN(Tensor d, to_device(x, *device_));
    on_device.push_back(std::move(d));
  }
  TS_ASSIGN_OR_RETURN(std::vector<Tensor> outs, model_->run(on_device));
  std::vector<Tensor> host;
  for (const Tensor& y : outs) {
    TS_ASSIGN_OR_RETURN(Tensor h, y.cpu());
    host.push_back(std::move(h));
  }
  return host;
}

}  // namespace tessera
