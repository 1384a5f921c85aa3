#include "tessera/cnn/executor.h"

#include "tessera/ops/data_movement.h"

namespace tessera::cnn {

namespace {

constexpr uint8_t kCq0 = 0, kCq1 = 1;

Status validate_host_input(const Tensor& t) {
  if (t.is_on_device()) return invalid_argument_error("Input tensor must be on host");
  return ok_status();
}

OutputSchema schema_of(const ModelOutput& out) {
  OutputSchema s;
  if (out.is_tensor()) {
    s.shape = out.tensor->shape();
    s.dtype = out.tensor->dtype();
    s.layout = out.tensor->layout();
    return s;
  }
  s.is_leaf = false;
  for (const ModelOutput& o : out.list) s.list.push_back(schema_of(o));
  return s;
}

// Frees the device tensors of `out` that are still allocated.
void deallocate_structured(ModelOutput& out, bool force) {
  if (out.is_tensor()) {
    if (out.tensor->is_on_device() && out.tensor->is_allocated()) deallocate(*out.tensor, force);
    return;
  }
  for (ModelOutput& o : out.list) deallocate_structured(o, force);
}

void deallocate_if_allocated(Tensor& t, bool force) {
  if (t.is_on_device() && t.is_allocated()) deallocate(t, force);
}

// What every executor holds: the model, the compiled frame's size and the
// persistent DRAM inputs (one per frame tensor).
class ExecutorBase : public Executor {
 public:
  ExecutorBase(MultiInputModel model, Device& device, MemoryConfig l1_config)
      : model_(std::move(model)), device_(device), l1_config_(std::move(l1_config)) {}
  Device& device() const override { return device_; }
  StatusOr<OutputSchema> output_schema() const override {
    if (!schema_) return failed_precondition_error("Executor must be compiled before getting the output schema.");
    return *schema_;
  }

 protected:
  // compile()'s frame: at least one tensor, all on host; later frames must have its size.
  Status begin_compile(std::span<const Tensor> frame) {
    if (frame.empty()) return invalid_argument_error("a frame needs at least one input tensor, found none");
    for (const Tensor& t : frame) TS_RETURN_IF_ERROR(validate_host_input(t));
    frame_size_ = frame.size();
    return ok_status();
  }
  Status check_frame(std::span<const Tensor> frame) const {
    if (frame.size() != frame_size_)
      return invalid_argument_error("a frame of {} input tensor(s); the executor was compiled with {}", frame.size(),
                                    frame_size_);
    return ok_status();
  }
  Status allocate_dram_inputs(std::span<const Tensor> frame, const MemoryConfig& dram_config) {
    dram_inputs_.clear();
    for (const Tensor& h : frame) {
      TS_ASSIGN_OR_RETURN(Tensor d,
                          allocate_tensor_on_device({h.shape(), h.dtype(), h.layout(), dram_config}, device_));
      dram_inputs_.push_back(std::move(d));
    }
    return ok_status();
  }
  // The persistent DRAM inputs must be live DRAM tensors (the original's checks).
  Status check_dram_inputs() const {
    for (const Tensor& d : dram_inputs_) {
      if (!d.is_allocated()) return failed_precondition_error("DRAM input tensor is not allocated");
      if (!d.is_on_device()) return failed_precondition_error("DRAM input tensor must be on device");
      if (d.memory_config().buffer_type != BufferType::DRAM)
        return failed_precondition_error("DRAM input tensor must be in DRAM memory");
    }
    return ok_status();
  }
  Status write_dram_inputs(std::span<const Tensor> frame, uint8_t cq) {
    TS_RETURN_IF_ERROR(check_frame(frame));
    for (size_t k = 0; k < frame.size(); ++k)
      TS_RETURN_IF_ERROR(copy_host_to_device_tensor(frame[k], dram_inputs_[k], cq));
    return ok_status();
  }
  // Every DRAM input resharded into a new L1 tensor.
  StatusOr<std::vector<Tensor>> reshard_dram_inputs(uint8_t cq) {
    TS_RETURN_IF_ERROR(check_dram_inputs());
    std::vector<Tensor> l1;
    for (const Tensor& d : dram_inputs_) {
      TS_ASSIGN_OR_RETURN(Tensor t, reshard(d, l1_config_, std::nullopt, cq));
      l1.push_back(std::move(t));
    }
    return l1;
  }
  // Runs `single` on each frame and hands its output to the sink at once.
  template <class Single>
  Status execute_each(std::span<const Frame> frames, const OutputSink& sink, Single single) {
    for (size_t i = 0; i < frames.size(); ++i) {
      TS_RETURN_IF_ERROR(check_frame(frames[i]));
      TS_ASSIGN_OR_RETURN(ModelOutput out, single(frames[i]));
      TS_RETURN_IF_ERROR(sink(i, out));
    }
    return ok_status();
  }

