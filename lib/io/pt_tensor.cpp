#include "mltool/io/pt_tensor.hpp"

#include <torch/torch.h>

#include "mltool/util/error.hpp"

namespace mltool::io {

std::string encode_pt_tensor(const void* data, std::uint64_t rows, std::uint64_t dims,
                             DType dtype) {
  if (dtype != DType::float32 && dtype != DType::float16)
    throw UsageError("encode_pt_tensor: dtype must be float32 or float16");
  const auto type = dtype == DType::float16 ? torch::kHalf : torch::kFloat;
  // from_blob does not own the rows; pickle_save copies them into the archive.
  const auto tensor = torch::from_blob(
      const_cast<void*>(data), {static_cast<std::int64_t>(rows), static_cast<std::int64_t>(dims)},
      torch::TensorOptions().dtype(type));
  const std::vector<char> bytes = torch::pickle_save(tensor);
  return std::string(bytes.begin(), bytes.end());
}

}  // namespace mltool::io
