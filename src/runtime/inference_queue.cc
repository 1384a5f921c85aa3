#include "tessera/runtime/inference_queue.h"

#include <fmt/format.h>

#include "tessera/cnn/pipeline.h"
#include "tessera/device/device.h"
#include "tessera/runtime/model_outputs.h"

namespace tessera::runtime {

struct InferenceQueue::PipelineState {
  std::unique_ptr<cnn::Pipeline> pipe;
  bool compiled = false;
};

InferenceQueue::InferenceQueue(CompiledModel& model, Device& device, Options options)
    : model_(model), device_(device), options_(options) {}

StatusOr<std::unique_ptr<InferenceQueue>> InferenceQueue::start(CompiledModel& model, Device& device, Options options) {
  if (options.capacity == 0) return invalid_argument_error("InferenceQueue: capacity 0; expected at least 1");
  auto q = std::unique_ptr<InferenceQueue>(new InferenceQueue(model, device, options));
  q->thread_ = std::thread([p = q.get()] { p->loop(); });
  return q;
}

InferenceQueue::~InferenceQueue() { (void)stop(); }

Status InferenceQueue::push(std::vector<Tensor> inputs) {
  const auto& shapes = model_.input_shapes();
  if (inputs.size() != shapes.size())
    return invalid_argument_error("the model takes {} input(s) per sample, got {}", shapes.size(), inputs.size());
  for (size_t k = 0; k < inputs.size(); ++k) {
    const std::vector<uint32_t> dims(shapes[k].begin(), shapes[k].end());
    const Shape want{std::span<const uint32_t>(dims)};
    if (inputs[k].is_on_device() || inputs[k].shape().volume() != want.volume())
      return invalid_argument_error("input '{}': expected a host tensor of {} values ({}), got {} {}",
                                    model_.input_names()[k], want.volume(), want.to_string(),
                                    inputs[k].shape().to_string(), inputs[k].is_on_device() ? "on the device" : "");
    TS_ASSIGN_OR_RETURN(inputs[k], inputs[k].view(want));
  }
  std::unique_lock lock(mu_);
  can_push_.wait(lock, [&] { return stopping_ || inputs_.size() < options_.capacity; });
  if (stopping_) return failed_precondition_error("the inference queue is stopped; no more inputs");
  if (options_.input_count && pushed_ >= options_.input_count)
    return failed_precondition_error("the inference queue ran its input_count of {} sample(s)", options_.input_count);
  inputs_.emplace_back(pushed_++, std::move(inputs));
  can_run_.notify_one();
  return ok_status();
}

Status InferenceQueue::push(const std::map<std::string, Tensor>& named) {
  const std::vector<std::string> names = model_.input_names();
  std::vector<Tensor> inputs;
  for (const std::string& n : names) {
    const auto it = named.find(n);
    if (it == named.end()) return invalid_argument_error("the sample has no input '{}'", n);
    inputs.push_back(it->second);
  }
  for (const auto& [n, t] : named)
    if (std::find(names.begin(), names.end(), n) == names.end())
      return invalid_argument_error("the model has no input '{}' (its inputs: '{}')", n, fmt::join(names, "', '"));
  return push(std::move(inputs));
}

StatusOr<InferenceQueue::Output> InferenceQueue::pop() {
  std::unique_lock lock(mu_);
  can_pop_.wait(lock, [&] { return !outputs_.empty() || finished_; });
  if (outputs_.empty()) return out_of_range_error("the inference loop has finished and every output was popped");
  Output o = std::move(outputs_.front());
  outputs_.pop_front();
  can_run_.notify_one();  // the loop may wait for room for its next output
  return o;
}

Status InferenceQueue::stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  can_push_.notify_all();
  can_run_.notify_all();
  if (thread_.joinable()) thread_.join();
  return ok_status();
}

uint64_t InferenceQueue::pushed() const {
  std::lock_guard lock(mu_);
  return pushed_;
}

