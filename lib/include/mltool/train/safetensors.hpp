// The safetensors format (https://github.com/huggingface/safetensors), written without
// LibTorch or the Rust library: 8 bytes little-endian N, then N bytes of JSON header
// {"NAME": {"dtype": "F32", "shape": [..], "data_offsets": [BEGIN, END]}, ...,
//  "__metadata__": {"key": "string", ...}}, padded with spaces to a multiple of 8, then the
// tensors' raw little-endian bytes, offsets relative to the end of the header. Tensors are
// laid out in name order, back to back.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace mltool::train {

/// One tensor to write: its bytes in C order, little-endian.
struct SafetensorsEntry {
  std::string name;
  std::string dtype;  ///< safetensors dtype: F32, F16, BF16, F64, I64, I32, I16, I8, U8, BOOL
  std::vector<std::int64_t> shape;
  const void* data = nullptr;
  std::size_t bytes = 0;  ///< must equal product(shape) × the dtype's size
};

/// The whole file's bytes. UsageError for an unknown dtype, a size that does not match the
/// shape, or a name used twice or starting with "__".
std::string safetensors_bytes(const std::vector<SafetensorsEntry>& tensors,
                              const std::map<std::string, std::string>& metadata = {});

/// Writes safetensors_bytes() to `path` atomically.
void write_safetensors(const std::string& path, const std::vector<SafetensorsEntry>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

/// A safetensors file read whole: its tensors by name, each `data` pointing into `bytes`
/// (which the entries must not outlive).
struct SafetensorsFile {
  std::shared_ptr<const std::string> bytes;
  std::map<std::string, SafetensorsEntry> tensors;
};

/// Reads `path`. InputError when it is missing; FormatError naming it for a file too short,
/// a header past its end or not a JSON object, and a tensor whose data_offsets leave the file.
SafetensorsFile read_safetensors(const std::string& path);

}  // namespace mltool::train
