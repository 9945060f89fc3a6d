#include "export.hpp"

#include <caffe2/serialize/inline_container.h>
#include <torch/csrc/jit/serialization/export.h>
#include <torch/csrc/jit/serialization/pickler.h>
#include <torch/torch.h>

#include <cstdio>

#include "mltool/train/safetensors.hpp"
#include "mltool/util/error.hpp"
#include "mltool/util/file.hpp"
#include "task.hpp"

namespace mltool::train {
namespace {

// torch's dtypes and safetensors' names for them, one table both ways.
constexpr std::pair<torch::ScalarType, const char*> kSafetensorsDtypes[] = {
    {torch::kFloat32, "F32"}, {torch::kFloat16, "F16"}, {torch::kBFloat16, "BF16"},
    {torch::kFloat64, "F64"}, {torch::kInt64, "I64"},   {torch::kInt32, "I32"},
    {torch::kUInt8, "U8"},    {torch::kBool, "BOOL"}};

const char* safetensors_dtype(torch::ScalarType t) {
  for (const auto& [type, name] : kSafetensorsDtypes)
    if (type == t) return name;
  throw UsageError(std::string("safetensors: no dtype for ") + c10::toString(t));
}

torch::ScalarType tensor_dtype(const std::string& name, const std::string& where) {
  for (const auto& [type, known] : kSafetensorsDtypes)
    if (name == known) return type;
  throw FormatError(at_file(where, "unsupported safetensors dtype " + name));
}

}  // namespace

// The state dict, in module order: parameters and buffers of each module, recursively. A
// TorchScript model's one block, "script", is no prefix: its names are the module's own.
std::vector<std::pair<std::string, torch::Tensor>> state_dict(BlockModel& model) {
  const bool script = model.size() == 1 && model.names()[0] == "script";
  const auto name = [&](const std::string& key) { return script ? key.substr(7) : key; };
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (const auto& item : model.named_parameters(true))
    out.emplace_back(name(item.key()), item.value().detach());
  for (const auto& item : model.named_buffers(true))
    out.emplace_back(name(item.key()), item.value());
  return out;
}

void import_safetensors(BlockModel& model, const std::string& path) {
  const SafetensorsFile file = read_safetensors(path);
  torch::NoGradGuard no_grad;
  for (auto& [name, target] : state_dict(model)) {
    const auto it = file.tensors.find(name);
    if (it == file.tensors.end())
      throw FormatError(at_file(path, "no tensor " + name + " (the run's model has it)"));
    const SafetensorsEntry& e = it->second;
    auto t = torch::from_blob(const_cast<void*>(e.data), e.shape, tensor_dtype(e.dtype, path));
    if (t.sizes() != target.sizes() || t.nbytes() != e.bytes)
      throw FormatError(at_file(path, name + ": shape differs from the run's model"));
    target.copy_(t);
  }
}

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n\r") == std::string::npos) return s;
  std::string out = "\"";
  for (const char c : s) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

std::string exact_float(float v) {
  char text[32];
  std::snprintf(text, sizeof text, "%.9g", static_cast<double>(v));  // round-trips float32
  return text;
}

void export_safetensors(BlockModel& model, const std::string& path,
                        const std::map<std::string, std::string>& metadata) {
  std::vector<torch::Tensor> keep;  // CPU copies live until written
  std::vector<SafetensorsEntry> entries;
  for (const auto& [name, tensor] : state_dict(model)) {
    keep.push_back(tensor.to(torch::kCPU).contiguous());
    const auto& t = keep.back();
    entries.push_back(
        {name, safetensors_dtype(t.scalar_type()), t.sizes().vec(), t.data_ptr(), t.nbytes()});
  }
  write_safetensors(path, entries, metadata);
}

void export_state_dict(BlockModel& model, const std::string& path) {
  c10::Dict<std::string, torch::Tensor> dict;
  for (const auto& [name, tensor] : state_dict(model))
    dict.insert(name, tensor.to(torch::kCPU).contiguous());
  // torch::pickle_save tags the dict with its type (torch.jit._pickle.restore_type_tag),
  // which torch.load's weights_only unpickler refuses; untagged, it is a plain dict.
  std::vector<char> pickle;
  torch::jit::Pickler pickler(
      [&](const char* data, std::size_t size) { pickle.insert(pickle.end(), data, data + size); },
      nullptr, nullptr, nullptr, nullptr, /*tag_aggregates=*/false);
  pickler.protocol();
  pickler.pushIValue(c10::IValue(dict));
  pickler.stop();
  util::AtomicFile file(path);
  {
    caffe2::serialize::PyTorchStreamWriter writer(
        [&](const void* data, std::size_t size) -> std::size_t {
          file.write(data, size);
          return size;
        });
    torch::jit::writeArchiveAndTensors("data", pickle.data(), pickle.size(), pickler.tensorData(),
                                       writer);
    writer.writeEndOfFile();
  }
  file.commit();
}

void write_predictions(const std::string& path, const SplitSamples& samples,
                       const torch::Tensor& outputs, const Task& task) {
  const auto o = outputs.to(torch::kCPU, torch::kFloat32).contiguous();
  const auto k = o.size(1);
  const float* v = o.data_ptr<float>();
  std::string out = "record,sample," + task.csv_header() + "\n";
  for (std::size_t i = 0; i < samples.size(); ++i)
    out += std::to_string(i) + "," +
           (samples.ids.empty() ? std::to_string(samples.rows[i]) : csv_field(samples.ids[i])) +
           "," + task.csv_row(samples, i, v + static_cast<std::int64_t>(i) * k) + "\n";
  util::write_file_atomic(path, out);
}

}  // namespace mltool::train
