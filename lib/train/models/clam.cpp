// clam_sb and clam_mb: CLAM (Lu et al. 2021, "Data-efficient and weakly supervised
// computational pathology on whole-slide images", Nature Biomedical Engineering;
// github.com/mahmoodlab/CLAM models/model_clam.py) on bags of tile features. fc1 … fcN
// (per-instance linear + ReLU + dropout), then the clam block: gated attention (one branch,
// or one per class for clam_mb) pooling each bag's real instances, the bag classifier, and
// per class an instance classifier whose loss on the k most and least attended instances
// joins the task's loss (the objective below).
#include <cmath>
#include <limits>

#include "blocks.hpp"
#include "family.hpp"
#include "mltool/util/error.hpp"

namespace mltool::train::models {
namespace {

using json = nlohmann::json;
namespace F = torch::nn::functional;

struct ClamShape {
  std::int64_t width, attention, classes, k_sample;
  bool gated, multi_branch, subtyping;
  double dropout;
};

// Attn_Net_Gated (attention_a: tanh, attention_b: sigmoid gate, attention_c: one score per
// branch), the bag classifier(s) and the instance classifiers, in the reference's order (so a
// seeded build draws the same initial weights as the reference module would).
class ClamHead : public Block {
 public:
  explicit ClamHead(const ClamShape& s) : s_(s) {
    const std::int64_t branches = s.multi_branch ? s.classes : 1;
    a_ = register_module("attention_a", torch::nn::Linear(s.width, s.attention));
    if (s.gated) b_ = register_module("attention_b", torch::nn::Linear(s.width, s.attention));
    c_ = register_module("attention_c", torch::nn::Linear(s.attention, branches));
    if (s.multi_branch) {
      bag_ = register_module("classifiers", torch::nn::ModuleList());
      for (std::int64_t c = 0; c < s.classes; ++c) bag_->push_back(torch::nn::Linear(s.width, 1));
    } else {
      classifier_ = register_module("classifiers", torch::nn::Linear(s.width, s.classes));
    }
    instance_ = register_module("instance_classifiers", torch::nn::ModuleList());
    for (std::int64_t c = 0; c < s.classes; ++c)
      instance_->push_back(torch::nn::Linear(s.width, 2));
  }

  Activation forward(const Activation& in) override {
    const auto weights = attention(in);                // B × branches × L
    const auto pooled = torch::matmul(weights, in.x);  // B × branches × width
    Activation out;
    out.x = logits(pooled);
    // predict's attention: the branch of the predicted class (clam_sb: its one branch).
    out.attention =
        s_.multi_branch
            ? weights.gather(1, out.x.argmax(1).view({-1, 1, 1}).expand({-1, 1, weights.size(2)}))
                  .squeeze(1)
            : weights.select(1, 0);
    if (is_training()) out.extra = instance_losses(weights, in);
    return out;
  }

 private:
  // Softmax over each bag's real instances of each branch's scores: B × branches × L.
  torch::Tensor attention(const Activation& in) {
    auto a = torch::tanh(a_->forward(in.x));
    if (s_.dropout > 0) a = torch::dropout(a, s_.dropout, is_training());
    if (b_) {
      auto gate = torch::sigmoid(b_->forward(in.x));
      if (s_.dropout > 0) gate = torch::dropout(gate, s_.dropout, is_training());
      a = a * gate;
    }
    auto scores = c_->forward(a).transpose(1, 2);  // B × branches × L
    if (in.mask.defined())
      scores = scores.masked_fill(in.mask.logical_not().unsqueeze(1),
                                  -std::numeric_limits<float>::infinity());
    return torch::softmax(scores, 2);
  }

  torch::Tensor logits(const torch::Tensor& pooled) {
    if (!s_.multi_branch) return classifier_->forward(pooled.select(1, 0));
    std::vector<torch::Tensor> per_class;
    for (std::int64_t c = 0; c < s_.classes; ++c)
      per_class.push_back(bag_->at<torch::nn::LinearImpl>(static_cast<std::size_t>(c))
                              .forward(pooled.select(1, c)));
    return torch::cat(per_class, 1);
  }

  // Each bag's instance loss for each label it could have (B × classes): for label y, the
  // cross-entropy of instance classifier y on the k most attended instances of y's branch as
  // positives and the k least as negatives; with subtyping, plus every other class c's
  // classifier on the k most attended of c's branch as negatives, over the classes. Per bag on
  // its real instances alone, k = min(k_sample, instances): no padding or batch-mate enters.
  torch::Tensor instance_losses(const torch::Tensor& weights, const Activation& in) {
    const auto lengths = in.mask.defined()
                             ? in.mask.sum(1).to(torch::kCPU, torch::kInt64)
                             : torch::full({in.x.size(0)}, in.x.size(1), torch::kInt64);
    std::vector<torch::Tensor> rows;
    for (std::int64_t b = 0; b < in.x.size(0); ++b) {
      const auto n = lengths[b].item<std::int64_t>();
      rows.push_back(bag_losses(weights[b].narrow(1, 0, n), in.x[b].narrow(0, 0, n)));
    }
    return torch::stack(rows);
  }

