#include "model_io.h"

#include <fmt/format.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>

#include "model_runner.h"
#include "tessera/cnn/testing.h"
#include "tessera/cnn/weights.h"
#include "tessera/import/onnx.h"

namespace tessera::tools {

namespace {

std::string dims_string(const std::vector<int64_t>& dims) {
  std::string s = "[";
  for (size_t k = 0; k < dims.size(); ++k)
    s += (k ? "," : "") + (dims[k] < 0 ? std::string("?") : std::to_string(dims[k]));
  return s + "]";
}

// A note for a file whose dtype is not float32 ('<f4').
void note_conversion(const std::string& source, const std::string& dtype, std::vector<std::string>* notes) {
  if (dtype != "<f4" && notes)
    notes->push_back(fmt::format("note: {} holds {}; converted to float32, the dtype the model takes", source, dtype));
}

}  // namespace

StatusOr<std::vector<DeclaredInput>> declared_inputs(const std::string& model_path, const std::string& model_name) {
  if (is_image_file(model_path)) {
    TS_ASSIGN_OR_RETURN(auto img, image::Image::open(model_path));
    TS_ASSIGN_OR_RETURN(const size_t index, image_model_index(*img, model_name));
    std::vector<DeclaredInput> out;
    for (const image::IoInfo& io : img->info().models[index].inputs) out.push_back({io.name, io.dims});
    return out;
  }
  importer::OnnxImportOptions io;
  io.symbolic_dim = -1;
  io.infer_shapes = false;
  TS_ASSIGN_OR_RETURN(graph::Graph g, importer::import_onnx(model_path, io));
  std::vector<DeclaredInput> out;
  for (int i : g.inputs) out.push_back({g.value(i).name, g.value(i).dims});
  return out;
}

StatusOr<std::map<std::string, Tensor>> read_inputs(const std::vector<std::string>& specs,
                                                    const std::vector<DeclaredInput>& declared,
                                                    std::vector<std::string>* notes) {
  std::map<std::string, Tensor> out;
  auto known = [&](const std::string& name) {
    for (const DeclaredInput& d : declared)
      if (d.name == name) return true;
    return false;
  };
  auto names = [&] {
    std::string s;
    for (const DeclaredInput& d : declared) s += (s.empty() ? "'" : ", '") + d.name + "'";
    return s;
  };
  auto put = [&](const std::string& name, Tensor t, const std::string& source) -> Status {
    if (!known(name))
      return invalid_argument_error("--input {}: the model has no input '{}' (its inputs: {})", source, name, names());
    if (out.count(name)) return invalid_argument_error("--input {}: input '{}' is given twice", source, name);
    out.emplace(name, std::move(t));
    return ok_status();
  };
  for (const std::string& spec : specs) {
    const size_t eq = spec.find('=');
    const std::string name = eq == std::string::npos ? "" : spec.substr(0, eq);
    const std::string path = eq == std::string::npos ? spec : spec.substr(eq + 1);
    if (path.ends_with(".npz")) {
      if (!name.empty()) return invalid_argument_error("--input {}: an .npz names its arrays itself", spec);
      std::map<std::string, std::string> dtypes;
      TS_ASSIGN_OR_RETURN(cnn::WeightMap arrays, cnn::load_npz(path, &dtypes));
      for (auto& [key, t] : arrays) {
        note_conversion(fmt::format("{}:{}", path, key), dtypes[key], notes);
        TS_RETURN_IF_ERROR(put(key, std::move(t), path));
      }
      continue;
    }
    std::string dtype;
    TS_ASSIGN_OR_RETURN(Tensor t, cnn::load_npy(path, &dtype));
    note_conversion(path, dtype, notes);
    std::string target = name;
    for (size_t k = 0; target.empty() && k < declared.size(); ++k)
      if (!out.count(declared[k].name)) target = declared[k].name;
    if (target.empty())
      return invalid_argument_error("--input {}: more input files than the model's {} input(s) ({})", spec,
                                    declared.size(), names());
    TS_RETURN_IF_ERROR(put(target, std::move(t), path));
  }
  return out;
}

Status check_input_shape(const DeclaredInput& input, const Shape& shape, const std::string& source) {
  const auto& d = input.dims;
  std::vector<int64_t> got(shape.dims().begin(), shape.dims().end());
  bool ok = got.size() == d.size();
  for (size_t k = 1; ok && k < d.size(); ++k) ok = d[k] < 0 || d[k] == got[k];
  if (ok) return ok_status();
  return invalid_argument_error(
      "{}: shape {}, but the model's input '{}' is {} (only '?' dims and the leading batch dim may differ; --shape "
      "overrides the first input's)",
      source, dims_string(got), input.name, dims_string(d));
}

std::string output_file(const std::string& dir, const std::string& name) {
  std::string file = name;
  for (char& ch : file)
    if (!std::isalnum(static_cast<unsigned char>(ch)) && ch != '-' && ch != '_' && ch != '.') ch = '_';
  return (std::filesystem::path(dir) / (file + ".npy")).string();
}

Status write_outputs(const std::string& path, const std::string& dir, const std::vector<std::string>& names,
                     const std::vector<Tensor>& outputs) {
  if (!path.empty()) {
    if (path.ends_with(".npz")) {
      cnn::WeightMap arrays;
      for (size_t k = 0; k < names.size(); ++k) arrays.emplace(names[k], outputs[k]);
      TS_RETURN_IF_ERROR(cnn::save_npz(path, arrays));
    } else {
      if (outputs.size() != 1)
        return invalid_argument_error(
            "--output {}: the model has {} outputs; write them all with --output FILE.npz or --output-dir DIR", path,
            outputs.size());
      TS_RETURN_IF_ERROR(cnn::save_npy(path, outputs[0]));
    }
    std::printf("wrote %s\n", path.c_str());
  }
  if (!dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) return invalid_argument_error("--output-dir {}: {}", dir, ec.message());
    for (size_t k = 0; k < names.size(); ++k) {
      const std::string p = output_file(dir, names[k]);
      TS_RETURN_IF_ERROR(cnn::save_npy(p, outputs[k]));
      std::printf("wrote %s\n", p.c_str());
    }
  }
  return ok_status();
}

