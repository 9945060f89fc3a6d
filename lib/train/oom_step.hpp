// A training step that survives an out-of-memory error (docs/memory-modes.md#out-of-memory):
// caught before the optimizer step, the gradients zeroed, dropout's generators and batch norm's
// buffers put back, and the same step redone with twice the micro-batches (their gradient is
// the whole batch's), kept for the rest of the run; micro-batches of one sample that still do
// not fit fall back to sections of one block each. Internal to lib/train.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <functional>

#include "loop.hpp"

namespace mltool::train {

/// `attempt()` (one step's forward and backward over `samples` samples, returning its loss)
/// redone as the header says until it fits; each change is logged once, written to
/// metrics.jsonl (event "oom") and kept in `state` (checkpoints carry it to --resume). Under
/// --no-oom-retry or data parallel the error goes up as it came. ResourceError when nothing
/// smaller is left, naming the step, what was tried and the free memory. MLTOOL_DEBUG_OOM
/// listing the step's 0-based number makes its first attempt throw after its backward.
torch::Tensor with_oom_retry(Loop& loop, LoopState& state, std::int64_t samples,
                             const std::function<torch::Tensor()>& attempt);

}  // namespace mltool::train
