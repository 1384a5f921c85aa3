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

// What every executor holds.
class ExecutorBase : public Executor {
 public:
  ExecutorBase(Model model, Device& device, MemoryConfig l1_config)
      : model_(std::move(model)), device_(device), l1_config_(std::move(l1_config)) {}
  Device& device() const override { return device_; }
  StatusOr<OutputSchema> output_schema() const override {
    if (!schema_) return failed_precondition_error("Executor must be compiled before getting the output schema.");
    return *schema_;
  }

 protected:
  StatusOr<Tensor> allocate_dram_input(const Tensor& host, const MemoryConfig& dram_config) {
    return allocate_tensor_on_device({host.shape(), host.dtype(), host.layout(), dram_config}, device_);
  }
  // The persistent DRAM input must be a live DRAM tensor (the original's checks).
  // Runs `single` on each input and hands its output to the sink at once.
  template <class Single>
  Status execute_each(std::span<const Tensor> inputs, const OutputSink& sink, Single single) {
    for (size_t i = 0; i < inputs.size(); ++i) {
      TS_ASSIGN_OR_RETURN(ModelOutput out, single(inputs[i]));
      TS_RETURN_IF_ERROR(sink(i, out));
    }
    return ok_status();
  }
  Status check_dram_input() const {
    if (!dram_input_.is_allocated()) return failed_precondition_error("DRAM input tensor is not allocated");
    if (!dram_input_.is_on_device()) return failed_precondition_error("DRAM input tensor must be on device");
    if (dram_input_.memory_config().buffer_type != BufferType::DRAM)
      return failed_precondition_error("DRAM input tensor must be in DRAM memory");
    return ok_status();
  }

  Model model_;
  Device& device_;
  MemoryConfig l1_config_;
  Tensor dram_input_;
  std::optional<OutputSchema> schema_;
};

// 1 queue, no trace.
class ModelExecutor final : public ExecutorBase {
 public:
  using ExecutorBase::ExecutorBase;
  uint8_t read_cq() const override { return kCq0; }

  Status compile(const Tensor& host) override {
    TS_RETURN_IF_ERROR(validate_host_input(host));
    TS_ASSIGN_OR_RETURN(ModelOutput out, execute_single(host));
    schema_ = schema_of(out);
    deallocate_structured(out, true);
    return synchronize_device(device_);
  }
  Status execute(std::span<const Tensor> inputs, const OutputSink& sink) override {
    return execute_each(inputs, sink, [&](const Tensor& host) { return execute_single(host); });
  }
  Status cleanup() override { return ok_status(); }

 private:
  StatusOr<ModelOutput> execute_single(const Tensor& host) {
    TS_ASSIGN_OR_RETURN(Tensor l1, to_device(host, device_, l1_config_, kCq0));
    TS_ASSIGN_OR_RETURN(ModelOutput out, model_(l1));
    deallocate_if_allocated(l1, true);
    return out;
  }
};

// What the traced executors share: the trace, the persistent L1 input at the
// captured address, the captured output.
class TracedBase : public ExecutorBase {
 public:
  TracedBase(Model model, Device& device, MemoryConfig dram_config, MemoryConfig l1_config)
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
  // persistent L1 input again, which must land at the captured address.
  Status capture(Tensor l1, std::string_view mismatch_format) {
    TS_ASSIGN_OR_RETURN(const uint64_t captured, l1.buffer_address());
    const TensorSpec spec = l1.spec();
    deallocate_structured(compile_output_, true);
    TS_ASSIGN_OR_RETURN(TraceId tid, begin_trace_capture(device_, kCq0));
    trace_id_ = tid;
    StatusOr<ModelOutput> out = model_(l1);
    if (!out.ok()) {
      (void)end_trace_capture(device_, tid, kCq0);
      return out.status();
    }
    output_ = *out;
    deallocate_if_allocated(l1, true);
    TS_ASSIGN_OR_RETURN(l1_input_, allocate_tensor_on_device(spec, device_));
    TS_ASSIGN_OR_RETURN(const uint64_t now, l1_input_.buffer_address());
    if (now != captured) {
      (void)end_trace_capture(device_, tid, kCq0);
      return failed_precondition_error(fmt::runtime(mismatch_format), captured, now);
    }
    return end_trace_capture(device_, tid, kCq0);
  }
  Status check_l1_address(uint64_t expected) const {
    TS_ASSIGN_OR_RETURN(const uint64_t now, l1_input_.buffer_address());
    if (now != expected)
      return failed_precondition_error("L1 input tensor address mismatch during execution: expected {}, got {}",
                                       expected, now);
    return ok_status();
  }