  MultiInputModel model_;
  Device& device_;
  MemoryConfig l1_config_;
  size_t frame_size_ = 0;
  std::vector<Tensor> dram_inputs_;
  std::optional<OutputSchema> schema_;
};

void deallocate_all(std::vector<Tensor>& ts, bool force) {
  for (Tensor& t : ts) deallocate_if_allocated(t, force);
}

// 1 queue, no trace.
class ModelExecutor final : public ExecutorBase {
 public:
  using ExecutorBase::ExecutorBase;
  uint8_t read_cq() const override { return kCq0; }

  Status compile(std::span<const Tensor> frame) override {
    TS_RETURN_IF_ERROR(begin_compile(frame));
    TS_ASSIGN_OR_RETURN(ModelOutput out, execute_single(frame));
    schema_ = schema_of(out);
    deallocate_structured(out, true);
    return synchronize_device(device_);
  }
  Status execute(std::span<const Frame> frames, const OutputSink& sink) override {
    return execute_each(frames, sink, [&](std::span<const Tensor> f) { return execute_single(f); });
  }
  Status cleanup() override { return ok_status(); }

 private:
  StatusOr<ModelOutput> execute_single(std::span<const Tensor> frame) {
    std::vector<Tensor> l1;
    for (const Tensor& host : frame) {
      TS_ASSIGN_OR_RETURN(Tensor t, to_device(host, device_, l1_config_, kCq0));
      l1.push_back(std::move(t));
    }
    TS_ASSIGN_OR_RETURN(ModelOutput out, model_(l1));
    deallocate_all(l1, true);
    return out;
  }
};

// What the traced executors share: the trace, the persistent L1 inputs at
// the captured addresses, the captured output.
class TracedBase : public ExecutorBase {
 public:
  TracedBase(MultiInputModel model, Device& device, MemoryConfig dram_config, MemoryConfig l1_config)
      : ExecutorBase(std::move(model), device, std::move(l1_config)), dram_config_(std::move(dram_config)) {}

  Status cleanup() override {
    if (!trace_id_) return ok_status();
    Status s = release_trace(device_, *trace_id_);
    trace_id_.reset();
    return s;
  }

 protected:
  // Runs the model under capture on cq 0 with `l1` (allocated before the
  // capture, outside the trace), then frees `l1` and allocates the
  // persistent L1 inputs again, in order; each must land at its captured
  // address.
  Status capture(std::vector<Tensor> l1, std::string_view mismatch_format) {
    input_addresses_.clear();
    std::vector<TensorSpec> specs;
    for (const Tensor& t : l1) {
      TS_ASSIGN_OR_RETURN(const uint64_t a, t.buffer_address());
      input_addresses_.push_back(a);
      specs.push_back(t.spec());
    }
    deallocate_structured(compile_output_, true);
    TS_ASSIGN_OR_RETURN(TraceId tid, begin_trace_capture(device_, kCq0));
    trace_id_ = tid;
    StatusOr<ModelOutput> out = model_(l1);
    if (!out.ok()) {
      (void)end_trace_capture(device_, tid, kCq0);
      return out.status();
    }
    output_ = *out;
    deallocate_all(l1, true);
    l1_inputs_.clear();
    for (size_t k = 0; k < specs.size(); ++k) {
      StatusOr<Tensor> t = allocate_tensor_on_device(specs[k], device_);
      if (!t.ok()) {
        (void)end_trace_capture(device_, tid, kCq0);
        return t.status();
      }
      l1_inputs_.push_back(*t);
      TS_ASSIGN_OR_RETURN(const uint64_t now, t->buffer_address());
      if (now != input_addresses_[k]) {
        (void)end_trace_capture(device_, tid, kCq0);
        return failed_precondition_error(fmt::runtime(mismatch_format), input_addresses_[k], now);
      }
    }
    return end_trace_capture(device_, tid, kCq0);
  }
  // Every DRAM input resharded in place into its persistent L1 input.
  Status reshard_into_l1_inputs(uint8_t cq) {
    for (size_t k = 0; k < dram_inputs_.size(); ++k) {
      TS_ASSIGN_OR_RETURN(l1_inputs_[k], reshard(dram_inputs_[k], l1_config_, l1_inputs_[k], cq));
    }
    return ok_status();
  }
  Status check_l1_addresses() const {
    for (size_t k = 0; k < l1_inputs_.size(); ++k) {
      TS_ASSIGN_OR_RETURN(const uint64_t now, l1_inputs_[k].buffer_address());
      if (now != input_addresses_[k])
        return failed_precondition_error("L1 input tensor address mismatch during execution: expected {}, got {}",
                                         input_addresses_[k], now);
    }
    return ok_status();
  }

