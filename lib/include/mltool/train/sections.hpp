// Sectioned training (--sections K, docs/train.md#memory-modes): the model's parts (its blocks,
// a residual stage's units each; BlockModel::part_count) are cut into K contiguous sections; the
// forward pass keeps only each section's input (no autograd graph), and the backward pass
// recomputes one section at a time, last first, with the dropout masks of the forward (the
// generators rewound to the section's start) and the batch norm running statistics updated once
// (restored after the recompute).
#pragma once

#include <torch/types.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "mltool/train/models.hpp"
#include "mltool/train/step.hpp"

namespace mltool::train {

/// Per part (BlockModel::part_count), the elements of its output for `probe`, in eval mode
/// without gradients (no batch norm update, no random draw); the model is back in train mode
/// after.
std::vector<std::int64_t> part_output_sizes(BlockModel& model, const Activation& probe);

/// The bounds of `k` contiguous non-empty sections of parts whose `sizes` are given: k + 1
/// indices from 0 to sizes.size(), chosen so the largest sum of sizes in a section is as small
/// as it can be (ties: the earliest bounds). 1 <= k <= sizes.size().
std::vector<std::size_t> balance_sections(const std::vector<std::int64_t>& sizes, std::size_t k);

/// The bounds, by block, of the sections that start at the blocks named `starts` (a spec's
/// "sections"; BlockModel::first_part turns them into part bounds): FormatError naming
/// `where` and the entry for a name that is not a block, the first block, or not after the
/// one before.
std::vector<std::size_t> named_sections(const std::vector<std::string>& blocks,
                                        const std::vector<std::string>& starts,
                                        const std::string& where);

/// Forward and backward of the batch `in` (targets `y`, the loss of the whole batch under
/// `loss`) section by section (`bounds`: part indices, as balance_sections gives);
/// the gradients accumulate into the parameters' .grad and equal a plain step's. Returns the
/// loss, detached. `activation_bytes`, when given, gets the tracked activation peak: the
/// saved section inputs plus the largest section's block outputs. `offload`: on CUDA, the
/// saved section inputs wait in pinned host memory (copied out on a side of the forward,
/// back before their section's recompute) and are not counted; nothing on the CPU.
torch::Tensor accumulate_gradients_sectioned(BlockModel& model, const Activation& in,
                                             const torch::Tensor& y, const StepLoss& loss,
                                             const std::vector<std::size_t>& bounds,
                                             std::int64_t* activation_bytes = nullptr,
                                             bool offload = false);

/// The names of each section of `bounds` (BlockModel::names_of_parts: whole blocks by name,
/// pieces of one by their parts' names, "stage1.0"); one section of all blocks if it is
/// empty.
std::vector<std::vector<std::string>> section_blocks(const BlockModel& model,
                                                     const std::vector<std::size_t>& bounds);

}  // namespace mltool::train