  MemoryConfig dram_config_;
  std::optional<TraceId> trace_id_;
  Tensor l1_input_;
  ModelOutput output_, compile_output_;
};

// 1 queue, trace.
class TracedModelExecutor final : public TracedBase {
 public:
  using TracedBase::TracedBase;
  uint8_t read_cq() const override { return kCq0; }

  Status compile(const Tensor& host) override {
    TS_RETURN_IF_ERROR(validate_host_input(host));
    TS_ASSIGN_OR_RETURN(dram_input_, allocate_dram_input(host, dram_config_));
    TS_ASSIGN_OR_RETURN(Tensor l1, prepare_l1_input(host));
    TS_ASSIGN_OR_RETURN(compile_output_, model_(l1));
    deallocate_if_allocated(l1, false);
    schema_ = schema_of(compile_output_);
    TS_ASSIGN_OR_RETURN(Tensor captured_l1, prepare_l1_input(host));  // outside the trace
    TS_RETURN_IF_ERROR(capture(
        captured_l1, "L1 input tensor address mismatch: trace captured {}, but persistent tensor allocated at {}"));
    TS_ASSIGN_OR_RETURN(input_address_, l1_input_.buffer_address());
    return synchronize_device(device_);
  }

  Status execute(std::span<const Tensor> inputs, const OutputSink& sink) override {
    for (size_t i = 0; i < inputs.size(); ++i) {
      TS_RETURN_IF_ERROR(copy_host_to_device_tensor(inputs[i], dram_input_, kCq0));
      TS_ASSIGN_OR_RETURN(l1_input_, reshard(dram_input_, l1_config_, l1_input_, kCq0));
      TS_RETURN_IF_ERROR(check_l1_address(input_address_));
      TS_RETURN_IF_ERROR(execute_trace(device_, *trace_id_, kCq0, false));
      TS_RETURN_IF_ERROR(sink(i, output_));
    }
    return ok_status();
  }

 private:
  StatusOr<Tensor> prepare_l1_input(const Tensor& host) {
    TS_RETURN_IF_ERROR(check_dram_input());
    TS_RETURN_IF_ERROR(copy_host_to_device_tensor(host, dram_input_, kCq0));
    return reshard(dram_input_, l1_config_, std::nullopt, kCq0);
  }
  uint64_t input_address_ = 0;
};

// 2 queues, no trace: input writes on cq 1, model and reads on cq 0.
class MultiCQModelOverlappedInputExecutor final : public ExecutorBase {
 public:
  MultiCQModelOverlappedInputExecutor(Model model, Device& device, MemoryConfig dram_config, MemoryConfig l1_config)
      : ExecutorBase(std::move(model), device, std::move(l1_config)), dram_config_(std::move(dram_config)) {}
  uint8_t read_cq() const override { return kCq0; }

  Status compile(const Tensor& host) override {
    TS_RETURN_IF_ERROR(validate_host_input(host));
    TS_ASSIGN_OR_RETURN(dram_input_, allocate_dram_input(host, dram_config_));
    TS_ASSIGN_OR_RETURN(op_event_, record_event(device_, kCq0));  // the first wait needs something
    TS_ASSIGN_OR_RETURN(ModelOutput out, execute_single(host));
    schema_ = schema_of(out);
    deallocate_structured(out, true);
    return synchronize_device(device_);
  }
  Status execute(std::span<const Tensor> inputs, const OutputSink& sink) override {
    return execute_each(inputs, sink, [&](const Tensor& host) { return execute_single(host); });
  }
  Status cleanup() override { return ok_status(); }

