// The core of `mltool inspect`: what a set of TFRecord shards holds (records, bytes, labels per
// shard), how balanced the shards are, what a uniform interleave over them (tf.data
// `interleave` with one cycle slot per file, block length 1) does to the label mix of an
// epoch, and, under `deep`, whether every byte checks out. Every metric is defined in
// docs/inspect.md; the names here follow it.
//
// Inputs are either a dataset directory of `mltool pack` (dataset.json: statistics per split,
// labels from the label map) or any TFRecord files (one group, labels read from a named
// feature, int64 or bytes, and reported as absent when no record has it).
#pragma once

#include <array>
#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "mltool/records/record.hpp"
#include "mltool/util/options.hpp"

namespace mltool::records {

inline constexpr int kDeciles = 10;

// ---------------------------------------------------------------- statistics

/// Pearson's chi-square test of independence.
struct ChiSquare {
  double statistic = 0;
  std::uint64_t dof = 0;
  double p_value = 1;  ///< P(X >= statistic) for X ~ chi-square(dof); 1 when dof is 0
};

/// The regularized upper incomplete gamma function Q(a, x) = Γ(a, x) / Γ(a), for a > 0,
/// x >= 0 (series below a + 1, Lentz's continued fraction above).
double gamma_q(double a, double x);

/// Upper-tail probability of a chi-square statistic: Q(dof / 2, statistic / 2).
double chi_square_p(double statistic, double dof);

/// Independence of rows and columns of a table of counts (table[row][col], rows of equal
/// length). Rows and columns whose totals are 0 are left out, so dof = (r - 1)(c - 1) over
/// the rest.
ChiSquare chi_square_independence(const std::vector<std::vector<std::uint64_t>>& table);

/// max / min of `counts`: +inf if the smallest is 0 and the largest is not, NaN if all are 0
/// or there are none.
double max_min_ratio(const std::vector<std::uint64_t>& counts);

/// Population standard deviation over mean of `counts`; NaN if their sum is 0.
double coefficient_of_variation(const std::vector<std::uint64_t>& counts);

/// Two-sided p-value of `x` successes in `draws` draws without replacement from a population
/// of `population` holding `successes`: min(1, 2 min(P(X <= x), P(X >= x))), X hypergeometric.
/// Exact: the tail away from the mode is summed term by term (each from the previous by the
/// pmf ratio) until the terms no longer change the sum, so it costs a few standard deviations
/// of terms at most, whatever the population. Requires successes, draws <= population and x
/// in the support.
double hypergeometric_p(std::uint64_t population, std::uint64_t successes, std::uint64_t draws,
                        std::uint64_t x);

/// How likely label shares as far from the group's as those of `decile_labels` ([decile][label])
/// are when the group's labeled records are read in a uniformly random order: for each cell
/// (decile d with records, label l with records), the hypergeometric_p of its count (population:
/// the labeled records, successes: label l's, draws: decile d's); the smallest, times the
/// number of cells (Bonferroni: valid however the cells depend on each other), at most 1.
/// NaN when there is no such cell.
double decile_drift_p(const std::vector<std::uint64_t>& label_histogram,
                      const std::array<std::vector<std::uint64_t>, kDeciles>& decile_labels);

/// Two-sided p-value that the mean of `draws` values drawn without replacement from a population
/// of `population` values (mean `mean`, population variance `variance`) lies as far from `mean`
/// as `draw_mean`, by the normal approximation: z = (draw_mean − mean) / sqrt(variance / draws
/// · (population − draws) / (population − 1)), p = erfc(|z| / √2). 1 when the draw's variance
/// is 0 (every value equal, or the whole population drawn). Requires 0 < draws <= population.
double mean_shift_p(std::uint64_t population, double mean, double variance, std::uint64_t draws,
                    double draw_mean);

// ---------------------------------------------------------------- interleave

/// The order in which a uniform interleave reads shards: every shard open at once, one record
/// from each in turn (file order) until it runs out, i.e. tf.data's
/// `from_tensor_slices(files).interleave(TFRecordDataset, cycle_length=len(files))`. Record j
/// of shard i is read at epoch position P(i, j) = sum_k min(c_k, j) + #{k < i : c_k > j}.
/// Deciles: decile d holds positions [floor(d N / 10), floor((d + 1) N / 10)) of the N records.
/// Construction is O(n log n + 10 n) for n shards; per-record queries are O(1) to O(10).
class RoundRobin {
 public:
  explicit RoundRobin(std::vector<std::uint64_t> counts);

  std::size_t shards() const { return counts_.size(); }
  std::uint64_t total() const { return total_; }
  std::uint64_t count(std::size_t shard) const { return counts_[shard]; }

