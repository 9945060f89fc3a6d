// Regression: one float target per sample, a one-output model, MSE (default) or Huber loss;
// val_mae, val_rmse, val_r2, val_pearson, val_spearman; predictions.csv gives the target and
// the prediction.
#include <torch/torch.h>

#include <cmath>

#include "../export.hpp"
#include "../intervals.hpp"
#include "../task.hpp"
#include "mltool/train/metrics.hpp"
#include "mltool/util/error.hpp"

namespace mltool::train::tasks {
namespace {

namespace F = torch::nn::functional;
using json = nlohmann::json;

// Regression: R² (val_r2).
std::vector<NamedStatistic> regression_statistics(const OutOfFold& t) {
  const auto y = prediction_numbers(t, "target"), p = prediction_numbers(t, "prediction");
  return {{"val_r2", [=](const std::vector<std::size_t>& idx) {
             return regression_metrics(pick(y, idx), pick(p, idx)).r2;
           }}};
}

class Regression : public Task {
 public:
  Regression(const TrainJob& job, const DatasetInfo& data)
      : huber_(job.loss == Loss::huber), delta_(job.huber_delta) {
    if (job.loss != Loss::auto_choice && job.loss != Loss::mse && job.loss != Loss::huber)
      throw UsageError("--loss " + std::string(util::name_of(kLosses, job.loss)) + ": " +
                       data.manifest_path + " is a regression dataset (mse or huber)");
    if (job.class_weights != "none")
      throw UsageError("--class-weights: " + data.manifest_path + " is a regression dataset");
  }

  Regression(bool huber, double delta) : huber_(huber), delta_(delta) {}

  json describe() const override {
    json d = {{"kind", "regression"}, {"loss", huber_ ? "huber" : "mse"}};
    if (huber_) d["huber_delta"] = delta_;
    return d;
  }
  std::int64_t outputs() const override { return 1; }
  torch::Tensor targets(const SplitSamples& s) const override {
    return torch::tensor(s.targets, torch::kFloat32).view({-1, 1});
  }

  torch::Tensor loss_sum(const torch::Tensor& out, const torch::Tensor& y) const override {
    return per_sample_loss(out, y).sum();
  }

  json metrics(const torch::Tensor& outputs, const SplitSamples& s) const override {
    const auto y = targets(s);
    const double loss = per_sample_loss(outputs, y).to(torch::kFloat64).sum().item<double>() /
                        static_cast<double>(s.size());
    const std::vector<double> truth(s.targets.begin(), s.targets.end());
    const auto m = regression_metrics(truth, scores(outputs));
    return {
        {"val_loss", number_or_null(loss)},         {"val_mae", number_or_null(m.mae)},
        {"val_rmse", number_or_null(m.rmse)},       {"val_r2", number_or_null(m.r2)},
        {"val_pearson", number_or_null(m.pearson)}, {"val_spearman", number_or_null(m.spearman)}};
  }
  bool offers(Monitor m) const override {
    return m == Monitor::val_loss || m == Monitor::val_mae || m == Monitor::val_rmse ||
           m == Monitor::val_r2 || m == Monitor::val_pearson || m == Monitor::val_spearman;
  }
  std::vector<double> scores(const torch::Tensor& outputs) const override {
    const auto p = outputs.select(1, 0).to(torch::kFloat64).contiguous();
    return {p.data_ptr<double>(), p.data_ptr<double>() + p.size(0)};
  }

  std::string output_header() const override { return "prediction"; }
  std::string output_row(const float* out) const override { return exact_float(out[0]); }
  std::string score_name() const override { return "prediction"; }
  CvPicture cv_picture() const override { return CvPicture::scatter; }

  std::vector<NamedStatistic> statistics(const OutOfFold& table) const override {
    return regression_statistics(table);
  }
  std::string csv_header() const override { return "target,prediction"; }
  std::string csv_row(const SplitSamples& s, std::size_t i, const float* out) const override {
    return exact_float(s.targets[i]) + "," + exact_float(out[0]);
  }

 private:
  // Each sample's loss: (p - y)², or Huber's with --huber-delta.
  torch::Tensor per_sample_loss(const torch::Tensor& out, const torch::Tensor& y) const {
    const auto reduction = F::HuberLossFuncOptions().reduction(torch::kNone).delta(delta_);
    return huber_ ? F::huber_loss(out, y, reduction)
                  : F::mse_loss(out, y, F::MSELossFuncOptions().reduction(torch::kNone));
  }
  bool huber_;
  double delta_;
};

}  // namespace

std::unique_ptr<Task> regression(const json& task) {
  return std::make_unique<Regression>(task.at("loss") == "huber", task.value("huber_delta", 1.0));
}

std::unique_ptr<Task> regression(const TrainJob& job, const DatasetInfo& data,
                                 const SplitSamples& train) {
  (void)train;
  return std::make_unique<Regression>(job, data);
}

}  // namespace mltool::train::tasks
