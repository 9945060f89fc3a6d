// Multilabel: several binary outcomes per sample (a mutation panel: KRAS, BRAF, MSI, ...), any
// of them missing for a sample; one sigmoid output per label, the binary cross-entropy of the
// observed outcomes (a missing one masks that output of that sample); per label ROC AUC and
// their mean (val_auc_LABEL, val_auc_mean, and val_auc_mean_labels naming the labels it
// averages: those both of whose values occur); one ROC chart of every label; predictions.csv gives
// each label's outcome (empty where missing) and probability.
#include <torch/torch.h>

#include <cmath>

#include "../class_plots.hpp"
#include "../export.hpp"
#include "../task.hpp"
#include "mltool/train/metrics.hpp"
#include "mltool/util/error.hpp"
#include "task_predictions.hpp"

namespace mltool::train {

using json = nlohmann::json;

MultilabelPredictions multilabel_predictions(const json& task, const OutOfFold& t) {
  MultilabelPredictions m;
  m.names = task.at("labels").get<std::vector<std::string>>();
  for (const auto& name : m.names) {
    const std::size_t c = prediction_column(t, "label_" + name);
    m.truth.emplace_back();
    for (const auto& row : t.rows) m.truth.back().push_back(row[c].empty() ? -1 : row[c] == "1");
    m.prob.push_back(prediction_numbers(t, "prob_" + name));
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

}  // namespace mltool::train

namespace mltool::train::tasks {
namespace {

namespace F = torch::nn::functional;
using json = nlohmann::json;

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
                   [m, l](const std::vector<std::size_t>& idx) { return m->auc(l, idx); },
                   m->truth[l],
                   {"negative " + m->names[l], "positive " + m->names[l]}});
  return out;
}

class Multilabel : public Task {
 public:
  Multilabel(const TrainJob& job, const DatasetInfo& data) : labels_(data.labels) {
    if (labels_.empty()) throw InputError(at_file(data.manifest_path, "names no label columns"));
    if (job.loss != Loss::auto_choice && job.loss != Loss::bce)
      throw UsageError("--loss " + std::string(util::name_of(kLosses, job.loss)) + ": " +
                       data.manifest_path + " is a multilabel dataset (bce)");
    if (job.class_weights != "none")
      throw UsageError("--class-weights: " + data.manifest_path + " is a multilabel dataset");
  }

  explicit Multilabel(std::vector<std::string> labels) : labels_(std::move(labels)) {}

  json describe() const override {
    return {{"kind", "multilabel"}, {"loss", "bce"}, {"labels", labels_}};
  }
  std::int64_t outputs() const override { return static_cast<std::int64_t>(labels_.size()); }
  /// float32 [N, L]: 1, 0, or NaN where the outcome is missing.
  torch::Tensor targets(const SplitSamples& s) const override {
    return torch::tensor(s.targets, torch::kFloat32).view({-1, outputs()});
  }

  // The loss: the mean binary cross-entropy of the observed outcomes of the step (summed over
  // them, divided by their count).
  torch::Tensor loss_sum(const torch::Tensor& out, const torch::Tensor& y) const override {
    return per_entry_loss(out, y).sum();
  }
  torch::Tensor weight_sum(const torch::Tensor& y) const override {
    return observed(y).sum().to(torch::kFloat32).clamp_min(1);
  }
  std::vector<double> sample_weights(const SplitSamples& s) const override {
    const auto count = observed(targets(s)).sum(1).to(torch::kFloat64).contiguous();
    return {count.data_ptr<double>(), count.data_ptr<double>() + count.size(0)};
  }

  json metrics(const torch::Tensor& outputs, const SplitSamples& s) const override {
    const auto y = targets(s);
    const double entries = observed(y).sum().item<double>();
    const double loss =
        per_entry_loss(outputs, y).to(torch::kFloat64).sum().item<double>() / entries;
    const auto p = probabilities(outputs).to(torch::kFloat64).contiguous();
    json m = {{"val_loss", number_or_null(loss)}};
    double sum = 0;
    std::size_t defined = 0;
    std::string averaged;  // the labels val_auc_mean averages, in --label-columns' order
    for (std::size_t l = 0; l < labels_.size(); ++l) {
      const double auc = label_auc(y, p, static_cast<std::int64_t>(l));
      m["val_auc_" + labels_[l]] = number_or_null(auc);
      if (std::isfinite(auc)) {
        sum += auc;
        ++defined;
        averaged += (averaged.empty() ? "" : ",") + labels_[l];
      }
    }
    m["val_auc_mean"] = defined ? number_or_null(sum / static_cast<double>(defined)) : json();
    m["val_auc_mean_labels"] = averaged;
    return m;
  }
  bool offers(Monitor m) const override {
    return m == Monitor::val_loss || m == Monitor::val_auc_mean;
  }
  /// The first label's probability.
  std::vector<double> scores(const torch::Tensor& outputs) const override {
    const auto p = probabilities(outputs).select(1, 0).to(torch::kFloat64).contiguous();
    return {p.data_ptr<double>(), p.data_ptr<double>() + p.size(0)};
  }

