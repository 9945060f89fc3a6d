// Out-of-memory errors of the LibTorch half of the library, recognised and recovered from:
// extract, predict and train split the work that ran out and retry (docs/memory-modes.md#out-
// of-memory). Also the test seam MLTOOL_DEBUG_OOM (docs/development.md#out-of-memory-seam): a
// comma list of batch (extract, predict) or step (train) numbers whose first attempt throws
// the c10::OutOfMemoryError a GPU throws, so the CPU can test the recovery.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <exception>
#include <string>

namespace mltool::util {

/// Whether `e` is a device (CUDA) or host allocator out-of-memory error: c10::OutOfMemoryError,
/// or a LibTorch/TorchScript error whose message says the allocation failed (a TorchScript
/// forward may rethrow it as a plain c10::Error).
bool is_out_of_memory(const std::exception& e);

/// Frees what an out-of-memory error leaves behind: waits for `device`'s work and empties the
/// CUDA caching allocator's cache (nothing to do on the CPU).
void release_cached_memory(const torch::Device& device);

/// Whether MLTOOL_DEBUG_OOM lists `number` (read once per process; unset: never).
/// FormatError for a value that is not a comma list of non-negative integers.
bool debug_oom_listed(std::uint64_t number);

/// Throws the c10::OutOfMemoryError of the seam, naming `what` ("batch 5").
[[noreturn]] void throw_debug_oom(const std::string& what);

/// "1.2 GiB free on cuda:0": the free memory of `device`, for an error message.
std::string free_memory_text(const torch::Device& device);

}  // namespace mltool::util
