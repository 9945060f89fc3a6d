// --sections K planned for a run: the bounds balanced by what each block keeps for one
// sample of the run's data. Internal to lib/train (it needs the feeds' RowSource); the
// balancing itself is public, in mltool/train/sections.hpp.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <vector>

#include "dataset.hpp"
#include "feed.hpp"
#include "mltool/records/pack.hpp"
#include "mltool/train/models.hpp"

namespace mltool::train {

/// The bounds of `sections` sections (balance_sections) balanced by the output sizes of the
/// blocks for one sample — a row, a tile, or the training split's longest bag — so they do
/// not depend on the data; empty for 1 section.
std::vector<std::size_t> plan_sections(std::int64_t sections, BlockModel& model,
                                       const RowSource& source, const SplitSamples& train,
                                       records::PackUnit unit, const torch::Device& device);

}  // namespace mltool::train