  MemoryConfig dram_config_;
  std::optional<TraceId> trace_id_;
  std::vector<Tensor> l1_inputs_;
  std::vector<uint64_t> input_addresses_;
  ModelOutput output_, compile_output_;
};

// 1 queue, trace.
class TracedModelExecutor final : public TracedBase {
 public:
  using TracedBase::TracedBase;
  uint8_t read_cq() const override { return kCq0; }

  Status compile(std::span<const Tensor> frame) override {
    TS_RETURN_IF_ERROR(begin_compile(frame));
    TS_RETURN_IF_ERROR(allocate_dram_inputs(frame, dram_config_));
    TS_ASSIGN_OR_RETURN(std::vector<Tensor> l1, prepare_l1_inputs(frame));
    TS_ASSIGN_OR_RETURN(compile_output_, model_(l1));
    deallocate_all(l1, false);
    schema_ = schema_of(compile_output_);
    TS_ASSIGN_OR_RETURN(std::vector<Tensor> captured_l1, prepare_l1_inputs(frame));  // outside the trace
    TS_RETURN_IF_ERROR(
        capture(std::move(captured_l1),
                "L1 input tensor address mismatch: trace captured {}, but persistent tensor allocated at {}"));
    return synchronize_device(device_);
  }

  Status execute(std::span<const Frame> frames, const OutputSink& sink) override {
    for (size_t i = 0; i < frames.size(); ++i) {
      TS_RETURN_IF_ERROR(write_dram_inputs(frames[i], kCq0));
      TS_RETURN_IF_ERROR(reshard_into_l1_inputs(kCq0));
      TS_RETURN_IF_ERROR(check_l1_addresses());
      TS_RETURN_IF_ERROR(execute_trace(device_, *trace_id_, kCq0, false));
      TS_RETURN_IF_ERROR(sink(i, output_));
    }
    return ok_status();
  }

 private:
  StatusOr<std::vector<Tensor>> prepare_l1_inputs(std::span<const Tensor> frame) {
    TS_RETURN_IF_ERROR(write_dram_inputs(frame, kCq0));  // (reshard_dram_inputs checks them)
    return reshard_dram_inputs(kCq0);
  }
};

// 2 queues, no trace: input writes on cq 1, model and reads on cq 0.
class MultiCQModelOverlappedInputExecutor final : public ExecutorBase {
 public:
  MultiCQModelOverlappedInputExecutor(MultiInputModel model, Device& device, MemoryConfig dram_config,
                                      MemoryConfig l1_config)
      : ExecutorBase(std::move(model), device, std::move(l1_config)), dram_config_(std::move(dram_config)) {}
  uint8_t read_cq() const override { return kCq0; }

  Status compile(std::span<const Tensor> frame) override {
    TS_RETURN_IF_ERROR(begin_compile(frame));
    TS_RETURN_IF_ERROR(allocate_dram_inputs(frame, dram_config_));
    TS_ASSIGN_OR_RETURN(op_event_, record_event(device_, kCq0));  // the first wait needs something
    TS_ASSIGN_OR_RETURN(ModelOutput out, execute_single(frame));
    schema_ = schema_of(out);
    deallocate_structured(out, true);
    return synchronize_device(device_);
  }
  Status execute(std::span<const Frame> frames, const OutputSink& sink) override {
    return execute_each(frames, sink, [&](std::span<const Tensor> f) { return execute_single(f); });
  }
  Status cleanup() override { return ok_status(); }

