// Splitting batches on out-of-memory errors (batch_split.hpp).
#include "mltool/util/batch_split.hpp"

#include <torch/torch.h>

#include <algorithm>
#include <vector>

#include "mltool/util/error.hpp"
#include "mltool/util/log.hpp"
#include "mltool/util/oom.hpp"

namespace mltool::util {

using json = nlohmann::json;

json BatchSplit::to_json() const { return {{"batch", batch}, {"size", size}, {"oom", oom}}; }

BatchSplit BatchSplit::from_json(const json& j, const std::string& where) {
  try {
    BatchSplit s;
    s.batch = j.at("batch").get<std::uint64_t>();
    s.size = j.at("size").get<std::int64_t>();
    s.oom = j.at("oom").get<bool>();
    if (s.size < 1) throw FormatError(at_file(where, "a split batch of pieces of size < 1"));
    return s;
  } catch (const json::exception& e) {
    throw FormatError(at_file(where, std::string("split batch record: ") + e.what()));
  }
}

BatchSplitter::BatchSplitter(std::int64_t full, bool retry,
                             std::map<std::uint64_t, BatchSplit> recorded, bool seam)
    : full_(full), retry_(retry), seam_(seam), recorded_(std::move(recorded)), size_(full) {}

void BatchSplitter::advance(std::int64_t piece, bool oom) {
  if (oom) {
    size_ = piece;
    streak_ = 0;
  } else if (size_ < full_ && ++streak_ >= kRetryFullAfter) {
    size_ = full_;
    streak_ = 0;
  }
}

void BatchSplitter::replay(const std::vector<std::uint64_t>& earlier) {
  const std::lock_guard lock(mutex_);
  for (const auto b : earlier) {
    const auto it = recorded_.find(b);
    if (it != recorded_.end())
      advance(it->second.size, it->second.oom);
    else
      advance(size_, false);
  }
}

// The piece size batch `batch` starts with: its recorded one (replayed), else the rule's.
std::int64_t BatchSplitter::piece_for(std::uint64_t batch, std::int64_t rows, bool& replayed,
                                      bool& oom) {
  const std::lock_guard lock(mutex_);
  const auto it = recorded_.find(batch);
  replayed = it != recorded_.end();
  oom = replayed && it->second.oom;
  return std::min(rows, replayed ? it->second.size : size_);
}

torch::Tensor BatchSplitter::forward(const torch::Tensor& input, std::uint64_t batch,
                                     const std::function<torch::Tensor(const torch::Tensor&)>& run,
                                     const torch::Device& device, const std::string& model,
                                     std::optional<BatchSplit>& split) {
  const std::int64_t rows = input.size(0);
  bool replayed = false, oom = false;
  std::int64_t piece = piece_for(batch, rows, replayed, oom);
  bool inject = seam_ && !replayed && util::debug_oom_listed(batch);
  for (;;) {
    try {
      std::vector<torch::Tensor> parts;
      for (std::int64_t begin = 0; begin < rows; begin += piece) {
        parts.push_back(run(input.narrow(0, begin, std::min(piece, rows - begin))));
        if (inject) util::throw_debug_oom("batch " + std::to_string(batch));
      }
      if (piece < rows) split = BatchSplit{batch, piece, oom};
      {
        const std::lock_guard lock(mutex_);
        advance(piece, oom);
      }
      return parts.size() == 1 ? parts.front() : torch::cat(parts);
    } catch (const std::exception& e) {
      if (!retry_ || !util::is_out_of_memory(e)) throw;
      inject = false;
      util::release_cached_memory(device);
      if (piece == 1)
        throw ResourceError("out of memory computing one tile of batch " + std::to_string(batch) +
                            " with " + model + " (" + util::free_memory_text(device) +
                            "); free the device, use a smaller model or input, or --device cpu");
      const std::int64_t half = (piece + 1) / 2;
      log::warn("out of memory in batch " + std::to_string(batch) + " (" + std::to_string(piece) +
                " tiles at a time): retrying it " + std::to_string(half) +
                (half == 1 ? " tile" : " tiles") + " at a time; later batches keep that size for " +
                std::to_string(kRetryFullAfter) + " batches, then try --batch " +
                std::to_string(full_) + " again");
      piece = half;
      oom = true;
    }
  }
}

}  // namespace mltool::util