 private:
  StatusOr<ModelOutput> execute_single(const Tensor& host) {
    TS_RETURN_IF_ERROR(wait_for_event(kCq1, op_event_));
    TS_RETURN_IF_ERROR(copy_host_to_device_tensor(host, dram_input_, kCq1));
    TS_ASSIGN_OR_RETURN(Event write_event, record_event(device_, kCq1));
    TS_RETURN_IF_ERROR(wait_for_event(kCq0, write_event));
    TS_ASSIGN_OR_RETURN(Tensor l1, reshard(dram_input_, l1_config_, std::nullopt, kCq0));
    TS_ASSIGN_OR_RETURN(ModelOutput out, model_(l1));
    TS_ASSIGN_OR_RETURN(op_event_, record_event(device_, kCq0));
    deallocate_if_allocated(l1, true);
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

  Status compile(const Tensor& host) override {
    TS_RETURN_IF_ERROR(validate_host_input(host));
    TS_ASSIGN_OR_RETURN(dram_input_, allocate_dram_input(host, dram_config_));
    TS_ASSIGN_OR_RETURN(op_event_, record_event(device_, kCq0));
    // Compile run.
    TS_ASSIGN_OR_RETURN(Tensor l1, write_and_reshard(host));
    TS_ASSIGN_OR_RETURN(op_event_, record_event(device_, kCq0));
    TS_ASSIGN_OR_RETURN(compile_output_, model_(l1));
    deallocate_if_allocated(l1, false);
    schema_ = schema_of(compile_output_);
    // Captured run; the event after this reshard is recorded and dropped, as the original does.
    TS_ASSIGN_OR_RETURN(Tensor captured_l1, write_and_reshard(host));
    TS_ASSIGN_OR_RETURN(Event dropped, record_event(device_, kCq0));
    (void)dropped;
    TS_RETURN_IF_ERROR(capture(captured_l1, "L1 input tensor address mismatch: expected {}, got {}"));
    TS_ASSIGN_OR_RETURN(op_event_, record_event(device_, kCq0));
    return synchronize_device(device_);
  }

  Status execute(std::span<const Tensor> inputs, const OutputSink& sink) override {
    for (size_t i = 0; i < inputs.size(); ++i) {
      TS_RETURN_IF_ERROR(wait_for_event(kCq1, op_event_));
      TS_RETURN_IF_ERROR(copy_host_to_device_tensor(inputs[i], dram_input_, kCq1));
      TS_ASSIGN_OR_RETURN(Event write_event, record_event(device_, kCq1));
      TS_RETURN_IF_ERROR(wait_for_event(kCq0, write_event));
      TS_ASSIGN_OR_RETURN(l1_input_, reshard(dram_input_, l1_config_, l1_input_, kCq0));
      TS_ASSIGN_OR_RETURN(op_event_, record_event(device_, kCq0));
      TS_RETURN_IF_ERROR(execute_trace(device_, *trace_id_, kCq0, false));
      TS_RETURN_IF_ERROR(sink(i, output_));
    }
    return ok_status();
  }

 private:
  StatusOr<Tensor> write_and_reshard(const Tensor& host) {
    TS_RETURN_IF_ERROR(wait_for_event(kCq1, op_event_));
    TS_RETURN_IF_ERROR(copy_host_to_device_tensor(host, dram_input_, kCq1));
    TS_ASSIGN_OR_RETURN(Event write_event, record_event(device_, kCq1));
    TS_RETURN_IF_ERROR(wait_for_event(kCq0, write_event));
    return reshard(dram_input_, l1_config_, std::nullopt, kCq0);
  }
  Event op_event_;
};

// 2 queues, trace, every transfer on cq 1: the replay alone on cq 0, the
// output resharded into a persistent DRAM tensor that cq 1 reads.
class MultiCQTracedModelPipelinedIOExecutor final : public TracedBase {
 public:
  MultiCQTracedModelPipelinedIOExecutor(Model model, Device& device, MemoryConfig dram_config, MemoryConfig l1_config,
                                        MemoryConfig dram_output_config)
      : TracedBase(std::move(model), device, std::move(dram_config), std::move(l1_config)),
        dram_output_config_(std::move(dram_output_config)) {}
  uint8_t read_cq() const override { return kCq1; }