 private:
  StatusOr<ModelOutput> execute_single(std::span<const Tensor> frame) {
    TS_RETURN_IF_ERROR(wait_for_event(kCq1, op_event_));
    TS_RETURN_IF_ERROR(write_dram_inputs(frame, kCq1));
    TS_ASSIGN_OR_RETURN(Event write_event, record_event(device_, kCq1));
    TS_RETURN_IF_ERROR(wait_for_event(kCq0, write_event));
    TS_ASSIGN_OR_RETURN(std::vector<Tensor> l1, reshard_dram_inputs(kCq0));
    TS_ASSIGN_OR_RETURN(ModelOutput out, model_(l1));
    TS_ASSIGN_OR_RETURN(op_event_, record_event(device_, kCq0));
    deallocate_all(l1, true);
    return out;
  }
  MemoryConfig dram_config_;
  Event op_event_;
};

// 2 queues, trace: input writes on cq 1; reshard, replay and reads on cq 0.
class MultiCQTracedModelOverlappedInputExecutor final : public TracedBase {
 public:
  using TracedBase::TracedBase;
  uint8_t read_cq() const override { return kCq0; }

  Status compile(std::span<const Tensor> frame) override {
    TS_RETURN_IF_ERROR(begin_compile(frame));
    TS_RETURN_IF_ERROR(allocate_dram_inputs(frame, dram_config_));
    TS_ASSIGN_OR_RETURN(op_event_, record_event(device_, kCq0));
    // Compile run.
    TS_ASSIGN_OR_RETURN(std::vector<Tensor> l1, write_and_reshard(frame));
    TS_ASSIGN_OR_RETURN(op_event_, record_event(device_, kCq0));
    TS_ASSIGN_OR_RETURN(compile_output_, model_(l1));
    deallocate_all(l1, false);
    schema_ = schema_of(compile_output_);
    // Captured run; the event after this reshard is recorded and dropped, as the original does.
    TS_ASSIGN_OR_RETURN(std::vector<Tensor> captured_l1, write_and_reshard(frame));
    TS_ASSIGN_OR_RETURN(Event dropped, record_event(device_, kCq0));
    (void)dropped;
    TS_RETURN_IF_ERROR(capture(std::move(captured_l1), "L1 input tensor address mismatch: expected {}, got {}"));
    TS_ASSIGN_OR_RETURN(op_event_, record_event(device_, kCq0));
    return synchronize_device(device_);
  }

  Status execute(std::span<const Frame> frames, const OutputSink& sink) override {
    for (size_t i = 0; i < frames.size(); ++i) {
      TS_RETURN_IF_ERROR(wait_for_event(kCq1, op_event_));
      TS_RETURN_IF_ERROR(write_dram_inputs(frames[i], kCq1));
      TS_ASSIGN_OR_RETURN(Event write_event, record_event(device_, kCq1));
      TS_RETURN_IF_ERROR(wait_for_event(kCq0, write_event));
      TS_RETURN_IF_ERROR(reshard_into_l1_inputs(kCq0));
      TS_ASSIGN_OR_RETURN(op_event_, record_event(device_, kCq0));
      TS_RETURN_IF_ERROR(execute_trace(device_, *trace_id_, kCq0, false));
      TS_RETURN_IF_ERROR(sink(i, output_));
    }
    return ok_status();
  }

 private:
  StatusOr<std::vector<Tensor>> write_and_reshard(std::span<const Tensor> frame) {
    TS_RETURN_IF_ERROR(wait_for_event(kCq1, op_event_));
    TS_RETURN_IF_ERROR(write_dram_inputs(frame, kCq1));
    TS_ASSIGN_OR_RETURN(Event write_event, record_event(device_, kCq1));
    TS_RETURN_IF_ERROR(wait_for_event(kCq0, write_event));
    return reshard_dram_inputs(kCq0);
  }
  Event op_event_;
};

// 2 queues, trace, every transfer on cq 1: the replay alone on cq 0, the
// output resharded into a persistent DRAM tensor that cq 1 reads.
class MultiCQTracedModelPipelinedIOExecutor final : public TracedBase {
 public:
  MultiCQTracedModelPipelinedIOExecutor(MultiInputModel model, Device& device, MemoryConfig dram_config,
                                        MemoryConfig l1_config, MemoryConfig dram_output_config)
      : TracedBase(std::move(model), device, std::move(dram_config), std::move(l1_config)),
        dram_output_config_(std::move(dram_output_config)) {}
  uint8_t read_cq() const override { return kCq1; }

