// run_inference queues: samples pushed on one side, a background loop running
// them through a compiled model, outputs popped on the other side in the
// order they were pushed (PyBuda's run_inference / initialize_pipeline /
// run_forward with its output queue, in C++).
//
//   TS_ASSIGN_OR_RETURN(auto q, runtime::InferenceQueue::start(*model, *device, {.input_count = 0}));
//   TS_RETURN_IF_ERROR(q->push({{"image", frame}}));     // named host inputs (or in order)
//   TS_ASSIGN_OR_RETURN(runtime::InferenceQueue::Output out, q->pop());
//   if (!out.status.ok()) ...                            // this sample's error, never lost
//   TS_RETURN_IF_ERROR(q->stop());                       // runs what was pushed, then joins
//
// Each sample (all of the model's inputs) runs through the traced two-queue
// Pipeline as one frame (its inputs written on queue 1 while queue 0
// replays the trace). A sample that fails yields an Output
// with its error and the loop goes on with the next (the Pipeline rebuilt).
// A model with a host tail (a detector's post-processing; Session::tail(),
// image::LoadedModel::tail) gives it as Options::tail: each sample's outputs
// then run through it on the loop's thread, and Output::values holds the
// model's outputs as it defines them (float32 / int64, shaped by the data).
// push blocks while `capacity` samples wait; pop blocks until an output is
// ready, and returns OUT_OF_RANGE once the loop has finished (input_count
// reached, or stopped) and every output was popped.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "tessera/graph/host_tail.h"
#include "tessera/runtime/compiled_model.h"

namespace tessera::runtime {

class InferenceQueue {
 public:
  struct Options {
    uint64_t input_count = 1;               // samples the loop runs before it finishes; 0: until stop()
    size_t capacity = 16;                   // samples waiting before push blocks
    bool use_pipeline = true;               // the traced two-queue Pipeline (false: CompiledModel::run)
    const graph::HostTail* tail = nullptr;  // the model's host tail (outliving the queue), if it has one
  };
  struct Output {
    uint64_t index = 0;           // the sample's position in push order, from 0
    Status status;                // its error, if it failed
    std::vector<Tensor> outputs;  // host float32, one per compiled model output
    // With Options::tail: the model's outputs through the tail, in the
    // model's order (runtime/model_outputs.h); empty otherwise.
    std::vector<graph::HostTensor> values;
  };

  // `model` and `device` must outlive the queue. INVALID_ARGUMENT for a
  // capacity of 0.
  static StatusOr<std::unique_ptr<InferenceQueue>> start(CompiledModel& model, Device& device, Options options);
  ~InferenceQueue();  // stop()

  // One host tensor per model input, in order, each of its input's volume;
  // or by input name. INVALID_ARGUMENT (the sample not queued) for a wrong
  // count, volume or name; FAILED_PRECONDITION once stopped or after
  // input_count samples.
  Status push(std::vector<Tensor> inputs);
  Status push(const std::map<std::string, Tensor>& inputs);
  StatusOr<Output> pop();
  // No more pushes; the samples pushed run, their outputs stay to be popped.
  Status stop();

  uint64_t pushed() const;
  uint64_t completed() const;

 private:
  InferenceQueue(CompiledModel& model, Device& device, Options options);
  void loop();
  Output run_one(uint64_t index, std::vector<Tensor>& inputs);

  CompiledModel& model_;
  Device& device_;
  Options options_;
  mutable std::mutex mu_;
  std::condition_variable can_push_, can_run_, can_pop_;
  std::deque<std::pair<uint64_t, std::vector<Tensor>>> inputs_;
  std::deque<Output> outputs_;
  uint64_t pushed_ = 0, completed_ = 0;
  bool stopping_ = false, finished_ = false;
  struct PipelineState;
  std::unique_ptr<PipelineState> pipeline_;
  std::thread thread_;
};

}  // namespace tessera::runtime