  Status compile(const Tensor& host) override {
    TS_RETURN_IF_ERROR(validate_host_input(host));
    TS_ASSIGN_OR_RETURN(dram_input_, allocate_dram_input(host, dram_config_));
    TS_ASSIGN_OR_RETURN(first_op_event_, record_event(device_, kCq0));
    TS_ASSIGN_OR_RETURN(read_event_, record_event(device_, kCq1));
    // Compile run. The original reshards its output into a DRAM tensor that
    // does not exist yet at this point; Tessera allocates it first, from the
    // compile output's spec, so the compile run exercises the same path.
    TS_RETURN_IF_ERROR(transfer_input(host));
    TS_RETURN_IF_ERROR(wait_for_event(kCq0, write_event_));
    TS_ASSIGN_OR_RETURN(Tensor l1, reshard(dram_input_, l1_config_, std::nullopt, kCq0));
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
    deallocate_if_allocated(l1, false);
    // Captured run.
    TS_RETURN_IF_ERROR(transfer_input(host));
    TS_RETURN_IF_ERROR(wait_for_event(kCq0, write_event_));
    TS_ASSIGN_OR_RETURN(Tensor captured_l1, reshard(dram_input_, l1_config_, std::nullopt, kCq0));
    TS_RETURN_IF_ERROR(capture(captured_l1, "L1 input tensor address mismatch: expected {}, got {}"));
    return synchronize_device(device_);
  }

  Status execute(std::span<const Tensor> inputs, const OutputSink& sink) override {
    if (inputs.size() < 2)
      return invalid_argument_error("Pipelined I/O executor requires at least 2 inputs for pipelining (got {})",
                                    inputs.size());
    TS_RETURN_IF_ERROR(transfer_input(inputs[0]));
    for (size_t i = 1; i < inputs.size(); ++i) {
      TS_RETURN_IF_ERROR(execute_model_and_transfer_output());
      TS_RETURN_IF_ERROR(transfer_input(inputs[i]));
      TS_RETURN_IF_ERROR(read_output(i - 1, sink));
    }
    TS_RETURN_IF_ERROR(execute_model_and_transfer_output());
    return read_output(inputs.size() - 1, sink);
  }

 private:
  Status transfer_input(const Tensor& host) {
    TS_RETURN_IF_ERROR(wait_for_event(kCq1, first_op_event_));
    TS_RETURN_IF_ERROR(copy_host_to_device_tensor(host, dram_input_, kCq1));
    TS_ASSIGN_OR_RETURN(write_event_, record_event(device_, kCq1));
    return ok_status();
  }
  Status execute_model_and_transfer_output() {
    TS_RETURN_IF_ERROR(wait_for_event(kCq0, write_event_));
    TS_ASSIGN_OR_RETURN(l1_input_, reshard(dram_input_, l1_config_, l1_input_, kCq0));
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

std::unique_ptr<Executor> make_model_executor(Model model, Device& device, MemoryConfig l1) {
  return std::make_unique<ModelExecutor>(std::move(model), device, std::move(l1));
}
std::unique_ptr<Executor> make_traced_model_executor(Model model, Device& device, MemoryConfig dram, MemoryConfig l1) {
  return std::make_unique<TracedModelExecutor>(std::move(model), device, std::move(dram), std::move(l1));
}
std::unique_ptr<Executor> make_multi_cq_model_overlapped_input_executor(Model model, Device& device, MemoryConfig dram,
                                                                        MemoryConfig l1) {
  return std::make_unique<MultiCQModelOverlappedInputExecutor>(std::move(model), device, std::move(dram),
                                                               std::move(l1));
}
std::unique_ptr<Executor> make_multi_cq_traced_model_overlapped_input_executor(Model model, Device& device,
                                                                               MemoryConfig dram, MemoryConfig l1) {
  return std::make_unique<MultiCQTracedModelOverlappedInputExecutor>(std::move(model), device, std::move(dram),
                                                                     std::move(l1));
}
std::unique_ptr<Executor> make_multi_cq_traced_model_pipelined_io_executor(Model model, Device& device,
                                                                           MemoryConfig dram, MemoryConfig l1,
                                                                           MemoryConfig dram_output) {
  return std::make_unique<MultiCQTracedModelPipelinedIOExecutor>(std::move(model), device, std::move(dram),
                                                                 std::move(l1), std::move(dram_output));
}

}  // namespace tessera::cnn
