// Shards for `mltool pack`: the records of one split dealt into N shard files so that
// every shard has the same size and the same label mix, up to one record. tf.data's
// interleave reads shards uniformly, not by size, so unequal shards would over-sample
// the records of small ones and skew the label mix a training run sees.
#pragma once

#include <cstdint>
#include <vector>

namespace mltool::records {

/// The shard (0..shards-1) of each record of one split, given the records' label ids.
///
/// Algorithm: the records are ordered by label id and, within a label, shuffled with
/// `seed`; this sequence is then dealt round-robin: its i-th record goes to shard
/// i mod shards (one cursor for the whole sequence, not restarted per label).
///
/// Guarantees, for M records and N shards:
/// - every record is in exactly one shard;
/// - shard sizes differ by at most one: shard j gets ceil((M − j) / N) records, i.e.
///   the first M mod N shards get floor(M/N) + 1, the others floor(M/N);
/// - for each label, its counts in the shards differ by at most one: the label's M_l
///   records are a contiguous run of the dealt sequence, and any run of M_l
///   consecutive positions of a round-robin visits each shard floor(M_l/N) or
///   ceil(M_l/N) times (the run is floor(M_l/N) full turns plus M_l mod N positions
///   on distinct shards). So every shard's label mix is as close to the split's as
///   whole records allow;
/// - the result depends only on the labels (in record order), N and the seed; the seed
///   only decides which record of a label goes where, never the counts.
/// N > M is allowed: shards M..N−1 are then empty (an empty TFRecord file is valid).
/// Throws UsageError if shards is 0.
std::vector<std::uint32_t> assign_shards(const std::vector<std::uint32_t>& labels,
                                         std::uint32_t shards, std::uint64_t seed);

/// The records of each shard (indexes into the assign_shards input) in a seeded random
/// order, for writing: assign_shards deals by label, so records in index order would
/// come label by label. members[j] lists shard j's records. UsageError if a shard id
/// is >= shards.
std::vector<std::vector<std::uint64_t>> shard_members(const std::vector<std::uint32_t>& shard_of,
                                                      std::uint32_t shards, std::uint64_t seed);

}  // namespace mltool::records
