// Intervals of the validation metrics (intervals.hpp): the groups of the samples, the
// predictions' columns read back, and the bootstrap with its minimum of groups. Each task's
// statistics are in its own file (lib/train/tasks/).
#include "intervals.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <memory>

#include "mltool/io/feature_store.hpp"
#include "mltool/io/table.hpp"
#include "mltool/io/tile_store.hpp"
#include "mltool/train/bootstrap.hpp"
#include "mltool/train/metrics.hpp"
#include "mltool/util/error.hpp"
#include "mltool/util/file.hpp"
#include "mltool/util/log.hpp"

namespace mltool::train {
namespace {

using json = nlohmann::json;

// The string naming each sample: the bag, the tile key (image), or the feature row's key.
std::vector<std::string> sample_keys(const DatasetInfo& data, const SplitSamples& s) {
  if (!s.ids.empty()) return s.ids;
  const auto store = io::FeatureStore::open(data.features);
  std::vector<std::string> out;
  for (std::size_t i = 0; i < s.size(); ++i)
    out.emplace_back(store.key(static_cast<std::uint64_t>(s.rows[i])));
  return out;
}

// key (and bag) -> group, from the labels table's group column.
std::map<std::string, std::string> group_map(const json& labels) {
  const auto table = io::read_table(labels.at("path").get<std::string>());
  const std::size_t key = table.column(labels.at("key_column").get<std::string>());
  const std::size_t group = table.column(labels.at("group_column").get<std::string>());
  const json bag_column = labels.value("bag_column", json());
  const std::size_t bag =
      bag_column.is_string() ? table.column(bag_column.get<std::string>()) : key;
  std::map<std::string, std::string> out;
  for (const auto& row : table.rows) {
    out.emplace(row[key], row[group]);
    out.emplace(row[bag], row[group]);
  }
  return out;
}

// A number of predictions.csv. The columns hold float32 values written exactly (%.9g), so they
// are read back as float32 — strtod would give the nearest double to the decimal text, a hair
// off the float the metrics saw — except the risk, a double written with 17 digits.
double parse(const std::string& text, const std::string& column) {
  char* end = nullptr;
  const double v = column == "risk" ? std::strtod(text.c_str(), &end)
                                    : static_cast<double>(std::strtof(text.c_str(), &end));
  if (text.empty() || *end != '\0')
    throw FormatError("predictions: column " + column + ": '" + text + "' is not a number");
  return v;
}

}  // namespace

std::size_t prediction_column(const OutOfFold& t, const std::string& name) {
  const auto it = std::find(t.columns.begin(), t.columns.end(), name);
  if (it == t.columns.end()) throw FormatError("predictions have no column " + name);
  return static_cast<std::size_t>(it - t.columns.begin());
}

namespace {

json finite_or_null(double v) { return std::isfinite(v) ? json(v) : json(); }

// The number of distinct strings of `of`.
std::size_t distinct(std::vector<std::string> of) {
  std::sort(of.begin(), of.end());
  return static_cast<std::size_t>(std::unique(of.begin(), of.end()) - of.begin());
}

}  // namespace

std::vector<double> prediction_numbers(const OutOfFold& t, const std::string& name) {
  const std::size_t c = prediction_column(t, name);
  std::vector<double> out;
  for (const auto& row : t.rows) out.push_back(parse(row[c], name));
  return out;
}

std::vector<std::int64_t> prediction_labels(const OutOfFold& t, const std::string& column,
                                            const std::vector<std::string>& names) {
  const std::size_t c = prediction_column(t, column);
  std::vector<std::int64_t> out;
  for (const auto& row : t.rows) {
    const auto it = std::find(names.begin(), names.end(), row[c]);
    if (it == names.end()) throw FormatError("predictions: unknown label '" + row[c] + "'");
    out.push_back(it - names.begin());
  }
  return out;
}

// An interval from a handful of groups is no interval: the bootstrap can only redraw the groups
// it has (two groups give three distinct resamples), and its percentile interval then
// undercovers badly; and a value of the outcome seen in k of n groups is missing from a
// resample with probability (1 - k/n)^n ≈ e^-k, those resamples are dropped, and the interval
// describes the rest. docs/train.md#confidence-intervals.
std::string why_no_interval(const SampleGroups& groups, const NamedStatistic& statistic) {
  const std::size_t n = distinct(groups.of);
  if (n < kMinIntervalGroups)
    return std::to_string(n) + " " + groups.unit + (n == 1 ? "" : "s") +
           ": an interval needs at least " + std::to_string(kMinIntervalGroups);
  std::map<std::int64_t, std::vector<std::string>> in;  // outcome value -> its samples' groups
  for (std::size_t i = 0; i < statistic.outcome.size() && i < groups.of.size(); ++i)
    if (statistic.outcome[i] >= 0) in[statistic.outcome[i]].push_back(groups.of[i]);
  for (const auto& [value, of] : in) {
    const std::size_t k = distinct(of);
    if (k < kMinOutcomeGroups)
      return (static_cast<std::size_t>(value) < statistic.outcome_names.size()
                  ? "'" + statistic.outcome_names[static_cast<std::size_t>(value)] + "'"
                  : "outcome " + std::to_string(value)) +
             " occurs in " + std::to_string(k) + " " + groups.unit + (k == 1 ? "" : "s") +
             ": an interval needs each in at least " + std::to_string(kMinOutcomeGroups);
  }
  if (in.size() == 1 && statistic.outcome.size() > 0)
    return "one outcome only: an interval needs both";
  return "";
}

SampleGroups sample_groups(const DatasetInfo& data, const SplitSamples& s) {
  const auto keys = sample_keys(data, s);
  const json& labels = data.manifest.at("labels");
  const json bag_column = labels.value("bag_column", json());
  const bool bags = data.unit == records::PackUnit::bag;
  SampleGroups out;
  // A bag is a slide, or a value of the bag column; a tile or image key names its slide.
  out.unit = bags && bag_column.is_string() ? bag_column.get<std::string>() : "slide";
  for (const auto& k : keys) out.of.emplace_back(bags ? k : std::string(io::slide_of_key(k)));
  const json group_column = labels.value("group_column", json());
  if (!group_column.is_string()) return out;
  std::map<std::string, std::string> groups;
  try {
    groups = group_map(labels);
  } catch (const Error& e) {
    log::warn("the intervals resample " + out.unit + "s, not " + group_column.get<std::string>() +
              "s: " + e.what());
    return out;
  }
  std::vector<std::string> of;
  for (std::size_t i = 0; i < keys.size(); ++i) {
    auto it = groups.find(keys[i]);
    if (it == groups.end()) it = groups.find(out.of[i]);
    if (it == groups.end()) {
      log::warn("the intervals resample " + out.unit + "s: sample " + keys[i] +
                " is not in the labels table's " + group_column.get<std::string>() + " column");
      return out;
    }
    of.push_back(it->second);
  }
  out.unit = group_column.get<std::string>();
  out.of = std::move(of);
  return out;
}

json metric_intervals(const std::vector<NamedStatistic>& named, const OutOfFold& table,
                      const SampleGroups& groups, int resamples, std::uint64_t seed) {
  if (resamples <= 0) return nullptr;
  if (groups.of.size() != table.rows.size())
    throw FormatError("predictions hold " + std::to_string(table.rows.size()) + " samples, " +
                      std::to_string(groups.of.size()) + " expected");
  std::vector<Statistic> statistics;
  std::vector<std::string> why;
  for (const auto& n : named) {
    why.push_back(why_no_interval(groups, n));
    // A statistic without an interval is not resampled: NaN in every resample.
    statistics.push_back(why.back().empty() ? n.statistic : [](const std::vector<std::size_t>&) {
      return std::nan("");
    });
  }
  const bool any = std::any_of(why.begin(), why.end(), [](const auto& w) { return w.empty(); });
  const auto intervals =
      any ? bootstrap_intervals(groups.of, statistics, resamples, bootstrap_seed(seed))
          : std::vector<Interval>(named.size(), {std::nan(""), std::nan(""), 0});
  std::vector<std::size_t> all(table.rows.size());
  for (std::size_t i = 0; i < all.size(); ++i) all[i] = i;
  json metrics = json::object();
  for (std::size_t k = 0; k < named.size(); ++k) {
    json m = {{"estimate", finite_or_null(named[k].statistic(all))},
              {"low", finite_or_null(intervals[k].low)},
              {"high", finite_or_null(intervals[k].high)},
              {"resamples", intervals[k].resamples}};
    if (!why[k].empty()) m["not_estimable"] = why[k];
    metrics[named[k].name] = m;
  }
  return {{"level", 0.95},
          {"resamples", resamples},
          {"seed", seed},
          {"unit", groups.unit},
          {"groups", distinct(groups.of)},
          {"minimum_groups", kMinIntervalGroups},
          {"metrics", metrics}};
}

}  // namespace mltool::train
