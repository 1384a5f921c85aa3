#include "tessera/ops/eltwise.h"

#include "cpu/eltwise_kernels.h"
#include "op_common.h"

namespace tessera {

namespace {

using cpu::EltwiseArgs;
using cpu::EltwiseOp;

StatusOr<Tensor> run_eltwise(EltwiseOp op, std::string_view name, const Tensor& a, const Tensor* b, DataType out_type,
                             uint8_t cq_id) {
  TS_RETURN_IF_ERROR(ops::require_device_tensor(a, name, b ? "a" : "input"));
  if (op != EltwiseOp::kTypecast && !is_floating(a.dtype()))
    return invalid_argument_error("{}: expected a floating dtype (float32, bfloat16, bfloat8_b, bfloat4_b), found {}",
                                  name, data_type_name(a.dtype()));
  if (b) {
    TS_RETURN_IF_ERROR(ops::require_device_tensor(*b, name, "b"));
    if (!is_floating(b->dtype()))
      return invalid_argument_error("{}: expected b to have a floating dtype, found {}", name,
                                    data_type_name(b->dtype()));
    if (b->device() != a.device()) return invalid_argument_error("{}: a and b are on different devices", name);
    if (a.shape() != b->shape() || a.layout() != b->layout() || a.memory_config() != b->memory_config())
      return invalid_argument_error("{}: operands must have the same shape, layout and memory config, found {} and {}",
                                    name, a.spec().to_string(), b->spec().to_string());
  }
  if (!is_floating(out_type) && op != EltwiseOp::kTypecast)
    return invalid_argument_error("{}: expected a floating output dtype, found {}", name, data_type_name(out_type));
  Device& device = *a.device();
  TensorSpec out_spec = a.spec();
  out_spec.dtype = out_type;
  TS_RETURN_IF_ERROR(out_spec.validate().annotate(name));
  TS_ASSIGN_OR_RETURN(Tensor out, allocate_tensor_on_device(out_spec, device));

  EltwiseArgs args{};
  TS_ASSIGN_OR_RETURN(args.a, make_access(a));
  if (b) {
    TS_ASSIGN_OR_RETURN(args.b, make_access(*b));
  }
  TS_ASSIGN_OR_RETURN(args.out, make_access(out));
  args.a_type = a.dtype();
  args.b_type = b ? b->dtype() : a.dtype();
  args.out_type = out_type;
  args.op = op;
  args.num_pages = args.a.num_pages();
  args.page_elements = static_cast<uint32_t>(args.a.page_units() * a.spec().unit_elements());

  std::string key = fmt::format("{}:{}{}->{}", name, a.spec().to_string(),
                                b ? "," + b->spec().to_string() : std::string(), short_dtype_name(out_type));
  auto compile = [&]() -> StatusOr<Program> {
    Program p;
    p.kernel = cpu::select_eltwise_kernel(op, args.a_type, args.b_type, out_type, &p.kernel_name);
    p.num_tasks = args.num_pages;
    p.grain = ops::default_grain(device, args.num_pages,
                                 a.spec().storage_bytes() * (b ? 2 : 1) + out_spec.storage_bytes(),
                                 ops::kMinChunkBytesStreaming);
    return p;
  };
  TS_RETURN_IF_ERROR(ops::launch(device, cq_id, key, compile, args));
  return out;
}

}  // namespace

StatusOr<Tensor> relu(const Tensor& input, const EltwiseParams& p) {
  return run_eltwise(EltwiseOp::kRelu, "relu", input, nullptr, p.dtype.value_or(input.dtype()), p.cq_id);
}

StatusOr<Tensor> add(const Tensor& a, const Tensor& b, const EltwiseParams& p) {
  return run_eltwise(EltwiseOp::kAdd, "add", a, &b, p.dtype.value_or(a.dtype()), p.cq_id);
}

StatusOr<Tensor> typecast(const Tensor& input, DataType dtype, uint8_t cq_id) {
  return run_eltwise(EltwiseOp::kTypecast, "typecast", input, nullptr, dtype, cq_id);
}

}  // namespace tessera