Status check_references(const std::string& reference, const std::vector<std::string>& names,
                        const std::vector<Tensor>& outputs, double threshold, const std::vector<bool>& integer) {
  cnn::WeightMap refs;
  if (std::filesystem::is_directory(reference)) {
    for (const std::string& name : names) {
      const std::string p = output_file(reference, name);
      if (!std::filesystem::exists(p))
        return invalid_argument_error("--reference {}: no {} for output '{}'", reference, p, name);
      TS_ASSIGN_OR_RETURN(Tensor t, cnn::load_npy(p));
      refs.emplace(name, std::move(t));
    }
  } else if (reference.ends_with(".npz")) {
    TS_ASSIGN_OR_RETURN(refs, cnn::load_npz(reference));
  } else {
    if (outputs.size() != 1)
      return invalid_argument_error(
          "--reference {}: the model has {} outputs; give an .npz with an array per output name, or a directory "
          "with NAME.npy per output",
          reference,
          outputs.size());
    TS_ASSIGN_OR_RETURN(Tensor t, cnn::load_npy(reference));
    refs.emplace(names[0], std::move(t));
  }
  Status first_failure = ok_status();
  for (size_t k = 0; k < names.size(); ++k) {
    const auto it = refs.find(names[k]);
    if (it == refs.end())
      return invalid_argument_error("--reference {}: no array for output '{}'", reference, names[k]);
    TS_ASSIGN_OR_RETURN(std::vector<float> want, it->second.to_vector());
    TS_ASSIGN_OR_RETURN(std::vector<float> got, outputs[k].to_vector());
    if (integer.size() > k && integer[k]) {  // indices, counts: exactly
      const bool same = want == got;
      std::printf("'%s' against %s: %zu integers, %s\n", names[k].c_str(), reference.c_str(), got.size(),
                  same ? "equal (pass)" : "DIFFERENT (FAIL)");
      if (!same && first_failure.ok())
        first_failure = failed_precondition_error("output '{}': integers differ from the reference", names[k]);
      continue;
    }
    if (want.size() != got.size())
      return invalid_argument_error("--reference {}: output '{}' has {} values, the reference {}", reference, names[k],
                                    got.size(), want.size());
    const cnn::PccResult p = cnn::comp_pcc(want, got, threshold);
    std::printf("PCC of '%s' against %s: %.6f (%s at %.3f)\n", names[k].c_str(), reference.c_str(), p.pcc,
                p.passed ? "pass" : "FAIL", threshold);
    if (!p.passed && first_failure.ok())
      first_failure = failed_precondition_error("output '{}': PCC {:.6f} is below {}", names[k], p.pcc, threshold);
  }
  return first_failure;
}