uint64_t InferenceQueue::completed() const {
  std::lock_guard lock(mu_);
  return completed_;
}

InferenceQueue::Output InferenceQueue::run_one(uint64_t index, std::vector<Tensor>& inputs) {
  Output out{.index = index};
  auto fail = [&](const Status& s) {
    out.status = s.annotate(fmt::format("sample {}", index));
    out.outputs.clear();
    out.values.clear();
    pipeline_.reset();  // a failed run may leave the pipeline mid-frame: a fresh one for the next sample
    return std::move(out);
  };
  if (options_.use_pipeline) {
    if (!pipeline_) {
      pipeline_ = std::make_unique<PipelineState>();
      auto pipe =
          cnn::create_pipeline_from_config({.use_trace = true, .num_command_queues = 2}, model_.pipeline_model(),
                                           device_, DRAM_MEMORY_CONFIG, DRAM_MEMORY_CONFIG);
      if (!pipe.ok()) return fail(pipe.status());
      pipeline_->pipe = std::move(pipe).value();
    }
    cnn::Pipeline& p = *pipeline_->pipe;
    if (!pipeline_->compiled) {
      if (Status s = p.compile(inputs); !s.ok()) return fail(s);
      pipeline_->compiled = true;
    }
    const cnn::Frame frame[] = {std::move(inputs)};  // (not read again)
    if (Status s = p.enqueue(std::span<const cnn::Frame>(frame)); !s.ok()) return fail(s);
    auto outs = p.pop_all();
    if (!outs.ok()) return fail(outs.status());
    const cnn::ModelOutput& o = (*outs)[0];
    if (o.is_tensor()) out.outputs.push_back(*o.tensor);
    for (const auto& e : o.list) out.outputs.push_back(*e.tensor);
  } else {
    std::vector<Tensor> on_device;
    for (const Tensor& x : inputs) {
      auto d = to_device(x, device_);
      if (!d.ok()) return fail(d.status());
      on_device.push_back(std::move(d).value());
    }
    auto ys = model_.run(on_device);
    if (!ys.ok()) return fail(ys.status());
    for (const Tensor& y : *ys) {
      auto h = y.cpu();
      if (!h.ok()) return fail(h.status());
      out.outputs.push_back(std::move(h).value());
    }
  }
  if (options_.tail) {
    auto values = model_outputs(out.outputs, options_.tail);
    if (!values.ok()) {  // (the device part ran: its pipeline stays)
      out.status = values.status().annotate(fmt::format("sample {}: the host tail", index));
      out.outputs.clear();
      return out;
    }
    out.values = std::move(values).value();
  }
  return out;
}

void InferenceQueue::loop() {
  for (;;) {
    std::pair<uint64_t, std::vector<Tensor>> sample;
    {
      std::unique_lock lock(mu_);
      // Waits for a sample and for room for its output (a consumer that
      // stops popping stops the loop, and then push, instead of growing
      // memory); once stopping, it drains what was pushed regardless.
      can_run_.wait(lock, [&] {
        return (!inputs_.empty() && (outputs_.size() < options_.capacity || stopping_)) ||
               (stopping_ && inputs_.empty()) || (options_.input_count && completed_ >= options_.input_count);
      });
      if (inputs_.empty() || (options_.input_count && completed_ >= options_.input_count)) break;
      sample = std::move(inputs_.front());
      inputs_.pop_front();
    }
    can_push_.notify_one();
    Output o = run_one(sample.first, sample.second);
    {
      std::lock_guard lock(mu_);
      outputs_.push_back(std::move(o));
      ++completed_;
    }
    can_pop_.notify_all();
  }
  if (pipeline_ && pipeline_->pipe) (void)pipeline_->pipe->cleanup();
  pipeline_.reset();
  {
    std::lock_guard lock(mu_);
    finished_ = true;
    stopping_ = true;
  }
  can_pop_.notify_all();
  can_push_.notify_all();
}

}  // namespace tessera::runtime