  /// P(shard, record); O(n), for tests and small inputs.
  std::uint64_t position(std::size_t shard, std::uint64_t record) const;
  /// The decile of epoch position `p` (< total()).
  int decile_of_position(std::uint64_t p) const;
  /// The decile record `record` of `shard` is read in.
  int decile(std::size_t shard, std::uint64_t record) const;
  /// The first record of `shard` read in decile `d` or later (d in 1..9); count(shard) if none.
  std::uint64_t first_record_in(std::size_t shard, int d) const {
    return thresholds_[shard][d - 1];
  }
  /// Records of `shard` read in decile `d`.
  std::uint64_t records_in(std::size_t shard, int d) const;
  /// Records in decile `d` (all shards).
  std::uint64_t decile_size(int d) const { return bounds_[d + 1] - bounds_[d]; }
  /// Over-sampling factor of `shard` in decile `d`: its share of the decile's records over
  /// its share of all records. 1 for every shard when shards are equal; NaN for an empty
  /// shard or decile.
  double factor(std::size_t shard, int d) const;
  /// The fraction of the epoch read once the last record of `shard` has been: (P(i, c_i - 1)
  /// + 1) / N. NaN for an empty shard.
  double exhausted_at(std::size_t shard) const { return exhausted_[shard]; }

 private:
  std::uint64_t prefix_rounds(std::uint64_t j) const;  // sum_k min(c_k, j)

