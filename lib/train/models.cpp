#include "mltool/train/models.hpp"

#include <torch/torch.h>

#include "mltool/util/error.hpp"

namespace mltool::train {
namespace {

namespace F = torch::nn::functional;

torch::Tensor activate(const std::string& name, const torch::Tensor& x) {
  if (name == "relu") return torch::relu(x);
  if (name == "gelu") return torch::gelu(x);
  if (name == "silu") return torch::silu(x);
  return torch::tanh(x);
}

// linear [+ batch norm] + activation + dropout, on the last dimension (so per instance for
// bags, whose mask passes through).
class Dense : public Block {
 public:
  Dense(std::int64_t in, std::int64_t out, bool batch_norm, std::string activation, double dropout)
      : activation_(std::move(activation)), dropout_(dropout) {
    linear_ = register_module("linear", torch::nn::Linear(in, out));
    if (batch_norm) norm_ = register_module("norm", torch::nn::BatchNorm1d(out));
  }
  Activation forward(const Activation& in) override {
    auto x = linear_->forward(in.x);
    if (norm_) x = norm_->forward(x);
    x = activate(activation_, x);
    if (dropout_ > 0) x = torch::dropout(x, dropout_, is_training());
    return {x, in.mask};
  }

 private:
  torch::nn::Linear linear_{nullptr};
  torch::nn::BatchNorm1d norm_{nullptr};
  std::string activation_;
  double dropout_;
};

class Head : public Block {
 public:
  Head(std::int64_t in, std::int64_t classes) {
    linear_ = register_module("linear", torch::nn::Linear(in, classes));
  }
  Activation forward(const Activation& in) override { return {linear_->forward(in.x), {}}; }

 private:
  torch::nn::Linear linear_{nullptr};
};

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
    const auto weights = torch::softmax(scores, 1).unsqueeze(-1);
    return {(weights * in.x).sum(1), {}};
  }

 private:
  torch::nn::Linear v_{nullptr}, u_{nullptr}, w_{nullptr};
};

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
    auto x = in.x.permute({0, 3, 1, 2}).to(torch::kFloat32).div(255.0);
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
    const auto skip = shortcut_ ? shortcut_norm_->forward(shortcut_->forward(x)) : x;
    return activate(activation_, y + skip);
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

}  // namespace

void BlockModel::add(const std::string& name, std::shared_ptr<Block> block) {
  names_.push_back(name);
  blocks_.push_back(register_module(name, std::move(block)));
}

Activation BlockModel::forward(Activation in, std::size_t begin, std::size_t end) {
  if (begin > end || end > blocks_.size())
    throw UsageError("blocks [" + std::to_string(begin) + ", " + std::to_string(end) +
                     ") of a model of " + std::to_string(blocks_.size()));
  for (std::size_t i = begin; i < end; ++i) in = blocks_[i]->forward(in);
  return in;
}

std::int64_t BlockModel::parameter_count(std::size_t i) {
  std::int64_t n = 0;
  for (const auto& p : blocks_.at(i)->parameters()) n += p.numel();
  return n;
}

std::int64_t BlockModel::parameter_count() {
  std::int64_t n = 0;
  for (const auto& p : parameters()) n += p.numel();
  return n;
}

std::shared_ptr<BlockModel> build_model(const ModelSpec& spec, std::int64_t input_dims,
                                        std::int64_t classes) {
  auto model = std::make_shared<BlockModel>();
  std::int64_t width = input_dims;
  if (spec.family == "mlp" || spec.family == "abmil") {
    const bool mlp = spec.family == "mlp";
    for (std::size_t i = 0; i < spec.hidden.size(); ++i) {
      model->add((mlp ? "hidden" : "embed") + std::to_string(i + 1),
                 std::make_shared<Dense>(width, spec.hidden[i], mlp && spec.batch_norm,
                                         spec.activation, spec.dropout));
      width = spec.hidden[i];
    }
    if (!mlp)
      model->add("attention", std::make_shared<AttentionPool>(width, spec.attention, spec.gated));
  } else {
    width = spec.channels.front();
    model->add("stem", std::make_shared<Stem>(width, spec.stem_stride, spec.mean, spec.std,
                                              spec.activation));
    for (std::size_t s = 0; s < spec.channels.size(); ++s) {
      model->add("stage" + std::to_string(s + 1),
                 std::make_shared<Stage>(width, spec.channels[s], s == 0 ? 1 : 2,
                                         spec.blocks_per_stage, spec.activation));
      width = spec.channels[s];
    }
    model->add("pool", std::make_shared<GlobalPool>(spec.dropout));
  }
  model->add("head", std::make_shared<Head>(width, classes));
  return model;
}

}  // namespace mltool::train
