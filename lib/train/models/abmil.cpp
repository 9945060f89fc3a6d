// abmil: embed1 … embedN (per-instance dense layers), then gated attention pooling over each
// bag's real instances (Ilse et al. 2018), on bags of tile features.
#include <limits>

#include "blocks.hpp"
#include "family.hpp"
#include "mltool/util/error.hpp"

namespace mltool::train::models {
namespace {

using json = nlohmann::json;

// Attention-based MIL pooling (Ilse et al. 2018): a_i = w·(tanh(V h_i) ⊙ sigmoid(U h_i)),
// softmax over the bag's real instances, bag = Σ softmax(a)_i h_i.
class AttentionPool : public Block {
 public:
  AttentionPool(std::int64_t in, std::int64_t width, bool gated) {
    v_ = register_module("V", torch::nn::Linear(in, width));
    if (gated) u_ = register_module("U", torch::nn::Linear(in, width));
    w_ = register_module("w", torch::nn::Linear(width, 1));
  }
  Activation forward(const Activation& in) override {
    auto a = torch::tanh(v_->forward(in.x));
    if (u_) a = a * torch::sigmoid(u_->forward(in.x));
    auto scores = w_->forward(a).squeeze(-1);  // B × L
    if (in.mask.defined())
      scores = scores.masked_fill(in.mask.logical_not(), -std::numeric_limits<float>::infinity());
    const auto weights = torch::softmax(scores, 1);
    return {(weights.unsqueeze(-1) * in.x).sum(1), {}, weights};
  }

 private:
  torch::nn::Linear v_{nullptr}, u_{nullptr}, w_{nullptr};
};

json settings(const json& doc, const std::string& where) {
  json s = {{"activation", doc.value("activation", "relu")},
            {"dropout", doc.value("dropout", 0.0)},
            {"hidden", doc.value("hidden", std::vector<std::int64_t>{128})},
            {"attention", doc.value("attention", std::int64_t{128})},
            {"gated", doc.value("gated", true)}};
  if (s["hidden"].empty())
    throw FormatError(at_file(
        where,
        "/hidden: abmil needs at least one embedding layer (the attention pools its output)"));
  return s;
}

std::int64_t build(BlockModel& model, const json& s, std::int64_t width) {
  const auto hidden = s.at("hidden").get<std::vector<std::int64_t>>();
  for (std::size_t i = 0; i < hidden.size(); ++i) {
    model.add(
        "embed" + std::to_string(i + 1),
        std::make_shared<Dense>(width, hidden[i], false, s.at("activation").get<std::string>(),
                                s.at("dropout").get<double>()));
    width = hidden[i];
  }
  model.add("attention",
            std::make_shared<AttentionPool>(width, s.at("attention").get<std::int64_t>(),
                                            s.at("gated").get<bool>()));
  return width;
}

}  // namespace

const Family& abmil() {
  static const Family family{"abmil",
                             records::PackUnit::bag,
                             {"activation", "attention", "dropout", "gated", "hidden"},
                             &settings,
                             &build};
  return family;
}

}  // namespace mltool::train::models
