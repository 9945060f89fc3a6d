#include "mltool/train/gather.hpp"

#include <cstring>
#include <string>

#include "mltool/util/error.hpp"

#ifdef MLTOOL_HAVE_CUDA
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>

#include "mltool/cuda/gather_rows.hpp"
#endif

namespace mltool::train {
namespace {

void check_arguments(const torch::Tensor& matrix, const torch::Tensor& index, bool check_bounds) {
  if (matrix.dim() != 2)
    throw InputError("gather_rows: expected a 2-D matrix, got " + std::to_string(matrix.dim()) +
                     " dimensions");
  if (index.dim() != 1 || index.scalar_type() != torch::kInt64)
    throw InputError("gather_rows: expected a 1-D int64 index tensor");
  if (index.device() != matrix.device())
    throw InputError("gather_rows: index is on " + index.device().str() + " but the matrix is on " +
                     matrix.device().str());
  if (index.numel() == 0 || !check_bounds) return;
  // One reduction instead of a per-element check; on CUDA this is the only sync point.
  auto bounds = torch::stack({index.min(), index.max()}).cpu();
  const auto lo = bounds[0].item<std::int64_t>();
  const auto hi = bounds[1].item<std::int64_t>();
  if (lo < 0 || hi >= matrix.size(0))
    throw InputError("gather_rows: index out of range: [" + std::to_string(lo) + ", " +
                     std::to_string(hi) + "] for a matrix of " + std::to_string(matrix.size(0)) +
                     " rows");
}

torch::Tensor gather_cpu(const torch::Tensor& src, const torch::Tensor& index) {
  const auto n = index.size(0);
  auto out = torch::empty({n, src.size(1)}, src.options());
  const auto row_bytes = static_cast<std::size_t>(src.size(1) * src.element_size());
  const auto* from = static_cast<const char*>(src.data_ptr());
  auto* to = static_cast<char*>(out.data_ptr());
  const auto* idx = index.data_ptr<std::int64_t>();
  for (std::int64_t i = 0; i < n; ++i)
    std::memcpy(to + i * row_bytes, from + idx[i] * row_bytes, row_bytes);
  return out;
}

#ifdef MLTOOL_HAVE_CUDA
torch::Tensor gather_cuda(const torch::Tensor& src, const torch::Tensor& index) {
  const c10::cuda::CUDAGuard guard(src.device());
  auto out = torch::empty({index.size(0), src.size(1)}, src.options());
  const int rc = cuda::launch_gather_rows(
      src.data_ptr(), index.data_ptr<std::int64_t>(), out.data_ptr(), index.size(0),
      src.size(1) * src.element_size(), c10::cuda::getCurrentCUDAStream().stream());
  if (rc != 0)
    throw ResourceError(std::string("gather_rows: CUDA kernel launch failed: ") +
                        cudaGetErrorString(static_cast<cudaError_t>(rc)));
  return out;
}
#endif

}  // namespace

torch::Tensor gather_rows(const torch::Tensor& matrix, const torch::Tensor& index,
                          bool check_bounds) {
  check_arguments(matrix, index, check_bounds);
  const auto src = matrix.contiguous();
  const auto idx = index.contiguous();
#ifdef MLTOOL_HAVE_CUDA
  if (src.is_cuda()) return gather_cuda(src, idx);
#endif
  if (!src.device().is_cpu())
    throw ResourceError("gather_rows: this build has no kernel for device " + src.device().str());
  return gather_cpu(src, idx);
}

bool built_with_cuda_kernels() noexcept {
#ifdef MLTOOL_HAVE_CUDA
  return true;
#else
  return false;
#endif
}

}  // namespace mltool::train
