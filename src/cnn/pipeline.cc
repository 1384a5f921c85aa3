#include "tessera/cnn/pipeline.h"

#include <fmt/format.h>

namespace tessera::cnn {

namespace {

// Enqueues the read of every tensor of `device_out` into new host tensors.
StatusOr<ModelOutput> read_new(const ModelOutput& device_out, uint8_t cq) {
  if (device_out.is_tensor()) {
    TS_ASSIGN_OR_RETURN(Tensor host, device_out.tensor->cpu(false, cq));
    return ModelOutput::of(host);
  }
  ModelOutput out;
  for (const ModelOutput& o : device_out.list) {
    TS_ASSIGN_OR_RETURN(ModelOutput h, read_new(o, cq));
    out.list.push_back(std::move(h));
  }
  return out;
}

// Enqueues the read of `device_out` into the matching preallocated slot.
Status read_into(const ModelOutput& device_out, const ModelOutput& slot, uint8_t cq) {
  if (device_out.is_tensor() != slot.is_tensor() || device_out.list.size() != slot.list.size())
    return internal_error("a model output does not match its preallocated slot's structure");
  if (device_out.is_tensor()) return copy_device_to_host_tensor(*device_out.tensor, *slot.tensor, false, cq);
  for (size_t i = 0; i < slot.list.size(); ++i) TS_RETURN_IF_ERROR(read_into(device_out.list[i], slot.list[i], cq));
  return ok_status();
}

ModelOutput allocate_structured(const OutputSchema& s) {
  if (s.is_leaf) return ModelOutput::of(allocate_tensor_on_host({s.shape, s.dtype, s.layout}));
  ModelOutput out;
  for (const OutputSchema& c : s.list) out.list.push_back(allocate_structured(c));
  return out;
}

}  // namespace

std::string PipelineConfig::to_string() const {
  return fmt::format("use_trace={}\nnum_command_queues={}\nall_transfers_on_separate_command_queue={}", use_trace,
                     num_command_queues, all_transfers_on_separate_command_queue);
}

Pipeline::Pipeline(std::unique_ptr<Executor> executor) : executor_(std::move(executor)) {}

Status Pipeline::compile(const Tensor& host_input) { return compile(Frame{host_input}); }

Status Pipeline::compile(const Frame& host_frame) {
  TS_RETURN_IF_ERROR(executor_->compile(host_frame));
  TS_ASSIGN_OR_RETURN(output_schema_, executor_->output_schema());
  return ok_status();
}

Status Pipeline::enqueue(std::span<const Tensor> host_inputs) {
  std::vector<Frame> frames;
  frames.reserve(host_inputs.size());
  for (const Tensor& t : host_inputs) frames.push_back({t});
  return enqueue(std::span<const Frame>(frames));
}

Status Pipeline::enqueue(std::span<const Frame> host_frames) {
  for (const Frame& f : host_frames)
    for (const Tensor& t : f)
      if (t.storage_type() != StorageType::HOST) return invalid_argument_error("All input tensors must be on host");
  if (preallocated_ && host_frames.size() > output_tensors_.size())
    return invalid_argument_error("Number of inputs ({}) exceeds the number of pre-allocated output slots ({}).",
                                  host_frames.size(), output_tensors_.size());
  if (!preallocated_) output_tensors_.clear();
  const uint8_t cq = executor_->read_cq();
  return executor_->execute(host_frames, [&](size_t i, const ModelOutput& device_out) -> Status {
    if (preallocated_) return read_into(device_out, output_tensors_[i], cq);
    TS_ASSIGN_OR_RETURN(ModelOutput host, read_new(device_out, cq));
    output_tensors_.push_back(std::move(host));
    return ok_status();
  });
}

Status Pipeline::preallocate_output_tensors_on_host(size_t n) {
  if (!output_schema_)
    return failed_precondition_error("Pipeline must be compiled before pre-allocating output tensors.");
  preallocated_ = true;
  output_tensors_.clear();
  for (size_t i = 0; i < n; ++i) output_tensors_.push_back(allocate_structured(*output_schema_));
  return ok_status();
}

namespace {

// An output a split_intermediates Pipeline can split: [outputs, taps], the taps a list.
Status check_split(const ModelOutput& o) {
  if (o.is_tensor() || o.list.size() != 2 || o.list[1].is_tensor())
    return invalid_argument_error(
        "split_intermediates: the model's output must be the list [outputs, intermediates], found {}",
        o.is_tensor()        ? "a tensor"
        : o.list.size() != 2 ? fmt::format("a list of {}", o.list.size())
                             : "a list whose second entry is a tensor (a model of two outputs and no taps?)");
  return ok_status();
}

}  // namespace

StatusOr<std::vector<ModelOutput>> Pipeline::pop_all() {
  TS_RETURN_IF_ERROR(synchronize_device(executor_->device()));
  if (!split_intermediates_) return output_tensors_;
  std::vector<ModelOutput> outs;
  for (const ModelOutput& o : output_tensors_) {
    TS_RETURN_IF_ERROR(check_split(o));
    outs.push_back(o.list[0]);
  }
  return outs;
}

StatusOr<std::vector<std::vector<Tensor>>> Pipeline::pop_intermediates() {
  if (!split_intermediates_)
    return failed_precondition_error("pop_intermediates: the Pipeline keeps no intermediates (split_intermediates)");
  TS_RETURN_IF_ERROR(synchronize_device(executor_->device()));
  std::vector<std::vector<Tensor>> out;
  for (const ModelOutput& o : output_tensors_) {
    TS_RETURN_IF_ERROR(check_split(o));
    std::vector<Tensor> taps;
    for (const ModelOutput& t : o.list[1].list) taps.push_back(*t.tensor);
    out.push_back(std::move(taps));
  }
  return out;
}

Status Pipeline::cleanup() { return executor_->cleanup(); }

StatusOr<std::unique_ptr<Pipeline>> create_pipeline_from_config(const PipelineConfig& config, Model model,
                                                                Device& device, const MemoryConfig& l1_config,
                                                                const std::optional<MemoryConfig>& dram_input,
                                                                const std::optional<MemoryConfig>& dram_output) {
  return create_pipeline_from_config(config, as_multi_input(std::move(model)), device, l1_config, dram_input,
                                     dram_output);
}

StatusOr<std::unique_ptr<Pipeline>> create_pipeline_from_config(const PipelineConfig& config, MultiInputModel model,
                                                                Device& device, const MemoryConfig& l1_config,
                                                                const std::optional<MemoryConfig>& dram_input,
                                                                const std::optional<MemoryConfig>& dram_output) {
  std::unique_ptr<Executor> ex;
  if (config.num_command_queues == 1) {
    if (config.use_trace) {
      // The original's wording, a copy slip included: it is raised for the one-queue traced case.
      if (!dram_input)
        return invalid_argument_error(
            "dram_input_memory_config must be provided when using trace "
            "all_transfers_on_separate_command_queue=True.");
      ex = make_traced_model_executor(std::move(model), device, *dram_input, l1_config);
    } else {
      ex = make_model_executor(std::move(model), device, l1_config);
    }
  } else if (config.num_command_queues == 2) {
    if (device.num_command_queues() < 2)
      return invalid_argument_error("a 2-queue pipeline needs a device opened with num_command_queues=2, found {}",
                                    device.num_command_queues());
    if (!config.use_trace) {
      if (config.all_transfers_on_separate_command_queue)
        return invalid_argument_error("Pipelined I/O (all_transfers_on_separate_command_queue) requires tracing");
      if (!dram_input)
        return invalid_argument_error("dram_input_memory_config must be provided when using multi-CQ executor");
      ex = make_multi_cq_model_overlapped_input_executor(std::move(model), device, *dram_input, l1_config);
    } else if (config.all_transfers_on_separate_command_queue) {
      if (!dram_output)
        return invalid_argument_error(
            "dram_output_memory_config must be provided when "
            "all_transfers_on_separate_command_queue=True.");
      // As the original, dram_input is not checked here; without it allocation fails at compile.
      if (!dram_input)
        return invalid_argument_error("dram_input_memory_config must be provided when using multi-CQ executor");
      ex = make_multi_cq_traced_model_pipelined_io_executor(std::move(model), device, *dram_input, l1_config,
                                                            *dram_output);
    } else {
      if (!dram_input)
        return invalid_argument_error("dram_input_memory_config must be provided when using multi-CQ executor");
      ex = make_multi_cq_traced_model_overlapped_input_executor(std::move(model), device, *dram_input, l1_config);
    }
  } else {
    return invalid_argument_error("Unsupported pipeline configuration: {}", config.to_string());
  }
  return std::make_unique<Pipeline>(std::move(ex));
}

StatusOr<MemoryConfig> get_memory_config_for_persistent_dram_tensor(const Shape& shape, TensorMemoryLayout strategy,
                                                                    CoreCoord dram_grid_size) {
  if (shape.rank() < 2) return invalid_argument_error("Shape must be 2D or higher (was {})", shape.to_string());
  if (dram_grid_size.y != 1)
    return invalid_argument_error("Only 1D DRAM grid is supported (was {})", dram_grid_size.to_string());
  // Even shards only: uneven width shards do not transfer from the host (the original's #22396).
  auto even_banks = [&](uint32_t dim) {
    uint32_t n = std::max<uint32_t>(1, dram_grid_size.x);
    while (n > 1 && dim % n != 0) --n;
    return n;
  };
  if (strategy == TensorMemoryLayout::WIDTH_SHARDED) {
    const uint32_t n = even_banks(shape[-1]);
    return MemoryConfig{
        TensorMemoryLayout::WIDTH_SHARDED, BufferType::DRAM,
        ShardSpec{CoreRange({0, 0}, {n - 1, 0}), {shape[-2], shape[-1] / n}, ShardOrientation::ROW_MAJOR}};
  }
  if (strategy == TensorMemoryLayout::HEIGHT_SHARDED) {
    const uint32_t n = even_banks(shape[-2]);
    return MemoryConfig{
        TensorMemoryLayout::HEIGHT_SHARDED, BufferType::DRAM,
        ShardSpec{CoreRange({0, 0}, {n - 1, 0}), {shape[-2] / n, shape[-1]}, ShardOrientation::ROW_MAJOR}};
  }
  return invalid_argument_error("Unsupported shard strategy: {}", memory_layout_name(strategy));
}

}  // namespace tessera::cnn