namespace {
std::string host_npy(const graph::HostTensor& t) {
  if (t.type == graph::ElemType::INT64) return cnn::npy_file_bytes("<i8", t.dims, t.i.data(), t.i.size() * 8);
  return cnn::npy_file_bytes("<f4", t.dims, t.f.data(), t.f.size() * 4);
}
}  // namespace

Status write_host_outputs(const std::string& path, const std::string& dir, const std::vector<std::string>& names,
                          const std::vector<graph::HostTensor>& outputs) {
  auto write = [](const std::string& p, const std::string& bytes) -> Status {
    std::ofstream out(p, std::ios::binary);
    if (!out || !out.write(bytes.data(), static_cast<std::streamsize>(bytes.size())))
      return invalid_argument_error("{}: cannot write the file", p);
    std::printf("wrote %s\n", p.c_str());
    return ok_status();
  };
  if (!path.empty()) {
    if (path.ends_with(".npz")) {
      std::map<std::string, std::string> files;
      for (size_t k = 0; k < names.size(); ++k) files[names[k]] = host_npy(outputs[k]);
      TS_RETURN_IF_ERROR(cnn::save_npz_files(path, files));
      std::printf("wrote %s\n", path.c_str());
    } else {
      if (outputs.size() != 1)
        return invalid_argument_error(
            "--output {}: the model has {} outputs; write them all with --output FILE.npz or --output-dir DIR", path,
            outputs.size());
      TS_RETURN_IF_ERROR(write(path, host_npy(outputs[0])));
    }
  }
  if (!dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) return invalid_argument_error("--output-dir {}: {}", dir, ec.message());
    for (size_t k = 0; k < names.size(); ++k)
      TS_RETURN_IF_ERROR(write(output_file(dir, names[k]), host_npy(outputs[k])));
  }
  return ok_status();
}

Status check_host_references(const std::string& reference, const std::vector<std::string>& names,
                             const std::vector<graph::HostTensor>& outputs, double threshold) {
  std::vector<Tensor> ts;
  std::vector<bool> integer;
  for (size_t k = 0; k < outputs.size(); ++k) {
    const graph::HostTensor& h = outputs[k];
    if (h.volume() == 0)
      return unimplemented_error(
          "--reference: output '{}' is empty ({}); references are checked on outputs with values", names[k],
          graph::dims_to_string(h.dims));
    std::vector<float> v(h.size());
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(h.at(i));
    std::vector<uint32_t> d(h.dims.begin(), h.dims.end());
    if (d.empty()) d.push_back(1);
    TS_ASSIGN_OR_RETURN(Tensor t, Tensor::from_vector(v, Shape(std::span<const uint32_t>(d)), DataType::FLOAT32));
    ts.push_back(std::move(t));
    integer.push_back(h.type == graph::ElemType::INT64);
  }
  return check_references(reference, names, ts, threshold, integer);
}

}  // namespace tessera::tools
