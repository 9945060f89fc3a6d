// Launchers of the row-gather kernel (lib/cuda/gather_rows.cu), callable from plain C++: no
// torch in .cu files, so nvcc never compiles LibTorch headers. train/'s pinned feed uses them.
#pragma once

#include <cstdint>

namespace mltool::cuda {

/// dst[i, :] = src[index[i], :] for i < n; rows of `row_bytes` bytes, all pointers on the
/// device, launched on `stream` (a cudaStream_t). Returns a cudaError_t as int.
int launch_gather_rows(const void* src, const std::int64_t* index, void* dst, std::int64_t n,
                       std::int64_t row_bytes, void* stream);

}  // namespace mltool::cuda
