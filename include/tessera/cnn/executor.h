// TT-CNN executors: how a model runs on a device's command queues, with the
// queue and event choreography of the original's five executors
// (../shared/reference/tt-cnn-and-ttnn.md section 1).
//
//   ModelExecutor                            no trace, 1 queue: to_device into
//                                            L1, model, read on cq 0.
//   TracedModelExecutor                      trace, 1 queue: persistent DRAM
//                                            input, DRAM -> L1 reshard outside
//                                            the trace, replay on cq 0.
//   MultiCQModelOverlappedInputExecutor      no trace: writes on cq 1, model
//                                            and reads on cq 0.
//   MultiCQTracedModelOverlappedInputExecutor trace (recommended): writes on
//                                            cq 1, reshard + replay + reads
//                                            on cq 0.
//   MultiCQTracedModelPipelinedIOExecutor    trace: replay alone on cq 0,
//                                            writes and reads on cq 1 through
//                                            a persistent DRAM output.
//
// Traced executors run the model twice in compile(): a compile run (programs
// compiled, weights prepared) and the captured run. The captured L1 input is
// freed and allocated again at the address the trace captured (checked), and
// each input is resharded in place into it. Every iteration yields the same
// output tensor, read before the next replay overwrites it: on the same
// queue (cq 0), or, for pipelined I/O, through events. Unlike the original,
// the pipelined executor records its read-done event after the output read
// is enqueued (see the reference's hazard note), and takes models with
// several outputs (a persistent DRAM output each; the dram output config
// must then be interleaved), where the original takes one.
//
// Several inputs: where the original feeds one tensor per frame, a Tessera
// frame is the model's inputs in order (a MultiInputModel), each with its
// own persistent DRAM and L1 input, written, resharded and captured in turn;
// the memory configs apply to every input (interleaved configs for inputs
// of different shapes).
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "tessera/tensor/tensor.h"

namespace tessera::cnn {

// A model output: a tensor, or a list of outputs (nested).
struct ModelOutput {
  std::optional<Tensor> tensor;
  std::vector<ModelOutput> list;

  static ModelOutput of(Tensor t) { return {std::move(t), {}}; }
  static ModelOutput of(std::vector<ModelOutput> l) { return {std::nullopt, std::move(l)}; }
  bool is_tensor() const { return tensor.has_value(); }
};

// A model: the device L1 input tensor in, a tensor or nested list out.
using Model = std::function<StatusOr<ModelOutput>(const Tensor& l1_input)>;
// A model of several inputs: the device L1 inputs in, in the model's order.
using MultiInputModel = std::function<StatusOr<ModelOutput>(std::span<const Tensor> l1_inputs)>;
// A frame: one run's host inputs, in the model's input order.
using Frame = std::vector<Tensor>;

// `model` as a MultiInputModel of one input (INVALID_ARGUMENT for a frame of another size).
MultiInputModel as_multi_input(Model model);

// (shape, dtype, layout) per leaf, with the output's nesting.
struct OutputSchema {
  Shape shape;
  DataType dtype = DataType::BFLOAT16;
  Layout layout = Layout::ROW_MAJOR;
  bool is_leaf = true;
  std::vector<OutputSchema> list;
};

// Receives output i of execute() as soon as it may be read; the Pipeline
// enqueues its read there, so writes, replays and reads interleave.
using OutputSink = std::function<Status(size_t index, const ModelOutput& output)>;

class Executor {
 public:
  virtual ~Executor() = default;
  // The compile run(s) on one frame; every later frame must match its
  // tensors' count and specs.
  virtual Status compile(std::span<const Tensor> host_frame) = 0;
  virtual Status execute(std::span<const Frame> host_frames, const OutputSink& sink) = 0;
  virtual Status cleanup() = 0;
  // The queue outputs are read on.
  virtual uint8_t read_cq() const = 0;
  // FAILED_PRECONDITION "Executor must be compiled before getting the output schema."
  virtual StatusOr<OutputSchema> output_schema() const = 0;
  virtual Device& device() const = 0;
};

std::unique_ptr<Executor> make_model_executor(MultiInputModel model, Device& device,
                                              MemoryConfig l1_input_memory_config);
std::unique_ptr<Executor> make_traced_model_executor(MultiInputModel model, Device& device,
                                                     MemoryConfig dram_input_memory_config,
                                                     MemoryConfig l1_input_memory_config);
std::unique_ptr<Executor> make_multi_cq_model_overlapped_input_executor(MultiInputModel model, Device& device,
                                                                        MemoryConfig dram_input_memory_config,
                                                                        MemoryConfig l1_input_memory_config);
std::unique_ptr<Executor> make_multi_cq_traced_model_overlapped_input_executor(MultiInputModel model, Device& device,
                                                                               MemoryConfig dram_input_memory_config,
                                                                               MemoryConfig l1_input_memory_config);
std::unique_ptr<Executor> make_multi_cq_traced_model_pipelined_io_executor(MultiInputModel model, Device& device,
                                                                           MemoryConfig dram_input_memory_config,
                                                                           MemoryConfig l1_input_memory_config,
                                                                           MemoryConfig dram_output_memory_config);

}  // namespace tessera::cnn
