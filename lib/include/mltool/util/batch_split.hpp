// Out-of-memory recovery of extract's and predict's batches (docs/memory-modes.md#out-of-
// memory): a batch whose forward runs out of memory is computed again in pieces of half the
// size, down to one tile; the batches after it keep the size that worked for kRetryFullAfter
// batches, then try the configured size again. What each batch was computed with depends only on
// the split events recorded so far (batch number → piece size), never on timing, so a resumed run
// that replays them computes every row as the uninterrupted run did.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace mltool::util {

/// Batches computed at a reduced size after an out-of-memory error before the configured size
/// is tried again.
inline constexpr std::int64_t kRetryFullAfter = 16;

/// How one batch was computed in pieces: of `size` tiles (the last one smaller); `oom` when an
/// out-of-memory error of this batch made it so (else it kept an earlier batch's size).
struct BatchSplit {
  std::uint64_t batch = 0;  ///< the batch's number counted from row 0 of the store
  std::int64_t size = 0;
  bool oom = false;
  nlohmann::json to_json() const;
  /// FormatError naming `where` for an entry that is not one.
  static BatchSplit from_json(const nlohmann::json& j, const std::string& where);
};

class BatchSplitter {
 public:
  /// `full`: --batch; `retry` false (--no-oom-retry): an out-of-memory error is rethrown.
  /// `recorded`: the splits of an earlier (killed) run of these batches, replayed as they were.
  /// `seam` false: MLTOOL_DEBUG_OOM does not apply (its numbers count other work).
  BatchSplitter(std::int64_t full, bool retry, std::map<std::uint64_t, BatchSplit> recorded,
                bool seam = true);

  /// Puts the size rule where it was after batch `batch` when the batches before it (this run's:
  /// `earlier`, in order) were computed as recorded: what a resumed run starts from.
  void replay(const std::vector<std::uint64_t>& earlier);

  /// `run` of `input` (the tiles of batch `batch`, on `device`) as the size rule says: run over
  /// pieces of the rows, their outputs joined; split on an out-of-memory error (after the
  /// allocator's cache is emptied). `split` gets how, when in pieces. ResourceError when one
  /// tile does not fit, naming `model` (the model and its input size) and the free memory.
  /// MLTOOL_DEBUG_OOM listing `batch` makes its first attempt throw after its first piece.
  torch::Tensor forward(const torch::Tensor& input, std::uint64_t batch,
                        const std::function<torch::Tensor(const torch::Tensor&)>& run,
                        const torch::Device& device, const std::string& model,
                        std::optional<BatchSplit>& split);

 private:
  std::int64_t piece_for(std::uint64_t batch, std::int64_t rows, bool& replayed, bool& oom);
  void advance(std::int64_t piece, bool oom);

  const std::int64_t full_;
  const bool retry_;
  const bool seam_;
  const std::map<std::uint64_t, BatchSplit> recorded_;
  std::mutex mutex_;
  std::int64_t size_;        // the piece size of the next batch
  std::int64_t streak_ = 0;  // batches done at the reduced size since the last error
};

}  // namespace mltool::util
