// Classification: label ids, cross-entropy (weighted per label with --class-weights), accuracy,
// balanced accuracy and, with two labels, ROC AUC and average precision (AUPRC); predictions.csv
// gives the label, the predicted label and every logit.
#include <torch/torch.h>

#include <cmath>
#include <sstream>

#include "../class_plots.hpp"
#include "../export.hpp"
#include "../task.hpp"
#include "mltool/train/bootstrap.hpp"
#include "mltool/train/metrics.hpp"
#include "mltool/util/error.hpp"
#include "task_predictions.hpp"

namespace mltool::train {

using json = nlohmann::json;

ClassPredictions class_predictions(const json& task, const OutOfFold& t) {
  ClassPredictions c;
  c.names = task.at("labels").get<std::vector<std::string>>();
  c.label = prediction_labels(t, "label", c.names);
  c.predicted = prediction_labels(t, "prediction", c.names);
  if (c.names.size() == 2) {
    const auto l0 = prediction_numbers(t, "logit_" + c.names[0]),
               l1 = prediction_numbers(t, "logit_" + c.names[1]);
    for (std::size_t i = 0; i < l0.size(); ++i)
      c.score.push_back(1 / (1 + std::exp(l0[i] - l1[i])));
    return c;
  }
  std::vector<std::vector<double>> logits;
  for (const auto& name : c.names) logits.push_back(prediction_numbers(t, "logit_" + name));
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

}  // namespace mltool::train

namespace mltool::train::tasks {
namespace {

namespace F = torch::nn::functional;
using json = nlohmann::json;

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

// Classification: balanced accuracy, and with two labels AUROC (val_auc) and AUPRC (val_auprc),
// each over the labels' groups (NamedStatistic::outcome).
std::vector<NamedStatistic> classification_statistics(const json& task, const OutOfFold& t) {
  const ClassPredictions c = class_predictions(task, t);
  const auto& y = c.label;
  std::vector<NamedStatistic> out{{"val_balanced_accuracy",
                                   [=](const std::vector<std::size_t>& idx) {
                                     return balanced_accuracy(c.label, c.predicted, c.names.size(),
                                                              idx);
                                   },
                                   c.label, c.names}};
  if (c.names.size() != 2) return out;
  out.push_back({"val_auc",
                 [=](const std::vector<std::size_t>& idx) {
                   return binary_auc(pick(y, idx), pick(c.score, idx));
                 },
                 y, c.names});
  out.push_back({"val_auprc",
                 [=](const std::vector<std::size_t>& idx) {
                   return average_precision(pick(y, idx), pick(c.score, idx));
                 },
                 y, c.names});
  return out;
}

// Per label id, or empty for none.
std::vector<double> class_weights(const std::string& text, const SplitSamples& train,
                                  std::size_t classes) {
  if (text == "none") return {};
  std::vector<double> w;
  if (text == "balanced") {
    std::vector<double> count(classes, 0);
    for (const auto l : train.labels) ++count[static_cast<std::size_t>(l)];
    for (const double c : count)
      w.push_back(c > 0 ? static_cast<double>(train.size()) / (classes * c) : 0.0);
    return w;
  }
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    char* end = nullptr;
    const double v = std::strtod(item.c_str(), &end);
    if (item.empty() || *end != '\0' || !std::isfinite(v) || v < 0)
      throw UsageError("--class-weights: '" + item +
                       "' is not a weight (none, balanced, or W0,W1,... >= 0)");
    w.push_back(v);
  }
  if (w.size() != classes)
    throw UsageError("--class-weights: " + std::to_string(w.size()) + " weights for " +
                     std::to_string(classes) + " labels");
  return w;
}

class Classification : public Task {
 public:
  Classification(const TrainJob& job, const DatasetInfo& data, const SplitSamples& train)
      : labels_(data.labels),
        weights_(class_weights(job.class_weights, train, data.labels.size())) {
    if (labels_.size() < 2)
      throw InputError(at_file(data.manifest_path, "has " + std::to_string(labels_.size()) +
                                                       " label(s); classification needs at "
                                                       "least 2"));
    if (job.loss != Loss::auto_choice && job.loss != Loss::cross_entropy)
      throw UsageError("--loss " + std::string(util::name_of(kLosses, job.loss)) +
                       ": a classification dataset trains with cross_entropy");
    if (job.monitor == Monitor::val_auc && labels_.size() != 2)
      throw UsageError("--monitor val_auc needs two labels, the dataset has " +
                       std::to_string(labels_.size()));
    ce_ = cross_entropy_loss(weights_.empty() ? torch::Tensor()
                                              : torch::tensor(weights_, torch::kFloat32));
  }

  Classification(std::vector<std::string> labels, std::vector<double> weights)
      : labels_(std::move(labels)), weights_(std::move(weights)) {
    ce_ = cross_entropy_loss();
  }

  json describe() const override {
    return {{"kind", "classification"},
            {"loss", "cross_entropy"},
            {"labels", labels_},
            {"class_weights", weights_.empty() ? json() : json(weights_)}};
  }
  std::int64_t outputs() const override { return static_cast<std::int64_t>(labels_.size()); }
  torch::Tensor targets(const SplitSamples& s) const override {
    return torch::tensor(s.labels, torch::kInt64);
  }

