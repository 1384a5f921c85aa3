// The TT-CNN Pipeline: compile a model once, then stream host inputs through
// one of the five executors (executor.h) and collect host outputs.
//
//   PipelineConfig config{.use_trace = true, .num_command_queues = 2};
//   TS_ASSIGN_OR_RETURN(auto pipe, create_pipeline_from_config(config, model, *device,
//                                      l1_input_config, dram_input_config));
//   TS_RETURN_IF_ERROR(pipe->compile(host_inputs[0]));
//   TS_RETURN_IF_ERROR(pipe->preallocate_output_tensors_on_host(host_inputs.size()));  // optional
//   TS_RETURN_IF_ERROR(pipe->enqueue(host_inputs));
//   TS_ASSIGN_OR_RETURN(auto outputs, pipe->pop_all());
//   TS_RETURN_IF_ERROR(pipe->cleanup());
//
// A model of several inputs (a MultiInputModel, e.g. CompiledModel's
// pipeline_model) takes frames instead: compile(frame), enqueue(frames),
// each frame the model's host inputs in order.
//
// Executor selection and its errors follow the original (reference section
// 1.2): 1 queue -> traced or plain; 2 queues -> overlapped input (traced or
// not) or, with all_transfers_on_separate_command_queue, pipelined I/O
// (needs trace and dram_output_memory_config). The original's ValueErrors
// are INVALID_ARGUMENT, its RuntimeErrors FAILED_PRECONDITION, with its
// messages.
#pragma once

#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "tessera/cnn/executor.h"

namespace tessera::cnn {

struct PipelineConfig {
  bool use_trace = true;
  int num_command_queues = 1;
  bool all_transfers_on_separate_command_queue = false;
  std::string to_string() const;  // the three fields, one per line
};

class Pipeline {
 public:
  explicit Pipeline(std::unique_ptr<Executor> executor);

  Status compile(const Tensor& host_input);  // a frame of one input
  Status compile(const Frame& host_frame);
  // Host tensors only ("All input tensors must be on host"). Enqueues the
  // writes, replays and reads of every input (one frame each) or frame;
  // results are valid after pop_all.
  Status enqueue(std::span<const Tensor> host_inputs);
  Status enqueue(std::span<const Frame> host_frames);
  // Host output slots reused by every later enqueue (needs compile()).
  Status preallocate_output_tensors_on_host(size_t n);
  // Synchronises the device and returns the outputs of the last enqueue, in
  // input order. With preallocated slots these are the same host tensors
  // (same storage) every time.
  StatusOr<std::vector<ModelOutput>> pop_all();
  // Intermediates (the original's intermediates queue): for a model whose
  // output is the list [outputs, taps] (runtime::CompiledModel's
  // pipeline_model with intermediates_to_save), split_intermediates(true)
  // makes pop_all return the outputs alone and pop_intermediates each
  // input's taps, in input order. Set it before compile.
  void split_intermediates(bool on) { split_intermediates_ = on; }
  StatusOr<std::vector<std::vector<Tensor>>> pop_intermediates();
  Status cleanup();

  const std::optional<OutputSchema>& output_schema() const { return output_schema_; }
  Executor& executor() { return *executor_; }

 private:
  std::unique_ptr<Executor> executor_;
  std::vector<ModelOutput> output_tensors_;
  bool preallocated_ = false;
  bool split_intermediates_ = false;
  std::optional<OutputSchema> output_schema_;
};

StatusOr<std::unique_ptr<Pipeline>> create_pipeline_from_config(
    const PipelineConfig& config, MultiInputModel model, Device& device, const MemoryConfig& l1_input_memory_config,
    const std::optional<MemoryConfig>& dram_input_memory_config = std::nullopt,
    const std::optional<MemoryConfig>& dram_output_memory_config = std::nullopt);
// A model of one input.
StatusOr<std::unique_ptr<Pipeline>> create_pipeline_from_config(
    const PipelineConfig& config, Model model, Device& device, const MemoryConfig& l1_input_memory_config,
    const std::optional<MemoryConfig>& dram_input_memory_config = std::nullopt,
    const std::optional<MemoryConfig>& dram_output_memory_config = std::nullopt);

// A DRAM memory config for a persistent input/output of `shape` sharded over
// the largest number of banks (<= dram_grid_size.x) that divides the shard
// dim evenly: shape[-1] for WIDTH_SHARDED, shape[-2] for HEIGHT_SHARDED.
StatusOr<MemoryConfig> get_memory_config_for_persistent_dram_tensor(const Shape& shape,
                                                                    TensorMemoryLayout shard_strategy,
                                                                    CoreCoord dram_grid_size);

}  // namespace tessera::cnn
