// dsmil: DSMIL (Li, Li and Eliceiri 2021, "Dual-stream multiple instance learning network for
// whole slide image classification with self-supervised contrastive learning", CVPR;
// github.com/binli123/dsmil-wsi dsmil.py) on bags of tile features, as one block: the
// instance stream (a linear classifier per instance; its maximum over the bag is the
// max-pooling prediction), and the bag stream (each class's critical instance, the one the
// instance classifier scores highest; every instance's attention to it from their queries;
// the attention-weighted bag embedding per class, classified by a Conv1d over the features).
// The loss is half the task's loss of each stream's logits (the objective below).
#include <cmath>
#include <limits>

#include "blocks.hpp"
#include "family.hpp"
#include "mltool/util/error.hpp"

namespace mltool::train::models {
namespace {

using json = nlohmann::json;

constexpr std::int64_t kQuery = 128;  // the reference's query width

// IClassifier's fc, BClassifier's q, v and fcc, in the reference's order (a seeded build draws
// the reference module's initial weights, but for its orthogonal re-initialisation).
class DsmilHead : public Block {
 public:
  DsmilHead(std::int64_t dims, std::int64_t classes, bool nonlinear, bool passing_v, double dropout)
      : nonlinear_(nonlinear), dropout_(dropout) {
    instance_ = register_module("i_classifier", torch::nn::Linear(dims, classes));
    q1_ = register_module("q1", torch::nn::Linear(dims, kQuery));
    if (nonlinear) q2_ = register_module("q2", torch::nn::Linear(kQuery, kQuery));
    if (passing_v) v_ = register_module("v", torch::nn::Linear(dims, dims));
    fcc_ =
        register_module("fcc", torch::nn::Conv1d(torch::nn::Conv1dOptions(classes, classes, dims)));
  }

  Activation forward(const Activation& in) override {
    const auto not_real = in.mask.defined() ? in.mask.logical_not().unsqueeze(-1) : torch::Tensor();
    const auto inf = std::numeric_limits<float>::infinity();
    auto scores = instance_->forward(in.x);  // B × L × C
    if (not_real.defined()) scores = scores.masked_fill(not_real, -inf);
    // The critical instance of each class: the first of its scores sorted descending.
    const auto critical = std::get<1>(scores.sort(1, true)).select(1, 0);  // B × C
    const auto features =
        in.x.gather(1, critical.unsqueeze(-1).expand({-1, -1, in.x.size(2)}));  // B × C × D
    auto a = torch::matmul(query(in.x), query(features).transpose(1, 2)) /
             std::sqrt(static_cast<double>(kQuery));  // B × L × C
    if (not_real.defined()) a = a.masked_fill(not_real, -inf);
    a = torch::softmax(a, 1);
    auto v = in.x;
    if (v_) {
      if (dropout_ > 0) v = torch::dropout(v, dropout_, is_training());
      v = torch::relu(v_->forward(v));
    }
    const auto bag = torch::matmul(a.transpose(1, 2), v);  // B × C × D
    Activation out;
    out.x = fcc_->forward(bag).squeeze(-1);
    // predict's attention: the column of the predicted class.
    out.attention =
        a.gather(2, out.x.argmax(1).view({-1, 1, 1}).expand({-1, a.size(1), 1})).squeeze(-1);
    if (is_training()) out.extra = std::get<0>(scores.max(1));  // B × C: max-pooling logits
    return out;
  }

 private:
  torch::Tensor query(const torch::Tensor& x) {
    auto q = q1_->forward(x);
    if (nonlinear_) q = torch::tanh(q2_->forward(torch::relu(q)));
    return q;
  }

  bool nonlinear_;
  double dropout_;
  torch::nn::Linear instance_{nullptr}, q1_{nullptr}, q2_{nullptr}, v_{nullptr};
  torch::nn::Conv1d fcc_{nullptr};
};

json settings(const json& doc, const std::string& where) {
  json s = {{"dropout", doc.value("dropout", 0.0)},
            {"nonlinear", doc.value("nonlinear", true)},
            {"passing_v", doc.value("passing_v", false)}};
  if (s["dropout"].get<double>() > 0 && !s["passing_v"].get<bool>())
    throw FormatError(at_file(where,
                              "/dropout: dsmil's dropout is its value network's "
                              "(passing_v), which is off; set \"passing_v\": true"));
  return s;
}

std::int64_t build(BlockModel&, const json&, std::int64_t width) { return width; }

void head(BlockModel& model, const json& s, std::int64_t width, std::int64_t classes) {
  model.add("dsmil", std::make_shared<DsmilHead>(width, classes, s.at("nonlinear").get<bool>(),
                                                 s.at("passing_v").get<bool>(),
                                                 s.at("dropout").get<double>()));
}

// Half the task's loss of the bag stream's logits, half of the max-pooled instance logits'.
torch::Tensor objective(const json&, const StepLoss& task, const Activation& out,
                        const torch::Tensor& y) {
  if (!out.extra.defined())
    throw UsageError("dsmil: the max-instance logits are computed in training mode only");
  return 0.5 * task.loss_sum(out.x, y) + 0.5 * task.loss_sum(out.extra, y);
}

}  // namespace

const Family& dsmil() {
  static const Family family{"dsmil",
                             records::PackUnit::bag,
                             {"dropout", "nonlinear", "passing_v"},
                             &settings,
                             &build,
                             &head,
                             &objective,
                             {records::PackTask::classification},
                             "its max-instance loss is a classification loss; abmil trains bags "
                             "of every task"};
  return family;
}

}  // namespace mltool::train::models