  void to(const torch::Device& device) override {
    if (!weights_.empty())
      ce_ = cross_entropy_loss(torch::tensor(weights_, torch::kFloat32).to(device));
  }
  torch::Tensor loss_sum(const torch::Tensor& out, const torch::Tensor& y) const override {
    return ce_->loss_sum(out, y);
  }
  torch::Tensor weight_sum(const torch::Tensor& y) const override { return ce_->weight_sum(y); }
  torch::Tensor loss(const torch::Tensor& out, const torch::Tensor& y) const override {
    return ce_->loss(out, y);
  }
  std::vector<double> sample_weights(const SplitSamples& s) const override {
    if (weights_.empty()) return {};
    std::vector<double> w;
    for (const auto l : s.labels) w.push_back(weights_[static_cast<std::size_t>(l)]);
    return w;
  }

  json metrics(const torch::Tensor& outputs, const SplitSamples& s) const override {
    const auto n = static_cast<std::int64_t>(s.size());
    const auto y = targets(s);
    // Per-sample losses in float32, summed in float64: independent of the evaluation batches.
    const double loss =
        F::cross_entropy(outputs, y, F::CrossEntropyFuncOptions().reduction(torch::kNone))
            .to(torch::kFloat64)
            .sum()
            .item<double>() /
        static_cast<double>(n);
    const auto predicted = outputs.argmax(1).contiguous();
    std::vector<std::int64_t> pred(predicted.data_ptr<std::int64_t>(),
                                   predicted.data_ptr<std::int64_t>() + n);
    std::vector<double> positive;
    if (labels_.size() == 2) positive = scores(outputs);
    const auto m = classification_metrics(s.labels, pred, positive, outputs.size(1));
    return {{"val_loss", number_or_null(loss)},
            {"val_accuracy", m.accuracy},
            {"val_balanced_accuracy", m.balanced_accuracy},
            {"val_auc", number_or_null(m.auc)},
            {"val_auprc",
             positive.empty() ? json() : number_or_null(average_precision(s.labels, positive))}};
  }
  bool offers(Monitor m) const override {
    return m == Monitor::val_loss || m == Monitor::val_accuracy ||
           m == Monitor::val_balanced_accuracy || m == Monitor::val_auc;
  }
  std::vector<double> scores(const torch::Tensor& outputs) const override {
    const auto p = torch::softmax(outputs.to(torch::kFloat64), 1).select(1, -1).contiguous();
    return {p.data_ptr<double>(), p.data_ptr<double>() + p.size(0)};
  }

  std::string output_header() const override {
    std::string out = "prediction";
    for (const auto& name : labels_) out += "," + csv_field("logit_" + name);
    for (const auto& name : labels_) out += "," + csv_field("prob_" + name);
    return out;
  }
  std::string output_row(const float* out) const override {
    const auto k = static_cast<std::int64_t>(labels_.size());
    const auto logits = torch::from_blob(const_cast<float*>(out), {1, k}, torch::kFloat32);
    const auto p = torch::softmax(logits, 1).contiguous();
    const auto best = std::max_element(out, out + k) - out;
    std::string row = csv_field(labels_[static_cast<std::size_t>(best)]);
    for (std::int64_t c = 0; c < k; ++c) row += "," + exact_float(out[c]);
    for (std::int64_t c = 0; c < k; ++c) row += "," + exact_float(p.data_ptr<float>()[c]);
    return row;
  }
  std::string score_name() const override { return "prob_" + labels_.back(); }
  std::vector<std::string> label_names() const override { return labels_; }
  torch::Tensor probabilities(const torch::Tensor& outputs) const override {
    return torch::softmax(outputs, 1).contiguous();
  }

  std::vector<NamedStatistic> statistics(const OutOfFold& table) const override {
    return classification_statistics(describe(), table);
  }
  nlohmann::json draw_charts(const std::string& dir, const OutOfFold& table,
                             const SampleGroups& groups, int resamples,
                             std::uint64_t seed) const override {
    return draw_classification_charts(dir, describe(), table, groups, resamples, seed);
  }
  bool scores_known_labels() const override { return true; }

  std::string csv_header() const override {
    std::string out = "label,prediction";
    for (const auto& name : labels_) out += "," + csv_field("logit_" + name);
    return out;
  }
  std::string csv_row(const SplitSamples& s, std::size_t i, const float* out) const override {
    const auto k = static_cast<std::ptrdiff_t>(labels_.size());
    const auto best = std::max_element(out, out + k) - out;
    std::string row = csv_field(labels_[static_cast<std::size_t>(s.labels[i])]) + "," +
                      csv_field(labels_[static_cast<std::size_t>(best)]);
    for (std::ptrdiff_t c = 0; c < k; ++c) row += "," + exact_float(out[c]);
    return row;
  }

 private:
  std::vector<std::string> labels_;
  std::vector<double> weights_;
  std::unique_ptr<StepLoss> ce_;
};

}  // namespace

std::unique_ptr<Task> classification(const json& task) {
  const auto weights = task.value("class_weights", json());
  return std::make_unique<Classification>(
      task.at("labels").get<std::vector<std::string>>(),
      weights.is_array() ? weights.get<std::vector<double>>() : std::vector<double>{});
}

std::unique_ptr<Task> classification(const TrainJob& job, const DatasetInfo& data,
                                     const SplitSamples& train) {
  return std::make_unique<Classification>(job, data, train);
}

}  // namespace mltool::train::tasks