  Status compile(std::span<const Tensor> frame) override {
    TS_RETURN_IF_ERROR(begin_compile(frame));
    TS_RETURN_IF_ERROR(allocate_dram_inputs(frame, dram_config_));
    TS_ASSIGN_OR_RETURN(first_op_event_, record_event(device_, kCq0));
    TS_ASSIGN_OR_RETURN(read_event_, record_event(device_, kCq1));
    // Compile run. The original reshards its output into a DRAM tensor that
    // does not exist yet at this point; Tessera allocates it first, from the
    // compile output's spec, so the compile run exercises the same path.
    TS_RETURN_IF_ERROR(transfer_input(frame));
    TS_RETURN_IF_ERROR(wait_for_event(kCq0, write_event_));
    TS_ASSIGN_OR_RETURN(std::vector<Tensor> l1, reshard_dram_inputs(kCq0));
    TS_ASSIGN_OR_RETURN(first_op_event_, record_event(device_, kCq0));
    TS_ASSIGN_OR_RETURN(compile_output_, model_(l1));
    // (The original supports one output only; Tessera keeps a persistent
    // DRAM tensor per output, which a sharded config cannot describe.)
    if (!compile_output_.is_tensor() && dram_output_config_.is_sharded())
      return invalid_argument_error(
          "MultiCQTracedModelPipelinedIOExecutor: a model with several outputs needs an interleaved "
          "dram_output_memory_config (a sharded one describes one output's shape)");
    schema_ = schema_of(compile_output_);
    TS_ASSIGN_OR_RETURN(dram_output_, allocate_like(compile_output_));
    TS_RETURN_IF_ERROR(wait_for_event(kCq0, read_event_));
    TS_RETURN_IF_ERROR(reshard_into(compile_output_, dram_output_));
    TS_ASSIGN_OR_RETURN(last_op_event_, record_event(device_, kCq0));
    deallocate_all(l1, false);
    // Captured run.
    TS_RETURN_IF_ERROR(transfer_input(frame));
    TS_RETURN_IF_ERROR(wait_for_event(kCq0, write_event_));
    TS_ASSIGN_OR_RETURN(std::vector<Tensor> captured_l1, reshard_dram_inputs(kCq0));
    TS_RETURN_IF_ERROR(capture(std::move(captured_l1), "L1 input tensor address mismatch: expected {}, got {}"));
    return synchronize_device(device_);
  }

  Status execute(std::span<const Frame> frames, const OutputSink& sink) override {
    if (frames.size() < 2)
      return invalid_argument_error("Pipelined I/O executor requires at least 2 inputs for pipelining (got {})",
                                    frames.size());
    TS_RETURN_IF_ERROR(transfer_input(frames[0]));
    for (size_t i = 1; i < frames.size(); ++i) {
      TS_RETURN_IF_ERROR(execute_model_and_transfer_output());
      TS_RETURN_IF_ERROR(transfer_input(frames[i]));
      TS_RETURN_IF_ERROR(read_output(i - 1, sink));
    }
    TS_RETURN_IF_ERROR(execute_model_and_transfer_output());
    return read_output(frames.size() - 1, sink);
  }

