// Blocks more than one model family uses (lib/train/models/): the activation functions, the
// pixels' conversion (rescnn and TorchScript modules on image datasets), a dense layer and the
// classification head. Internal to lib/train.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>

#include "mltool/train/models.hpp"

namespace mltool::train::models {

/// relu, gelu, silu or tanh (the schema's enum) applied to `x`.
torch::Tensor activate(const std::string& name, const torch::Tensor& x);

/// A batch of tiles as a pixel model reads it: uint8 N x H x W x 3 (decoded, after
/// --stain-norm and --augment) to float32 N x 3 x H x W in [0, 1] (x / 255). On a GPU the
/// permuted view stays channels-last in memory (cuDNN's fast layout); on the CPU it is
/// contiguous NCHW.
torch::Tensor pixels_to_float(const torch::Tensor& x);

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

}  // namespace mltool::train::models
