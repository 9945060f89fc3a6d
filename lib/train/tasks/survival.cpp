// Survival: a time and an event per sample; --loss cox (the negative Cox partial
// log-likelihood with Breslow's ties over the samples of a step, one output: the log relative
// hazard) or --loss nll (the discrete-time hazard likelihood of Zadeh & Schmid 2020 over --bins
// intervals cut at quantiles of the training split's event times, one logit per interval).
// Metrics: val_c_index (Harrell's) and, for nll, val_ibs (the integrated Brier score);
// predictions.csv gives the time, the event, the risk and, for nll, the survival at each cut.
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "../export.hpp"
#include "../intervals.hpp"
#include "../task.hpp"
#include "mltool/train/metrics.hpp"
#include "mltool/util/error.hpp"

namespace mltool::train::tasks {
namespace {

namespace F = torch::nn::functional;
using json = nlohmann::json;

// Survival: the C-index (val_c_index).
std::vector<NamedStatistic> survival_statistics(const OutOfFold& t) {
  const auto time = prediction_numbers(t, "time"), event = prediction_numbers(t, "event"),
             risk = prediction_numbers(t, "risk");
  return {{"val_c_index", [=](const std::vector<std::size_t>& idx) {
             return concordance_index(pick(time, idx), pick(event, idx), pick(risk, idx));
           }}};
}

// numpy's default (linear) quantile of sorted values.
double quantile(const std::vector<double>& sorted, double q) {
  const double pos = q * static_cast<double>(sorted.size() - 1);
  const auto lo = static_cast<std::size_t>(std::floor(pos));
  const std::size_t hi = std::min(lo + 1, sorted.size() - 1);
  return sorted[lo] + (pos - static_cast<double>(lo)) * (sorted[hi] - sorted[lo]);
}

// The B - 1 inner cuts: quantiles 1/B, ..., (B-1)/B of the training split's event times.
std::vector<double> cuts_of(const SplitSamples& train, int bins, const std::string& manifest) {
  std::vector<double> events;
  for (std::size_t i = 0; i < train.size(); ++i)
    if (train.targets[2 * i + 1] != 0) events.push_back(train.targets[2 * i]);
  if (events.empty())
    throw InputError(at_file(manifest, "the training split '" + train.name +
                                           "' has no observed event; a survival loss needs some"));
  std::sort(events.begin(), events.end());
  std::vector<double> cuts;
  for (int j = 1; j < bins; ++j) cuts.push_back(quantile(events, static_cast<double>(j) / bins));
  return cuts;
}

// `v` with `digits` significant digits: 9 name the cuts, 17 give a double exactly.
std::string number_text(double v, int digits = 9) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.*g", digits, v);
  return buf;
}

class Survival : public Task {
 public:
  Survival(const TrainJob& job, const DatasetInfo& data, const SplitSamples& train)
      : nll_(job.loss == Loss::nll) {
    if (job.loss != Loss::auto_choice && job.loss != Loss::cox && job.loss != Loss::nll)
      throw UsageError("--loss " + std::string(util::name_of(kLosses, job.loss)) + ": " +
                       data.manifest_path + " is a survival dataset (cox or nll)");
    if (job.class_weights != "none")
      throw UsageError("--class-weights: " + data.manifest_path + " is a survival dataset");
    if (nll_) {
      cuts_ = cuts_of(train, job.bins, data.manifest_path);
      cuts_tensor_ = torch::tensor(cuts_, torch::kFloat64);
    }
    if (job.monitor == Monitor::val_ibs && !nll_)
      throw UsageError("--monitor val_ibs needs --loss nll (a model of the survival curve)");
  }

  Survival(bool nll, std::vector<double> cuts) : nll_(nll), cuts_(std::move(cuts)) {
    if (nll_) cuts_tensor_ = torch::tensor(cuts_, torch::kFloat64);
  }

