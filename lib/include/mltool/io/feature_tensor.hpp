// A feature store as a torch::Tensor, without needless copies: on the CPU the tensor
// aliases the memory map of features.npy (no copy at all); on a GPU the rows cross the
// bus once, straight from the map into device memory.
#pragma once

#include <torch/types.h>

#include "mltool/io/feature_store.hpp"

namespace mltool::io {

/// The store's (rows × dims) matrix in its stored dtype (float32 or float16).
/// CPU: a zero-copy view that keeps the mapping alive for as long as the tensor lives; it
/// is backed by read-only memory — clone() before writing to it.
/// Other devices: one host→device copy. A device that cannot hold the matrix gets a
/// ResourceError saying how many bytes were needed.
torch::Tensor load_feature_tensor(const FeatureStore& store,
                                  const torch::Device& device = torch::kCPU);

}  // namespace mltool::io
