// What a second forward pass over the same samples needs to be the first one again: the
// generators dropout draws from, and the buffers (batch norm's running statistics) a train-mode
// forward moves. Used by the memory modes that recompute (sections; micro-batches of a loss
// over the whole step). Internal to lib/train.
#pragma once

#include <torch/types.h>

#include <cstddef>
#include <utility>
#include <vector>

#include "mltool/train/models.hpp"

namespace mltool::train {

/// The generators dropout draws from: the CPU's, and the device's on CUDA.
struct RngState {
  torch::Tensor cpu, cuda;
};
RngState save_rng(const torch::Device& device);
void restore_rng(const RngState& s, const torch::Device& device);

/// The buffers of parts [begin, end) (BlockModel::part_count; all of them: 0 to part_count()),
/// each with a copy, to be put back after a recompute so they move once per step.
using BufferSnapshot = std::vector<std::pair<torch::Tensor, torch::Tensor>>;
BufferSnapshot snapshot_buffers(BlockModel& model, std::size_t begin, std::size_t end);
void restore_buffers(const BufferSnapshot& saved);

}  // namespace mltool::train