  json describe() const override {
    json d = {{"kind", "survival"}, {"loss", nll_ ? "nll" : "cox"}};
    if (nll_) d["cuts"] = cuts_;
    return d;
  }
  std::int64_t outputs() const override {
    return nll_ ? static_cast<std::int64_t>(cuts_.size()) + 1 : 1;
  }
  // [N, 3]: time, event, and the interval of the time (nll; 0 for cox).
  torch::Tensor targets(const SplitSamples& s) const override {
    const auto n = static_cast<std::int64_t>(s.size());
    auto t = torch::tensor(s.targets, torch::kFloat32).view({n, 2});
    torch::Tensor bin = torch::zeros({n, 1}, torch::kFloat32);
    if (nll_)
      bin = torch::searchsorted(cuts_tensor_, t.select(1, 0).to(torch::kFloat64), false, true)
                .to(torch::kFloat32)
                .view({n, 1});
    return torch::cat({t, bin}, 1);
  }

  bool per_sample() const override { return nll_; }
  torch::Tensor loss_sum(const torch::Tensor& out, const torch::Tensor& y) const override {
    return nll_terms(out, y).sum();
  }
  torch::Tensor loss(const torch::Tensor& out, const torch::Tensor& y) const override {
    if (nll_) return StepLoss::loss(out, y);
    // A step without an event has no risk set to compare: its loss is zero, and it is counted
    // (on the device: no synchronization).
    const auto none = (y.select(1, 1).sum() == 0).to(torch::kInt64);
    empty_steps_ = empty_steps_.defined() ? empty_steps_ + none : none;
    return cox(out, y);
  }
  json training_notes() const override {
    if (nll_) return json::object();
    return {
        {"steps_without_events", empty_steps_.defined() ? empty_steps_.item<std::int64_t>() : 0}};
  }

  json metrics(const torch::Tensor& outputs, const SplitSamples& s) const override {
    const auto y = targets(s);
    const double loss =
        nll_ ? nll_terms(outputs, y).to(torch::kFloat64).sum().item<double>() / s.size()
             : cox(outputs.to(torch::kFloat64), y.to(torch::kFloat64)).item<double>();
    std::vector<double> time, event;
    split_outcome(s, time, event);
    json m = {{"val_loss", number_or_null(loss)},
              {"val_c_index", number_or_null(concordance_index(time, event, scores(outputs)))}};
    if (nll_) m["val_ibs"] = number_or_null(ibs(outputs, time, event));
    return m;
  }
  bool offers(Monitor m) const override {
    return m == Monitor::val_loss || m == Monitor::val_c_index || (nll_ && m == Monitor::val_ibs);
  }
  std::vector<double> scores(const torch::Tensor& outputs) const override {
    // cox: the log relative hazard; nll: minus the expected number of intervals survived.
    const auto r = nll_ ? -survival_curve(outputs.to(torch::kFloat64)).sum(1)
                        : outputs.select(1, 0).to(torch::kFloat64);
    const auto c = r.contiguous();
    return {c.data_ptr<double>(), c.data_ptr<double>() + c.size(0)};
  }

  std::string output_header() const override {
    std::string h = "risk";
    for (const double c : cuts_) h += ",survival_" + number_text(c);
    return h;
  }
  std::string output_row(const float* out) const override {
    const auto row = torch::from_blob(const_cast<float*>(out), {1, outputs()}, torch::kFloat32);
    std::string r = number_text(scores(row)[0], 17);
    if (nll_) {
      const auto curve = survival_curve(row.to(torch::kFloat64)).contiguous();
      for (std::size_t j = 0; j < cuts_.size(); ++j)
        r += "," + number_text(curve.data_ptr<double>()[j], 17);
    }
    return r;
  }
  std::string score_name() const override { return "risk"; }
  bool records_train_median() const override { return true; }
  CvPicture cv_picture() const override { return CvPicture::km; }

  std::vector<NamedStatistic> statistics(const OutOfFold& table) const override {
    return survival_statistics(table);
  }
  std::string csv_header() const override { return "time,event," + output_header(); }
  std::string csv_row(const SplitSamples& s, std::size_t i, const float* out) const override {
    return exact_float(s.targets[2 * i]) + "," + exact_float(s.targets[2 * i + 1]) + "," +
           output_row(out);
  }

 private:
  static void split_outcome(const SplitSamples& s, std::vector<double>& time,
                            std::vector<double>& event) {
    for (std::size_t i = 0; i < s.size(); ++i) {
      time.push_back(s.targets[2 * i]);
      event.push_back(s.targets[2 * i + 1]);
    }
  }

