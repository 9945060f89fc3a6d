// Gathering mini-batch rows by index from a matrix that already lives on the device
// (the pinned feed, docs/memory-modes.md: the dataset goes to the GPU once and batches are cut
// there, so no mini-batch crosses the PCIe bus).
#pragma once

#include <torch/types.h>

namespace mltool::train {

/// Returns `matrix[index]` as a new contiguous (index.size(0) × D) tensor on the matrix's
/// device. `matrix` is a 2-D float32/float16 tensor; `index` a 1-D int64 tensor on the same
/// device. On CUDA this runs mltool's own gather kernel; elsewhere a CPU loop. Out-of-range
/// indices throw mltool::InputError (checked before any kernel runs). `check_bounds` false
/// skips that check, and with it the one host–device synchronization of the call: for
/// indices the caller validated already (the training feeds check every row once).
torch::Tensor gather_rows(const torch::Tensor& matrix, const torch::Tensor& index,
                          bool check_bounds = true);

/// True when this build compiled mltool's CUDA kernels (nvcc was found at build time).
bool built_with_cuda_kernels() noexcept;

}  // namespace mltool::train