  std::vector<std::string> label_names() const override { return labels_; }
  torch::Tensor probabilities(const torch::Tensor& outputs) const override {
    const auto logits = outputs.to(torch::kFloat32).contiguous();
    auto p = torch::empty_like(logits);
    const float* in = logits.data_ptr<float>();
    float* out = p.data_ptr<float>();
    for (std::int64_t i = 0; i < logits.numel(); ++i) out[i] = probability(in[i]);
    return p;
  }

  std::string output_header() const override {
    std::string out;
    for (const auto& name : labels_) out += (out.empty() ? "" : ",") + csv_field("prob_" + name);
    return out;
  }
  std::string output_row(const float* out) const override {
    std::string row;
    for (std::size_t l = 0; l < labels_.size(); ++l)
      row += (l ? "," : "") + exact_float(probability(out[l]));
    return row;
  }
  std::string score_name() const override { return "prob_" + labels_.front(); }

  std::vector<NamedStatistic> statistics(const OutOfFold& table) const override {
    return multilabel_statistics(describe(), table);
  }
  json draw_charts(const std::string& dir, const OutOfFold& table, const SampleGroups& groups,
                   int resamples, std::uint64_t seed) const override {
    (void)groups, (void)resamples, (void)seed;
    return draw_multilabel_charts(dir, describe(), table);
  }
  json label_counts(const OutOfFold& table) const override {
    return multilabel_counts(describe(), table);
  }

  std::string csv_header() const override {
    std::string out;
    for (const auto& name : labels_) out += (out.empty() ? "" : ",") + csv_field("label_" + name);
    return out + "," + output_header();
  }
  std::string csv_row(const SplitSamples& s, std::size_t i, const float* out) const override {
    std::string row;
    for (std::size_t l = 0; l < labels_.size(); ++l) {
      const float v = s.targets[i * labels_.size() + l];
      row += (l ? "," : "") + (std::isnan(v) ? std::string() : std::to_string(static_cast<int>(v)));
    }
    return row + "," + output_row(out);
  }

 private:
  static torch::Tensor observed(const torch::Tensor& y) { return torch::isnan(y).logical_not(); }
  // Each entry's binary cross-entropy with logits, 0 where the outcome is missing.
  static torch::Tensor per_entry_loss(const torch::Tensor& out, const torch::Tensor& y) {
    const auto mask = observed(y);
    const auto bce = F::binary_cross_entropy_with_logits(
        out, torch::where(mask, y, torch::zeros_like(y)),
        F::BinaryCrossEntropyWithLogitsFuncOptions().reduction(torch::kNone));
    return torch::where(mask, bce, torch::zeros_like(bce));
  }
  // The sigmoid, computed in one way for the metrics and the files, so the metrics rank
  // exactly the probabilities predictions.csv holds.
  static float probability(float logit) {
    return static_cast<float>(1.0 / (1.0 + std::exp(-static_cast<double>(logit))));
  }
  // ROC AUC of label `l` over the samples where it is observed; NaN unless both classes occur.
  static double label_auc(const torch::Tensor& y, const torch::Tensor& p, std::int64_t l) {
    const auto truth = y.select(1, l).contiguous();
    const auto prob = p.select(1, l).contiguous();
    std::vector<std::int64_t> labels;
    std::vector<double> scores;
    for (std::int64_t i = 0; i < truth.size(0); ++i) {
      const float v = truth.data_ptr<float>()[i];
      if (std::isnan(v)) continue;
      labels.push_back(static_cast<std::int64_t>(v));
      scores.push_back(prob.data_ptr<double>()[i]);
    }
    return binary_auc(labels, scores);
  }

  std::vector<std::string> labels_;
};

}  // namespace

std::unique_ptr<Task> multilabel(const json& task) {
  return std::make_unique<Multilabel>(task.at("labels").get<std::vector<std::string>>());
}

std::unique_ptr<Task> multilabel(const TrainJob& job, const DatasetInfo& data,
                                 const SplitSamples& train) {
  (void)train;
  return std::make_unique<Multilabel>(job, data);
}

}  // namespace mltool::train::tasks
