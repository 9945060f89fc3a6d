#include "mltool/train/safetensors.hpp"

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>

#include "mltool/util/error.hpp"
#include "mltool/util/file.hpp"

namespace mltool::train {
namespace {

std::size_t dtype_size(const std::string& dtype) {
  static const std::map<std::string, std::size_t> sizes = {
      {"F64", 8}, {"F32", 4}, {"F16", 2}, {"BF16", 2}, {"I64", 8},
      {"I32", 4}, {"I16", 2}, {"I8", 1},  {"U8", 1},   {"BOOL", 1}};
  const auto it = sizes.find(dtype);
  if (it == sizes.end()) throw UsageError("safetensors: unknown dtype '" + dtype + "'");
  return it->second;
}

}  // namespace

std::string safetensors_bytes(const std::vector<SafetensorsEntry>& tensors,
                              const std::map<std::string, std::string>& metadata) {
  std::vector<const SafetensorsEntry*> sorted;
  for (const auto& t : tensors) sorted.push_back(&t);
  std::sort(sorted.begin(), sorted.end(),
            [](const auto* a, const auto* b) { return a->name < b->name; });
  nlohmann::json header = nlohmann::json::object();
  std::uint64_t offset = 0;
  for (std::size_t i = 0; i < sorted.size(); ++i) {
    const auto& t = *sorted[i];
    if (t.name.empty() || t.name.rfind("__", 0) == 0)
      throw UsageError("safetensors: invalid tensor name '" + t.name + "'");
    if (i > 0 && sorted[i - 1]->name == t.name)
      throw UsageError("safetensors: tensor '" + t.name + "' given twice");
    std::uint64_t elements = 1;
    for (const auto d : t.shape) {
      if (d < 0) throw UsageError("safetensors: '" + t.name + "' has a negative dimension");
      elements *= static_cast<std::uint64_t>(d);
    }
    if (elements * dtype_size(t.dtype) != t.bytes)
      throw UsageError("safetensors: '" + t.name + "' has " + std::to_string(t.bytes) +
                       " bytes, its shape and dtype need " +
                       std::to_string(elements * dtype_size(t.dtype)));
    header[t.name] = {
        {"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {offset, offset + t.bytes}}};
    offset += t.bytes;
  }
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // the data starts 8-byte aligned
  std::string out;
  out.reserve(8 + text.size() + offset);
  const std::uint64_t n = text.size();
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((n >> (8 * i)) & 0xFF));
  out += text;
  for (const auto* t : sorted) out.append(static_cast<const char*>(t->data), t->bytes);
  return out;
}

void write_safetensors(const std::string& path, const std::vector<SafetensorsEntry>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  util::write_file_atomic(path, safetensors_bytes(tensors, metadata));
}

SafetensorsFile read_safetensors(const std::string& path) {
  if (!util::exists(path)) throw InputError(at_file(path, "missing"));
  SafetensorsFile file;
  file.bytes = std::make_shared<const std::string>(util::read_file(path));
  const std::string& data = *file.bytes;
  std::uint64_t n = 0;
  if (data.size() < 8) throw FormatError(at_file(path, "too short for safetensors"));
  std::memcpy(&n, data.data(), 8);
  if (n > data.size() - 8) throw FormatError(at_file(path, "header past the end of the file"));
  const auto header = nlohmann::json::parse(data.substr(8, n), nullptr, false);
  if (!header.is_object()) throw FormatError(at_file(path, "header is not a JSON object"));
  for (const auto& [name, h] : header.items()) {
    if (name == "__metadata__") continue;
    const auto offsets = h.at("data_offsets").get<std::vector<std::uint64_t>>();
    if (offsets.size() != 2 || offsets[1] < offsets[0] || 8 + n + offsets[1] > data.size())
      throw FormatError(at_file(path, name + ": data_offsets outside the file"));
    file.tensors[name] = {name, h.at("dtype").get<std::string>(),
                          h.at("shape").get<std::vector<std::int64_t>>(),
                          data.data() + 8 + n + offsets[0], offsets[1] - offsets[0]};
  }
  return file;
}

}  // namespace mltool::train