  // One bag: `weights` branches × n, `h` n × width; its row of instance_losses.
  torch::Tensor bag_losses(const torch::Tensor& weights, const torch::Tensor& h) {
    const std::int64_t k = std::min(s_.k_sample, h.size(0));
    const auto options = torch::TensorOptions().dtype(torch::kInt64).device(h.device());
    const auto positives = torch::ones({k}, options), negatives = torch::zeros({k}, options);
    std::vector<torch::Tensor> in_class, out_class;
    for (std::int64_t c = 0; c < s_.classes; ++c) {
      const auto a = weights[s_.multi_branch ? c : 0];
      auto& classifier = instance_->at<torch::nn::LinearImpl>(static_cast<std::size_t>(c));
      const auto top = h.index_select(0, std::get<1>(torch::topk(a, k)));
      const auto bottom = h.index_select(0, std::get<1>(torch::topk(-a, k)));
      in_class.push_back(F::cross_entropy(classifier.forward(torch::cat({top, bottom})),
                                          torch::cat({positives, negatives})));
      if (s_.subtyping) out_class.push_back(F::cross_entropy(classifier.forward(top), negatives));
    }
    const auto in_loss = torch::stack(in_class);
    if (!s_.subtyping) return in_loss;
    const auto out_loss = torch::stack(out_class);
    return (in_loss + (out_loss.sum() - out_loss)) / static_cast<double>(s_.classes);
  }

  ClamShape s_;
  torch::nn::Linear a_{nullptr}, b_{nullptr}, c_{nullptr}, classifier_{nullptr};
  torch::nn::ModuleList bag_{nullptr}, instance_{nullptr};
};

json settings(const json& doc, const std::string& where) {
  json s = {{"attention", doc.value("attention", std::int64_t{256})},
            {"bag_weight", doc.value("bag_weight", 0.7)},
            {"dropout", doc.value("dropout", 0.25)},
            {"gated", doc.value("gated", true)},
            {"hidden", doc.value("hidden", std::vector<std::int64_t>{512})},
            {"instance_loss", doc.value("instance_loss", "ce")},
            {"k_sample", doc.value("k_sample", std::int64_t{8})},
            {"subtyping", doc.value("subtyping", false)}};
  if (s["hidden"].empty())
    throw FormatError(at_file(
        where, "/hidden: clam needs at least one fc layer (the attention pools its output)"));
  return s;
}

std::int64_t build(BlockModel& model, const json& s, std::int64_t width) {
  const auto hidden = s.at("hidden").get<std::vector<std::int64_t>>();
  for (std::size_t i = 0; i < hidden.size(); ++i) {
    model.add("fc" + std::to_string(i + 1), std::make_shared<Dense>(width, hidden[i], false, "relu",
                                                                    s.at("dropout").get<double>()));
    width = hidden[i];
  }
  return width;
}

ClamShape shape(const json& s, std::int64_t width, std::int64_t classes, bool multi_branch) {
  return {width,
          s.at("attention").get<std::int64_t>(),
          classes,
          s.at("k_sample").get<std::int64_t>(),
          s.at("gated").get<bool>(),
          multi_branch,
          s.at("subtyping").get<bool>(),
          s.at("dropout").get<double>()};
}

void single_branch(BlockModel& model, const json& s, std::int64_t width, std::int64_t classes) {
  model.add("clam", std::make_shared<ClamHead>(shape(s, width, classes, false)));
}

void multi_branch(BlockModel& model, const json& s, std::int64_t width, std::int64_t classes) {
  model.add("clam", std::make_shared<ClamHead>(shape(s, width, classes, true)));
}

// bag_weight × the task's loss of the logits + (1 − bag_weight) × the bag's instance loss for
// its label, each bag weighted as the task weighs it (--class-weights).
torch::Tensor objective(const json& s, const StepLoss& task, const Activation& out,
                        const torch::Tensor& y) {
  if (!out.extra.defined())
    throw UsageError("clam: the instance losses are computed in training mode only");
  const double bag_weight = s.at("bag_weight").get<double>();
  const auto instance = out.extra.gather(1, y.view({-1, 1})).squeeze(1);
  return bag_weight * task.loss_sum(out.x, y) +
         (1.0 - bag_weight) * (sample_weights(task, y) * instance).sum();
}

constexpr const char* kInstead =
    "its instance loss needs a class label; abmil trains bags of every task";

// The two CLAM families differ only in their last block (one attention branch or one a class).
Family clam_family(const char* name, decltype(Family::head) head) {
  return Family{name,
                records::PackUnit::bag,
                {"attention", "bag_weight", "dropout", "gated", "hidden", "instance_loss",
                 "k_sample", "subtyping"},
                &settings,
                &build,
                head,
                &objective,
                {records::PackTask::classification},
                kInstead};
}

}  // namespace

const Family& clam_sb() {
  static const Family family = clam_family("clam_sb", &single_branch);
  return family;
}

const Family& clam_mb() {
  static const Family family = clam_family("clam_mb", &multi_branch);
  return family;
}

}  // namespace mltool::train::models
