// Loads a compiled image and runs it: the whole of what a C++ program needs
// to ship a model. Inputs come from .npy files (random where none is given),
// each output goes to OUTDIR/NAME.npy (a detector's post-processing
// included: its int64 indices as '<i8').
//
//   tessera compile model.onnx -o model.tsi      # once, anywhere
//   embedded_run model.tsi OUTDIR [INPUT.npy ...] [--model NAME]
#include <tessera/cnn/weights.h>
#include <tessera/image/session.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

namespace {

tessera::Status run(int argc, char** argv) {
  using namespace tessera;
  if (argc < 3) return invalid_argument_error("usage: {} MODEL.tsi OUTDIR [INPUT.npy ...] [--model NAME]", argv[0]);
  SessionOptions options;
  std::vector<std::string> files;
  for (int i = 3; i < argc; ++i) {
    if (std::strcmp(argv[i], "--model") == 0 && i + 1 < argc) options.model = argv[++i];
    else files.push_back(argv[i]);
  }
  TS_ASSIGN_OR_RETURN(auto session, Session::open(argv[1], options));
  for (const std::string& note : session->notes()) std::printf("note: %s\n", note.c_str());
  const image::ModelInfo& m = session->model();
  if (files.size() > m.inputs.size())
    return invalid_argument_error("{} input files for model '{}', which takes {}", files.size(), m.name,
                                  m.inputs.size());
  std::vector<Tensor> inputs;
  std::mt19937 rng(0);
  for (size_t k = 0; k < m.inputs.size(); ++k) {
    if (k < files.size()) {
      TS_ASSIGN_OR_RETURN(Tensor x, cnn::load_npy(files[k]));
      inputs.push_back(std::move(x));
      continue;
    }
    std::vector<uint32_t> dims(m.inputs[k].dims.begin(), m.inputs[k].dims.end());
    const Shape shape{std::span<const uint32_t>(dims)};
    std::vector<float> v(shape.volume());
    std::uniform_real_distribution<float> u(-1, 1);
    for (float& f : v) f = u(rng);
    TS_ASSIGN_OR_RETURN(Tensor x, Tensor::from_vector(v, shape, DataType::FLOAT32));
    inputs.push_back(std::move(x));
  }
  // Every output as the model defines it: float32, or int64 (a detector's
  // post-processing, which the image runs on the host), shaped by its data.
  TS_ASSIGN_OR_RETURN(std::vector<graph::HostTensor> outputs, session->run_outputs(inputs));
  const std::vector<std::string> names = session->output_names();
  for (size_t k = 0; k < outputs.size(); ++k) {
    const graph::HostTensor& y = outputs[k];
    const bool i64 = y.type == graph::ElemType::INT64;
    const std::string bytes = i64 ? cnn::npy_file_bytes("<i8", y.dims, y.i.data(), y.i.size() * 8)
                                  : cnn::npy_file_bytes("<f4", y.dims, y.f.data(), y.f.size() * 4);
    const std::string path = std::string(argv[2]) + "/" + names[k] + ".npy";
    std::ofstream out(path, std::ios::binary);
    if (!out.write(bytes.data(), static_cast<std::streamsize>(bytes.size())))
      return invalid_argument_error("{}: cannot write the file", path);
    std::string dims;
    for (int64_t d : y.dims) dims += (dims.empty() ? "" : "x") + std::to_string(d);
    std::printf("output '%s' %s [%s] -> %s\n", names[k].c_str(), i64 ? "int64" : "float32", dims.c_str(),
                path.c_str());
  }
  return ok_status();
}

}  // namespace

int main(int argc, char** argv) {
  const tessera::Status s = run(argc, argv);
  if (!s.ok()) {
    std::fprintf(stderr, "embedded_run: %s\n", s.to_string().c_str());
    return 1;
  }
  return 0;
}
