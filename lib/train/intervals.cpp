// Intervals of the validation metrics (intervals.hpp): the groups of the samples, and each
// task's statistics computed from the predictions' columns.
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

std::size_t column_index(const OutOfFold& t, const std::string& name) {
  const auto it = std::find(t.columns.begin(), t.columns.end(), name);
  if (it == t.columns.end()) throw FormatError("predictions have no column " + name);
  return static_cast<std::size_t>(it - t.columns.begin());
}

std::vector<double> numbers(const OutOfFold& t, const std::string& name) {
  const std::size_t c = column_index(t, name);
  std::vector<double> out;
  for (const auto& row : t.rows) out.push_back(parse(row[c], name));
  return out;
}

template <typename T>
std::vector<T> pick(const std::vector<T>& v, const std::vector<std::size_t>& idx) {
  std::vector<T> out;
  out.reserve(idx.size());
  for (const auto i : idx) out.push_back(v[i]);
  return out;
}

// Label ids of a column of label names.
std::vector<std::int64_t> label_ids(const OutOfFold& t, const std::string& column,
                                    const std::vector<std::string>& names) {
  const std::size_t c = column_index(t, column);
  std::vector<std::int64_t> out;
  for (const auto& row : t.rows) {
    const auto it = std::find(names.begin(), names.end(), row[c]);
    if (it == names.end()) throw FormatError("predictions: unknown label '" + row[c] + "'");
    out.push_back(it - names.begin());
  }
  return out;
}

double balanced_accuracy(const std::vector<std::int64_t>& y, const std::vector<std::int64_t>& p,
                         std::size_t classes, const std::vector<std::size_t>& idx) {
  std::vector<double> support(classes, 0), hits(classes, 0);
  for (const auto i : idx) {
    support[static_cast<std::size_t>(y[i])] += 1;
    hits[static_cast<std::size_t>(y[i])] += y[i] == p[i];
  }
  double sum = 0;
  int present = 0;
  for (std::size_t c = 0; c < classes; ++c)
    if (support[c] > 0) sum += hits[c] / support[c], ++present;
  return present ? sum / present : std::nan("");
}

}  // namespace

std::vector<NamedStatistic> classification_statistics(const json& task, const OutOfFold& t) {
  const ClassPredictions c = class_predictions(task, t);
  const auto& y = c.label;
  std::vector<NamedStatistic> out{
      {"val_balanced_accuracy", [=](const std::vector<std::size_t>& idx) {
         return balanced_accuracy(c.label, c.predicted, c.names.size(), idx);
       }}};
  if (c.names.size() != 2) return out;
  out.push_back({"val_auc", [=](const std::vector<std::size_t>& idx) {
                   return binary_auc(pick(y, idx), pick(c.score, idx));
                 }});
  out.push_back({"val_auprc", [=](const std::vector<std::size_t>& idx) {
                   return average_precision(pick(y, idx), pick(c.score, idx));
                 }});
  return out;
}

MultilabelPredictions multilabel_predictions(const json& task, const OutOfFold& t) {
  MultilabelPredictions m;
  m.names = task.at("labels").get<std::vector<std::string>>();
  for (const auto& name : m.names) {
    const std::size_t c = column_index(t, "label_" + name);
    m.truth.emplace_back();
    for (const auto& row : t.rows) m.truth.back().push_back(row[c].empty() ? -1 : row[c] == "1");
    m.prob.push_back(numbers(t, "prob_" + name));
  }
  return m;
}

double MultilabelPredictions::auc(std::size_t l, const std::vector<std::size_t>& idx) const {
  std::vector<std::int64_t> y;
  std::vector<double> p;
  for (const auto i : idx)
    if (truth[l][i] >= 0) y.push_back(truth[l][i]), p.push_back(prob[l][i]);
  return binary_auc(y, p);
}

// Multilabel: each label's ROC AUC over the samples where it is observed (val_auc_LABEL), and
// their mean (val_auc_mean; labels whose AUC is undefined in a resample left out).
std::vector<NamedStatistic> multilabel_statistics(const json& task, const OutOfFold& t) {
  const auto m = std::make_shared<const MultilabelPredictions>(multilabel_predictions(task, t));
  std::vector<NamedStatistic> out{{"val_auc_mean", [m](const std::vector<std::size_t>& idx) {
                                     double sum = 0;
                                     int defined = 0;
                                     for (std::size_t l = 0; l < m->names.size(); ++l) {
                                       const double auc = m->auc(l, idx);
                                       if (std::isfinite(auc)) sum += auc, ++defined;
                                     }
                                     return defined ? sum / defined : std::nan("");
                                   }}};
  for (std::size_t l = 0; l < m->names.size(); ++l)
    out.push_back({"val_auc_" + m->names[l],
                   [m, l](const std::vector<std::size_t>& idx) { return m->auc(l, idx); }});
  return out;
}

