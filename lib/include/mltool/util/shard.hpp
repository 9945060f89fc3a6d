// `--shard I/N`: the part of a list one of N machines takes (tile: of the slide list; extract:
// of a tile store's complete slides). Parsed, taken from a scheduler's environment
// (`--shard auto`) and applied here only, so every command reads and words it alike.
// The one home of the schedulers' and launchers' environment variables: job arrays (Slurm,
// Kubernetes) for --shard auto and --fold auto, and torchrun's rendezvous for train.
#pragma once

#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "mltool/util/options.hpp"

namespace mltool::util {

/// Shard `index` of `count` (0 <= index < count); {0, 1} is the whole list.
struct Shard {
  std::size_t index = 0;
  std::size_t count = 1;

  bool whole() const { return count == 1; }
  /// "I/N".
  std::string text() const;
  /// Whether item `position` of the list belongs to this shard.
  bool takes(std::size_t position) const { return position % count == index; }
};

/// Parses "I/N" (0 <= I < N); "" is the whole list. UsageError naming --shard otherwise.
Shard parse_shard(const std::string& text);

/// Looks up an environment variable (nullptr: unset); std::getenv unless a test gives another.
using Environment = std::function<const char*(const char*)>;
const char* process_environment(const char* name);

/// Resolves --shard: "I/N", "" (the whole list) or "auto", the index of this task in a job
/// array:
/// - Slurm: SLURM_ARRAY_TASK_ID; without `shards`, index (ID-MIN)/STEP of (MAX-MIN)/STEP+1
///   (SLURM_ARRAY_TASK_MIN/MAX/STEP), so --array=0-7:2 is 4 shards; with `shards` (--shards
///   N) the index is the task id itself, so a re-submitted --array=3 is still shard 3/N.
/// - Kubernetes indexed Jobs: JOB_COMPLETION_INDEX, with `shards` required.
/// `shards` 0: not given. Given with "I/N", it must equal N. UsageError naming the options and
/// variables otherwise.
Shard resolve_shard(const std::string& text, std::size_t shards,
                    const Environment& env = process_environment);

/// The array index alone (train --fold auto: fold I of a dataset's K, which the caller checks):
/// SLURM_ARRAY_TASK_ID or JOB_COMPLETION_INDEX. `what` names the option in the UsageError when
/// neither is set.
std::size_t array_index(const std::string& what, const Environment& env = process_environment);

/// Whether `text` is something resolve_shard takes ("", "auto" or "I/N"), for option checks.
bool shard_syntax_ok(const std::string& text);

/// The --shards option of a command that has --shard.
template <class Job>
Option<Job> shards_option(std::size_t Job::*member) {
  return option("--shards", member,
                "With --shard auto: the number of shards N (then the array task id is the "
                "index: re-submitting task 3 stays shard 3/N); needed for Kubernetes");
}

/// The take of shard `shard` of `items`: positions I, I+N, I+2N, ...
template <class T>
std::vector<T> take_shard(const std::vector<T>& items, const Shard& shard) {
  std::vector<T> out;
  for (std::size_t i = shard.index; i < items.size(); i += shard.count) out.push_back(items[i]);
  return out;
}

/// A data parallel launcher's rendezvous (torchrun; srun with docs/cluster.md's script):
/// RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT.
struct Rendezvous {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  std::string master_addr;  ///< empty: MASTER_ADDR is not set
  int master_port = 0;
};

/// The rendezvous in the environment: nothing unless RANK and WORLD_SIZE are set. UsageError
/// naming the variable for a value that is not a non-negative integer, or a missing
/// MASTER_PORT.
std::optional<Rendezvous> launcher_rendezvous(const Environment& env = process_environment);

}  // namespace mltool::util
