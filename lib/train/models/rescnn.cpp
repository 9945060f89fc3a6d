// rescnn: a residual CNN on the tiles' pixels. stem (uint8 NHWC → normalized NCHW, conv 3×3 +
// batch norm + activation), stage1 … stageS (residual units; every stage after the first
// halves the resolution), pool (global average + dropout).
#include <array>

#include "blocks.hpp"
#include "family.hpp"

namespace mltool::train::models {
namespace {

using json = nlohmann::json;

torch::nn::Conv2d conv(std::int64_t in, std::int64_t out, std::int64_t kernel,
                       std::int64_t stride) {
  return torch::nn::Conv2d(
      torch::nn::Conv2dOptions(in, out, kernel).stride(stride).padding(kernel / 2).bias(false));
}

// uint8 N×H×W×3 → float N×3×H×W scaled to [0, 1] and normalized, then conv + norm + activation.
class Stem : public Block {
 public:
  Stem(std::int64_t out, std::int64_t stride, const std::array<double, 3>& mean,
       const std::array<double, 3>& std, std::string activation)
      : activation_(std::move(activation)) {
    mean_ = register_buffer(
        "mean", torch::tensor({mean[0], mean[1], mean[2]}, torch::kFloat32).view({1, 3, 1, 1}));
    std_ = register_buffer(
        "std", torch::tensor({std[0], std[1], std[2]}, torch::kFloat32).view({1, 3, 1, 1}));
    conv_ = register_module("conv", conv(3, out, 3, stride));
    norm_ = register_module("norm", torch::nn::BatchNorm2d(out));
  }
  Activation forward(const Activation& in) override {
    auto x = pixels_to_float(in.x);
    x = (x - mean_) / std_;
    return {activate(activation_, norm_->forward(conv_->forward(x))), {}};
  }

 private:
  torch::Tensor mean_, std_;
  torch::nn::Conv2d conv_{nullptr};
  torch::nn::BatchNorm2d norm_{nullptr};
  std::string activation_;
};

// A basic residual unit: conv-norm-act-conv-norm plus the input (projected when its shape
// changes), then the activation.
class Residual : public torch::nn::Module {
 public:
  Residual(std::int64_t in, std::int64_t out, std::int64_t stride, const std::string& activation)
      : activation_(activation) {
    conv1_ = register_module("conv1", conv(in, out, 3, stride));
    norm1_ = register_module("norm1", torch::nn::BatchNorm2d(out));
    conv2_ = register_module("conv2", conv(out, out, 3, 1));
    norm2_ = register_module("norm2", torch::nn::BatchNorm2d(out));
    if (in != out || stride != 1) {
      shortcut_ = register_module("shortcut", conv(in, out, 1, stride));
      shortcut_norm_ = register_module("shortcut_norm", torch::nn::BatchNorm2d(out));
    }
  }
  torch::Tensor forward(const torch::Tensor& x) {
    auto y = activate(activation_, norm1_->forward(conv1_->forward(x)));
    y = norm2_->forward(conv2_->forward(y));
    // The sum replaces both branches' outputs, which nothing saved, before the activation: a
    // named `skip` would keep one more tensor of the unit's size alive through it, at the
    // peak of a section's recompute (the H100's 4 sections held 378 MB more than PyTorch's
    // `relu(y + shortcut(x))`).
    y = y + (shortcut_ ? shortcut_norm_->forward(shortcut_->forward(x)) : x);
    return activate(activation_, y);
  }

 private:
  torch::nn::Conv2d conv1_{nullptr}, conv2_{nullptr}, shortcut_{nullptr};
  torch::nn::BatchNorm2d norm1_{nullptr}, norm2_{nullptr}, shortcut_norm_{nullptr};
  std::string activation_;
};

class Stage : public Block {
 public:
  Stage(std::int64_t in, std::int64_t out, std::int64_t stride, std::int64_t units,
        const std::string& activation) {
    for (std::int64_t i = 0; i < units; ++i)
      units_.push_back(register_module(
          std::to_string(i),
          std::make_shared<Residual>(i == 0 ? in : out, out, i == 0 ? stride : 1, activation)));
  }
  Activation forward(const Activation& in) override {
    auto x = in.x;
    for (auto& u : units_) x = u->forward(x);
    return {x, {}};
  }
  // Its residual units are its parts: --sections may cut between them.
  std::size_t parts() const override { return units_.size(); }
  Activation forward_part(const Activation& in, std::size_t i) override {
    return {units_.at(i)->forward(in.x), {}};
  }
  std::vector<torch::Tensor> part_buffers(std::size_t i) override {
    return units_.at(i)->buffers();
  }

 private:
  std::vector<std::shared_ptr<Residual>> units_;
};

class GlobalPool : public Block {
 public:
  explicit GlobalPool(double dropout) : dropout_(dropout) {}
  Activation forward(const Activation& in) override {
    auto x = in.x.mean({2, 3});
    if (dropout_ > 0) x = torch::dropout(x, dropout_, is_training());
    return {x, {}};
  }

 private:
  double dropout_;
};

json settings(const json& doc, const std::string&) {
  return {{"activation", doc.value("activation", "relu")},
          {"dropout", doc.value("dropout", 0.0)},
          {"channels", doc.value("channels", std::vector<std::int64_t>{32, 64, 128})},
          {"blocks_per_stage", doc.value("blocks_per_stage", std::int64_t{1})},
          {"stem_stride", doc.value("stem_stride", std::int64_t{2})},
          {"mean", doc.value("mean", std::array<double, 3>{0.485, 0.456, 0.406})},
          {"std", doc.value("std", std::array<double, 3>{0.229, 0.224, 0.225})}};
}

std::int64_t build(BlockModel& model, const json& s, std::int64_t) {
  const auto channels = s.at("channels").get<std::vector<std::int64_t>>();
  const auto activation = s.at("activation").get<std::string>();
  std::int64_t width = channels.front();
  model.add("stem", std::make_shared<Stem>(width, s.at("stem_stride").get<std::int64_t>(),
                                           s.at("mean").get<std::array<double, 3>>(),
                                           s.at("std").get<std::array<double, 3>>(), activation));
  for (std::size_t i = 0; i < channels.size(); ++i) {
    model.add("stage" + std::to_string(i + 1),
              std::make_shared<Stage>(width, channels[i], i == 0 ? 1 : 2,
                                      s.at("blocks_per_stage").get<std::int64_t>(), activation));
    width = channels[i];
  }
  model.add("pool", std::make_shared<GlobalPool>(s.at("dropout").get<double>()));
  return width;
}

}  // namespace

const Family& rescnn() {
  static const Family family{
      "rescnn",
      records::PackUnit::image,
      {"activation", "blocks_per_stage", "channels", "dropout", "mean", "std", "stem_stride"},
      &settings,
      &build};
  return family;
}

}  // namespace mltool::train::models
