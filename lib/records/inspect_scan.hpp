// Internal to `mltool inspect` (inspect.cpp, inspect_scan.cpp): reading the shards.
//
// Two passes, both parallel. The first walks each shard's frame headers (length CRCs only,
// and under deep each DALI index line against the frame it names) to count records and to
// mark chunk starts about every 4 MiB. Counts give each group's round-robin schedule. The
// second reads the chunks of all shards on all threads: frames (data CRCs under deep),
// records (ExampleScanner), labels, and the label mix of every decile of the interleaved
// epoch, in O(1) per record, never holding per-record state.
#pragma once

#include <array>
#include <cstdint>
#include <cstring>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "mltool/records/inspect.hpp"
#include "mltool/records/record.hpp"
#include "mltool/util/endian.hpp"
#include "mltool/util/file.hpp"

namespace mltool::records::detail {

struct ShardSource {
  std::string path;   ///< opened, and named in messages
  std::string index;  ///< DALI index to verify under deep ("" for none)
};

/// Count, sum, mean and sum of squared deviations of values, added one at a time (Welford) and
/// merged (Chan et al.), so chunks read in parallel combine without cancellation.
struct Moments {
  std::uint64_t count = 0;
  double sum = 0, mean = 0, m2 = 0;
  void add(double x) {
    ++count;
    sum += x;
    const double d = x - mean;
    mean += d / static_cast<double>(count);
    m2 += d * (x - mean);
  }
  void merge(const Moments& o) {
    if (o.count == 0) return;
    const double n = static_cast<double>(count), m = static_cast<double>(o.count);
    const double d = o.mean - mean;
    mean += d * m / (n + m);
    m2 += o.m2 + d * d * n * m / (n + m);
    count += o.count;
    sum += o.sum;
  }
};

struct ScanSpec {
  std::vector<ShardSource> shards;
  std::vector<std::size_t> group_of;  ///< shard -> group, groups numbered from 0
  std::size_t groups = 0;
  std::string label_feature = kLabelFeature;
  /// Datasets of regression or survival: no label is read, but each record's outcome
  /// (outcome_features: a finite target; a time > 0 and an event 0 or 1), summarized by the
  /// target, or the event, in ShardCounts::outcome.
  PackTask task = PackTask::classification;
  /// Datasets: labels are int64 ids below this count. Files: unset (int64 or bytes values).
  std::optional<std::size_t> label_ids;
  bool deep = false;
  // Datasets under deep:
  std::vector<RecordFeature> record_features;
  std::uint64_t rows = 0;                   ///< rows of the feature store
  std::vector<std::uint64_t> invalid_rows;  ///< sorted
  int threads = 0;
};

struct ShardCounts {
  std::uint64_t records = 0;
  std::uint64_t bytes = 0;
  std::vector<std::uint64_t> histogram;  ///< by final label id
  std::uint64_t unlabeled = 0;
  Moments outcome;  ///< regression: of the targets; survival: of the events (0, 1)
};

struct ScanResult {
  std::vector<std::string> labels;  ///< names by id (datasets: empty, the caller has them)
  std::vector<ShardCounts> shards;
  std::vector<RoundRobin> schedules;                                            ///< per group
  std::vector<std::array<std::vector<std::uint64_t>, kDeciles>> decile_labels;  ///< per group
};

/// What the first pass found in one shard.
struct Framing {
  std::shared_ptr<util::MappedFile> map;
  std::uint64_t records = 0;
  std::vector<std::pair<std::uint64_t, std::uint64_t>> starts;  // (record, byte) of chunks
  std::exception_ptr error;        // framing, or the file cannot be read
  std::exception_ptr index_error;  // deep: the DALI index disagrees with the frames
};

/// The first pass over one shard: counts its frames and marks chunk starts (lengths only: the
/// second pass checks every frame from the start of its chunk); under `deep` compares every
/// line of the shard's DALI index with the frames. Problems are kept in the result, not thrown.
Framing walk_frames(const ShardSource& shard, bool deep);

/// Reads every shard; throws the first problem (see inspect()).
ScanResult scan_shards(const ScanSpec& spec);

}  // namespace mltool::records::detail
