// Splits for `mltool pack`: records are assigned to named splits (train/val/test) a
// whole group at a time, so no group (patient) is in two splits — leakage is
// impossible by construction, not checked after the fact — while split sizes and the
// label mix of each split stay as close to the requested fractions as the groups allow.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace mltool::records {

/// One requested split: a name (used in file names: letters, digits, '_' and '-') and
/// its share of the records.
struct SplitSpec {
  std::string name;
  double fraction = 0.0;
};

/// Throws UsageError unless there is at least one split, every name is non-empty,
/// made of [A-Za-z0-9_-] and unique, every fraction is finite and > 0, and (with
/// `check_sum`) the fractions sum to 1 within 1e-6.
void validate_splits(const std::vector<SplitSpec>& splits, bool check_sum = true);

/// Parses "train=0.8,val=0.1,test=0.1" (the `--split` syntax) and validates it
/// (validate_splits); UsageError naming the offending item.
std::vector<SplitSpec> parse_splits(std::string_view text, bool check_sum = true);

/// The name of fold `i`: "fold-I".
std::string fold_name(std::uint32_t i);

/// The splits of `k` folds beside `held_out` splits: the held-out ones first, then
/// "fold-0" .. "fold-{k-1}", each with the fraction (1 − Σ held-out) / k. UsageError unless
/// k >= 2, the held-out splits are valid names with fractions > 0 summing below 1
/// (1e-6 spare), and none is named like a fold. assign_splits over the result is k-fold
/// assignment: every group in exactly one fold or held-out split, folds as equal and as
/// alike in label (stratum) mix as the groups allow.
std::vector<SplitSpec> fold_splits(const std::vector<SplitSpec>& held_out, std::uint32_t k);

/// One record to place: the name of its group and its label id (from a LabelMap).
/// `group` is a view: the string must outlive the call.
struct SplitItem {
  std::string_view group;
  std::uint32_t label = 0;
};

/// The result of assign_splits; split indexes refer to the `splits` argument.
struct SplitAssignment {
  std::vector<std::string> groups;           ///< the distinct groups, sorted bytewise
  std::vector<std::uint32_t> group_split;    ///< group_split[g]: the split of groups[g]
  std::vector<std::uint32_t> record_split;   ///< record_split[i]: the split of items[i]
  std::vector<std::uint64_t> split_records;  ///< records per split
};

/// Assigns every group, and so every record, to one split.
///
/// Algorithm: each split s has a record target T_s = f_s·N and, for each label l, a
/// target T_sl = f_s·N_l (N records, N_l of label l). Groups are placed one at a time,
/// largest first — more precisely by decreasing size class floor(log2(size)), and
/// within a class in the order of a seeded hash of the group name — each into the
/// split that least increases the cost
///   Σ_s (n_s − T_s)² / max(T_s, 1) + Σ_s Σ_l (n_sl − T_sl)² / max(T_sl, 1)
/// (n_s, n_sl: records placed so far; ties go to the earlier split). Big groups go
/// first while every split still has room; the many small ones that follow even out
/// both the sizes and the label mix. The relative (chi-square) form keeps a 10% test
/// split and rare labels from being neglected next to a large train split.
///
/// Guarantees:
/// - every record gets a split and all records of one group get the same one;
/// - the result depends only on the multiset of (group, label) pairs, the splits and
///   the seed, not on the order of the items; it uses no implementation-defined
///   randomness (std::shuffle, std distributions), so standard libraries agree (a
///   compiler that fuses multiply-adds could still flip a near-tie of two costs);
/// - the seed only reorders groups within a size class, so big groups still go first;
///   when every size class holds a single group, every seed gives the same split.
/// Not guaranteed: exact fractions (impossible when groups are large or few: a group
/// larger than a split's target goes whole to one split) or a non-empty split (with
/// fewer groups than splits, or a tiny fraction, a split can get no records). The unit
/// tests measure that with many small groups sizes and label shares land within a
/// few records of their targets.
///
/// `label_class` (optional, indexed by label id) groups labels into coarser classes whose
/// counts per split join the cost as a third term, Σ_s Σ_c (n_sc − T_sc)² / max(T_sc, 1): pack
/// stratifies survival by event × time tertile and the event alone as the class, so even a
/// cohort too small to balance six strata gets its events spread over the folds. Empty: no
/// third term (classification).
///
/// Throws UsageError for invalid `splits` (validate_splits).
SplitAssignment assign_splits(const std::vector<SplitItem>& items,
                              const std::vector<SplitSpec>& splits, std::uint64_t seed,
                              const std::vector<std::uint32_t>& label_class = {});

}  // namespace mltool::records