 private:
  Status transfer_input(std::span<const Tensor> frame) {
    TS_RETURN_IF_ERROR(wait_for_event(kCq1, first_op_event_));
    TS_RETURN_IF_ERROR(write_dram_inputs(frame, kCq1));
    TS_ASSIGN_OR_RETURN(write_event_, record_event(device_, kCq1));
    return ok_status();
  }
  Status execute_model_and_transfer_output() {
    TS_RETURN_IF_ERROR(wait_for_event(kCq0, write_event_));
    TS_RETURN_IF_ERROR(reshard_into_l1_inputs(kCq0));
    TS_ASSIGN_OR_RETURN(first_op_event_, record_event(device_, kCq0));
    TS_RETURN_IF_ERROR(execute_trace(device_, *trace_id_, kCq0, false));
    TS_RETURN_IF_ERROR(wait_for_event(kCq0, read_event_));
    TS_RETURN_IF_ERROR(reshard_into(output_, dram_output_));
    TS_ASSIGN_OR_RETURN(last_op_event_, record_event(device_, kCq0));
    return ok_status();
  }
  // A persistent DRAM tensor per output, the outputs' nesting kept.
  StatusOr<ModelOutput> allocate_like(const ModelOutput& o) {
    if (!o.is_tensor()) {
      std::vector<ModelOutput> list;
      for (const ModelOutput& e : o.list) {
        TS_ASSIGN_OR_RETURN(ModelOutput d, allocate_like(e));
        list.push_back(std::move(d));
      }
      return ModelOutput::of(std::move(list));
    }
    if (o.tensor->layout() != Layout::ROW_MAJOR)
      return invalid_argument_error(
          "MultiCQTracedModelPipelinedIOExecutor: the model output must be ROW_MAJOR (the "
          "persistent DRAM output is), found {}",
          o.tensor->spec().to_string());
    TS_ASSIGN_OR_RETURN(Tensor t,
                        allocate_tensor_on_device(
                            {o.tensor->shape(), o.tensor->dtype(), Layout::ROW_MAJOR, dram_output_config_}, device_));
    return ModelOutput::of(std::move(t));
  }
  Status reshard_into(const ModelOutput& src, const ModelOutput& dst) {
    if (src.is_tensor()) return reshard(*src.tensor, dram_output_config_, *dst.tensor, kCq0).status();
    for (size_t k = 0; k < src.list.size(); ++k) TS_RETURN_IF_ERROR(reshard_into(src.list[k], dst.list[k]));
    return ok_status();
  }
  // The read of output i goes on cq 1 after the model's last op; the
  // read-done event is recorded after the read is enqueued, so the next
  // reshard into the DRAM output cannot overwrite it first.
  Status read_output(size_t index, const OutputSink& sink) {
    TS_RETURN_IF_ERROR(wait_for_event(kCq1, last_op_event_));
    TS_RETURN_IF_ERROR(sink(index, dram_output_));
    TS_ASSIGN_OR_RETURN(read_event_, record_event(device_, kCq1));
    return ok_status();
  }

  MemoryConfig dram_output_config_;
  ModelOutput dram_output_;
  Event first_op_event_, write_event_, last_op_event_, read_event_;
};

}  // namespace

std::unique_ptr<Executor> make_model_executor(MultiInputModel model, Device& device, MemoryConfig l1) {
  return std::make_unique<ModelExecutor>(std::move(model), device, std::move(l1));
}
std::unique_ptr<Executor> make_traced_model_executor(MultiInputModel model, Device& device, MemoryConfig dram,
                                                     MemoryConfig l1) {
  return std::make_unique<TracedModelExecutor>(std::move(model), device, std::move(dram), std::move(l1));
}
std::unique_ptr<Executor> make_multi_cq_model_overlapped_input_executor(MultiInputModel model, Device& device,
                                                                        MemoryConfig dram, MemoryConfig l1) {
  return std::make_unique<MultiCQModelOverlappedInputExecutor>(std::move(model), device, std::move(dram),
                                                               std::move(l1));
}
std::unique_ptr<Executor> make_multi_cq_traced_model_overlapped_input_executor(MultiInputModel model, Device& device,
                                                                               MemoryConfig dram, MemoryConfig l1) {
  return std::make_unique<MultiCQTracedModelOverlappedInputExecutor>(std::move(model), device, std::move(dram),
                                                                     std::move(l1));
}
std::unique_ptr<Executor> make_multi_cq_traced_model_pipelined_io_executor(MultiInputModel model, Device& device,
                                                                           MemoryConfig dram, MemoryConfig l1,
                                                                           MemoryConfig dram_output) {
  return std::make_unique<MultiCQTracedModelPipelinedIOExecutor>(std::move(model), device, std::move(dram),
                                                                 std::move(l1), std::move(dram_output));
}

MultiInputModel as_multi_input(Model model) {
  return [model = std::move(model)](std::span<const Tensor> l1) -> StatusOr<ModelOutput> {
    if (l1.size() != 1)
      return invalid_argument_error("a model of one input was given a frame of {} input tensors", l1.size());
    return model(l1[0]);
  };
}

}  // namespace tessera::cnn