  // Breslow: −Σ_{events i} (r_i − log Σ_{j: t_j ≥ t_i} exp r_j) / events; 0 without events.
  torch::Tensor cox(const torch::Tensor& out, const torch::Tensor& y) const {
    const auto r = out.select(1, 0);
    const auto time = y.select(1, 0).contiguous(), event = y.select(1, 1);
    const auto order = std::get<1>(time.sort(true, 0, false));
    const auto t_sorted = time.index_select(0, order).contiguous();
    const auto r_sorted = r.index_select(0, order);
    // The log-sum over each suffix of the ascending order; a sample's risk set starts at the
    // first sample of its time.
    const auto suffix = torch::logcumsumexp(r_sorted.flip(0), 0).flip(0);
    const auto first = torch::searchsorted(t_sorted, time, false, false);
    const auto terms = (r - suffix.index_select(0, first)) * event;
    const auto events = event.sum();
    return -terms.sum() / events.clamp_min(1);
  }

  // The per-sample negative log-likelihood of the discrete-time hazard model (alpha = 0): an
  // event in interval j: −log h_j − Σ_{k<j} log(1 − h_k); censored in j: −Σ_{k≤j} log(1 − h_k).
  torch::Tensor nll_terms(const torch::Tensor& out, const torch::Tensor& y) const {
    const auto event = y.select(1, 1);
    const auto bin = y.select(1, 2).to(torch::kInt64).unsqueeze(1);
    const auto log_h = F::logsigmoid(out), log_not_h = F::logsigmoid(-out);
    const auto before = (log_not_h.cumsum(1) - log_not_h).gather(1, bin).squeeze(1);
    const auto at_h = log_h.gather(1, bin).squeeze(1);
    const auto at_not_h = log_not_h.gather(1, bin).squeeze(1);
    return -(before + event * at_h + (1 - event) * at_not_h);
  }

  // S after each interval: ∏_{k≤j} (1 − h_k), N × B.
  static torch::Tensor survival_curve(const torch::Tensor& logits) {
    return F::logsigmoid(-logits).cumsum(1).exp();
  }

  // The integrated Brier score over the split's distinct times in [min, max): the model's
  // survival at t is the curve after the last interval that ends at or before t.
  double ibs(const torch::Tensor& outputs, const std::vector<double>& time,
             const std::vector<double>& event) const {
    std::vector<double> times(time);
    std::sort(times.begin(), times.end());
    times.erase(std::unique(times.begin(), times.end()), times.end());
    if (times.size() < 3) return std::nan("");
    times.pop_back();
    const auto curve = survival_curve(outputs.to(torch::kFloat64)).contiguous();
    const double* c = curve.data_ptr<double>();
    const auto b = static_cast<std::size_t>(outputs.size(1));
    std::vector<double> estimate;
    for (std::size_t i = 0; i < time.size(); ++i)
      for (const double t : times) {
        const auto ended = static_cast<std::size_t>(
            std::upper_bound(cuts_.begin(), cuts_.end(), t) - cuts_.begin());
        estimate.push_back(ended == 0 ? 1.0 : c[i * b + ended - 1]);
      }
    return integrated_brier_score(train_time_, train_event_, time, event, times, estimate);
  }

 public:
  std::vector<double> train_time_, train_event_;

 private:
  bool nll_;
  std::vector<double> cuts_;
  torch::Tensor cuts_tensor_;
  mutable torch::Tensor empty_steps_;  ///< cox: training steps without an event, so far
};

}  // namespace

std::unique_ptr<Task> survival(const json& task) {
  return std::make_unique<Survival>(task.at("loss") == "nll",
                                    task.value("cuts", std::vector<double>{}));
}

std::unique_ptr<Task> survival(const TrainJob& job, const DatasetInfo& data,
                               const SplitSamples& train) {
  auto task = std::make_unique<Survival>(job, data, train);
  for (std::size_t i = 0; i < train.size(); ++i) {
    task->train_time_.push_back(train.targets[2 * i]);
    task->train_event_.push_back(train.targets[2 * i + 1]);
  }
  return task;
}

}  // namespace mltool::train::tasks