json multilabel_counts(const json& task, const OutOfFold& t) {
  const auto m = multilabel_predictions(task, t);
  std::vector<std::size_t> all(t.rows.size());
  for (std::size_t i = 0; i < all.size(); ++i) all[i] = i;
  json out = json::array();
  for (std::size_t l = 0; l < m.names.size(); ++l) {
    std::uint64_t positives = 0, negatives = 0, missing = 0;
    for (const auto v : m.truth[l]) (v < 0 ? missing : v == 1 ? positives : negatives) += 1;
    const double auc = m.auc(l, all);
    out.push_back({{"label", m.names[l]},
                   {"positives", positives},
                   {"negatives", negatives},
                   {"missing", missing},
                   {"auc", std::isfinite(auc) ? json(auc) : json()}});
  }
  return out;
}

std::vector<NamedStatistic> regression_statistics(const OutOfFold& t) {
  const auto y = numbers(t, "target"), p = numbers(t, "prediction");
  return {{"val_r2", [=](const std::vector<std::size_t>& idx) {
             return regression_metrics(pick(y, idx), pick(p, idx)).r2;
           }}};
}

std::vector<NamedStatistic> survival_statistics(const OutOfFold& t) {
  const auto time = numbers(t, "time"), event = numbers(t, "event"), risk = numbers(t, "risk");
  return {{"val_c_index", [=](const std::vector<std::size_t>& idx) {
             return concordance_index(pick(time, idx), pick(event, idx), pick(risk, idx));
           }}};
}

namespace {

json finite_or_null(double v) { return std::isfinite(v) ? json(v) : json(); }

}  // namespace

ClassPredictions class_predictions(const json& task, const OutOfFold& t) {
  ClassPredictions c;
  c.names = task.at("labels").get<std::vector<std::string>>();
  c.label = label_ids(t, "label", c.names);
  c.predicted = label_ids(t, "prediction", c.names);
  if (c.names.size() == 2) {
    const auto l0 = numbers(t, "logit_" + c.names[0]), l1 = numbers(t, "logit_" + c.names[1]);
    for (std::size_t i = 0; i < l0.size(); ++i)
      c.score.push_back(1 / (1 + std::exp(l0[i] - l1[i])));
    return c;
  }
  std::vector<std::vector<double>> logits;
  for (const auto& name : c.names) logits.push_back(numbers(t, "logit_" + name));
  c.prob.assign(c.names.size(), std::vector<double>(t.rows.size()));
  for (std::size_t i = 0; i < t.rows.size(); ++i) {
    double top = logits[0][i], sum = 0;
    for (const auto& l : logits) top = std::max(top, l[i]);
    for (const auto& l : logits) sum += std::exp(l[i] - top);
    for (std::size_t k = 0; k < logits.size(); ++k)
      c.prob[k][i] = std::exp(logits[k][i] - top) / sum;
  }
  return c;
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
  for (const auto& n : named) statistics.push_back(n.statistic);
  const auto intervals =
      bootstrap_intervals(groups.of, statistics, resamples, bootstrap_seed(seed));
  std::vector<std::size_t> all(table.rows.size());
  for (std::size_t i = 0; i < all.size(); ++i) all[i] = i;
  json metrics = json::object();
  for (std::size_t k = 0; k < named.size(); ++k)
    metrics[named[k].name] = {{"estimate", finite_or_null(named[k].statistic(all))},
                              {"low", finite_or_null(intervals[k].low)},
                              {"high", finite_or_null(intervals[k].high)},
                              {"resamples", intervals[k].resamples}};
  std::vector<std::string> distinct = groups.of;
  std::sort(distinct.begin(), distinct.end());
  distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
  return {{"level", 0.95},       {"resamples", resamples},    {"seed", seed},
          {"unit", groups.unit}, {"groups", distinct.size()}, {"metrics", metrics}};
}

}  // namespace mltool::train