  std::vector<std::uint64_t> counts_;
  std::vector<std::uint64_t> sorted_;  // counts, ascending
  std::vector<std::uint64_t> sorted_prefix_;
  std::uint64_t total_ = 0;
  std::array<std::uint64_t, kDeciles + 1> bounds_{};
  std::vector<std::array<std::uint64_t, kDeciles - 1>> thresholds_;
  std::vector<double> exhausted_;
};

// ---------------------------------------------------------------- inspection

struct InspectOptions {
  /// One dataset directory (holding dataset.json), or TFRecord files.
  std::vector<std::string> inputs;
  /// TFRecord files: the feature holding each record's label (int64 or bytes, one value).
  /// Datasets always use "label"; another name is a UsageError there.
  std::string label_feature = kLabelFeature;
  /// Verify everything: both CRCs of every frame, every DALI index line against the frames,
  /// every record's features (datasets: exactly dataset.json's record_features, row indices
  /// below the feature store's rows and not invalid), the feature store's matrix against
  /// dataset.json.
  bool deep = false;
  int threads = 0;  ///< 0 = one per core
};

struct ShardReport {
  std::string file;   ///< as given, or as named in dataset.json
  std::string index;  ///< the DALI index verified under deep, or ""
  std::uint64_t records = 0;
  std::uint64_t bytes = 0;
  std::vector<std::uint64_t> label_histogram;  ///< records per label (InspectReport::labels)
  std::uint64_t unlabeled = 0;                 ///< records without the label feature (files)
  std::array<double, kDeciles> factors{};      ///< RoundRobin::factor per decile
  /// The largest of `factors` and its decile: how much more often than its size warrants the
  /// interleave reads this shard, where it does so most. NaN / -1 for an empty shard.
  double oversample = std::numeric_limits<double>::quiet_NaN();
  int oversample_decile = -1;
  double exhausted_at = std::numeric_limits<double>::quiet_NaN();
  /// Regression, survival datasets: records with an outcome, their mean target (regression)
  /// or event rate (survival), and the two-sided p-value of a shard mean as far from the
  /// group's under a random assignment of the group's records to shards (NaN: none).
  std::uint64_t outcome_records = 0;
  double outcome_mean = std::numeric_limits<double>::quiet_NaN();
  double outcome_p = std::numeric_limits<double>::quiet_NaN();
};

/// Multilabel: one label's outcomes in a split, as its records hold them.
struct LabelCount {
  std::string label;
  std::uint64_t positives = 0, negatives = 0, missing = 0;
};

struct GroupReport {
  std::string name;  ///< the split, or "files"
  /// Multilabel datasets: per label, in --label-columns' order, the split's outcomes (checked
  /// against dataset.json's label_counts); empty for other tasks.
  std::vector<LabelCount> label_counts;
  std::vector<ShardReport> shards;
  std::uint64_t records = 0;
  std::uint64_t bytes = 0;
  std::uint64_t unlabeled = 0;
  std::vector<std::uint64_t> label_histogram;
  double max_min_ratio = std::numeric_limits<double>::quiet_NaN();  ///< of shard records
  double cv = std::numeric_limits<double>::quiet_NaN();             ///< of shard records
  std::optional<ChiSquare> chi_square;  ///< labels x shards; none without labels
  std::array<std::uint64_t, kDeciles> decile_records{};
  std::array<std::vector<std::uint64_t>, kDeciles> decile_labels;  ///< [decile][label]
  /// Per decile: max over labels of |share in the decile - share in the group|; NaN for an
  /// empty decile or without labels.
  std::array<double, kDeciles> decile_deviation{};
  double decile_drift = std::numeric_limits<double>::quiet_NaN();  ///< max of the above
  int worst_decile = -1;
  /// decile_drift_p of the decile label counts: the chance of a drift as unlikely as this one
  /// under a random record order (sampling noise alone). NaN without labels.
  double decile_p = std::numeric_limits<double>::quiet_NaN();
  /// The largest shard `oversample`, and its shard (-1: none).
  double max_oversample = std::numeric_limits<double>::quiet_NaN();
  int oversampled_shard = -1;
  /// Regression, survival datasets (docs/inspect.md#outcomes): the group's mean target or
  /// event rate, the targets' sample sd (regression; NaN for survival or under two records),
  /// and the smallest shard outcome_p times the number of shards with records (Bonferroni,
  /// at most 1), with its shard (-1: none). NaN without outcomes.
  std::uint64_t outcome_records = 0;
  double outcome_mean = std::numeric_limits<double>::quiet_NaN();
  double outcome_sd = std::numeric_limits<double>::quiet_NaN();
  double outcome_p = std::numeric_limits<double>::quiet_NaN();
  int outcome_shard = -1;
};

struct InspectReport {
  std::string dataset;  ///< the dataset directory, or "" for TFRecord files
  bool deep = false;
  std::string label_feature;
  /// A dataset's task (older datasets and TFRecord files: classification). Regression and
  /// survival datasets have no labels; their shards are compared by outcome instead.
  PackTask task = PackTask::classification;
  /// Label names by id: the dataset's label map, or the distinct values found (numeric order
  /// when all are int64, else bytewise); empty when no record has the label feature.
  std::vector<std::string> labels;
  std::vector<GroupReport> groups;
  std::uint64_t records = 0;
  std::uint64_t bytes = 0;
};

/// Reads every shard (in parallel, large shards split at frame boundaries) and computes the
/// report. Throws UsageError for bad options, InputError for missing files, FormatError (naming
/// the file and byte offset, or the dataset.json field) for anything that does not check out:
/// where several shards are bad, the first in input order; within one, the first bad frame.
InspectReport inspect(const InspectOptions& options);

// ---------------------------------------------------------------- thresholds

/// Limits for `--check`; an empty optional is a check not made. The size checks (max-ratio,
/// cv, oversample) pass a group whose shard sizes differ by at most one record: no writer can
/// do better. A decile drift fails only when it is both large (decile_drift above
/// `decile_drift`) and not sampling noise (decile_p below `decile_p`; `decile_p` off: large
/// is enough).
struct Thresholds {
  std::optional<double> max_ratio = 1.1;      ///< "max-ratio": max_min_ratio <= this
  std::optional<double> cv = 0.05;            ///< "cv": cv <= this
  std::optional<double> oversample = 1.1;     ///< "oversample": max_oversample <= this
  std::optional<double> decile_drift = 0.05;  ///< "decile-drift": decile_drift <= this, or ...
  std::optional<double> decile_p = 1e-6;      ///< "decile-p": ... decile_p >= this
  std::optional<double> chi2_p = 0.01;        ///< "chi2-p": chi-square p-value >= this
  std::optional<double> outcome_p = 0.01;     ///< "outcome-p": GroupReport::outcome_p >= this
};

/// Parses "NAME=VALUE,..." over the defaults; VALUE "off" drops a check; "" keeps the
/// defaults. UsageError naming the item for unknown names or bad values.
Thresholds parse_thresholds(std::string_view text);

/// "NAME=VALUE,..." of every threshold ("off" for a check not made), in parse_thresholds'
/// syntax: format_thresholds(Thresholds{}) is the defaults, as --help shows them.
std::string format_thresholds(const Thresholds& limits);

struct Violation {
  std::string check;  ///< e.g. "max-ratio"
  std::string group;
  double value;
  double threshold;
  std::string message;  ///< "train: max-ratio 1.52 exceeds 1.1 (train-00003-of-00004.tfrecord ...)"
};

/// Every threshold a group exceeds, group by group. Groups without records are skipped, and
/// label checks for groups without labels.
std::vector<Violation> check_thresholds(const InspectReport& report, const Thresholds& limits);

// ---------------------------------------------------------------- output

/// The --json document (docs/inspect.md#json); NaN and infinities become null. `limits` and
/// `violations` are included when checks were asked for.
nlohmann::json to_json(const InspectReport& report, const Thresholds* limits = nullptr,
                       const std::vector<Violation>* violations = nullptr);

/// The text report: per group a table of shards, the balance figures and the label mix by
/// decile.
std::string format_text(const InspectReport& report);

/// Draws the report as a chart (per group: records per shard stacked by label, and the label
/// mix of each decile of the epoch beside the overall mix): `path` the PNG, the SVG beside it
/// (report::write_chart; a `path` ending in .svg gets the SVG alone), each written atomically.
void write_plot(const std::string& path, const InspectReport& report);

/// `mltool inspect`: the scan, and what is done with its report.
struct InspectJob {
  InspectOptions scan;
  std::optional<Thresholds> check;  ///< --check: thresholds whose excess is exit 4
  std::string plot;                 ///< --plot: where to write the PNG chart, SVG beside ("": none)
};

/// The options of `mltool inspect`, declared once (lib/records/inspect_options.cpp).
const util::Options<InspectJob>& inspect_options();

struct InspectOutcome {
  InspectReport report;
  std::vector<Violation> violations;  ///< of job.check (empty without --check)
};

/// Scans (inspect), checks the thresholds and writes the plot.
InspectOutcome run_inspect(const InspectJob& job);

/// The document `mltool inspect --json` prints (to_json above, with "command").
nlohmann::json to_json(const InspectOutcome& outcome, const InspectJob& job);

}  // namespace mltool::records
