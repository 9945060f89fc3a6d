#include "mltool/train/optimizer.hpp"

#include <ATen/ops/_foreach_add.h>
#include <ATen/ops/_fused_adamw.h>
#include <torch/optim/sgd.h>
#include <torch/torch.h>

#include <optional>

namespace mltool::train {
namespace {

using torch::optim::AdamWOptions;
using torch::optim::AdamWParamState;

// A group's parameters with gradients, their AdamW state (created as LibTorch's AdamW does),
// and whether all of them are on CUDA.
struct GroupTensors {
  std::vector<torch::Tensor> params, grads, exp_avgs, exp_avg_sqs;
  std::vector<AdamWParamState*> states;
};

}  // namespace

bool FusedAdamW::fusable() const {
  std::optional<torch::Device> device;
  std::optional<torch::ScalarType> type;
  for (const auto& group : param_groups_) {
    if (static_cast<const AdamWOptions&>(group.options()).amsgrad()) return false;
    for (const auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      if (!(p.is_cuda() || (cpu_ && p.is_cpu())) || p.grad().is_sparse() ||
          (device && p.device() != *device) || (type && p.scalar_type() != *type) ||
          p.grad().scalar_type() != p.scalar_type())
        return false;
      device = p.device();
      type = p.scalar_type();
    }
  }
  return device.has_value();
}

torch::Tensor FusedAdamW::step(LossClosure closure) {
  torch::Tensor loss;
  if (closure) {
    torch::AutoGradMode grad(true);
    loss = closure();
  }
  const torch::NoGradGuard no_grad;
  // The CPU, and anything unusual (amsgrad, sparse gradients, tensors of several devices or
  // types): LibTorch's own loop, untouched.
  if (!fusable()) {
    torch::optim::AdamW::step(nullptr);
    return loss;
  }
  std::vector<GroupTensors> groups(param_groups_.size());
  for (std::size_t g = 0; g < param_groups_.size(); ++g) {
    auto& group = groups[g];
    for (const auto& p : param_groups_[g].params()) {
      if (!p.grad().defined()) continue;
      auto& slot = state_[p.unsafeGetTensorImpl()];
      if (!slot) {  // as LibTorch's AdamW makes it
        auto state = std::make_unique<AdamWParamState>();
        state->step(0);
        state->exp_avg(torch::zeros_like(p, torch::MemoryFormat::Preserve));
        state->exp_avg_sq(torch::zeros_like(p, torch::MemoryFormat::Preserve));
        slot = std::move(state);
      }
      auto* state = static_cast<AdamWParamState*>(slot.get());
      group.params.push_back(p);
      group.grads.push_back(p.grad());
      group.exp_avgs.push_back(state->exp_avg());
      group.exp_avg_sqs.push_back(state->exp_avg_sq());
      group.states.push_back(state);
    }
  }
  last_stepped_.clear();
  group_rates_.resize(groups.size());
  for (std::size_t g = 0; g < groups.size(); ++g) {
    auto& group = groups[g];
    if (group.params.empty()) continue;
    std::vector<torch::Tensor> steps;
    for (std::size_t i = 0; i < group.params.size(); ++i) {
      auto* state = group.states[i];
      auto& d = device_steps_[group.params[i].unsafeGetTensorImpl()];
      if (d.count != state->step() || !d.value.defined())
        d.value = torch::full({}, static_cast<double>(state->step()),
                              group.params[i].options().dtype(torch::kFloat32));
      state->step(state->step() + 1);  // the host's count, which checkpoints save
      d.count = state->step();
      steps.push_back(d.value);
      last_stepped_.push_back(group.params[i].unsafeGetTensorImpl());
    }
    at::_foreach_add_(steps, 1);
    const auto& o = static_cast<const AdamWOptions&>(param_groups_[g].options());
    const auto [beta1, beta2] = o.betas();
    // The rate as a float32 device scalar always, so that an eager step and a graph's replay
    // run the one kernel on the same values; the group's own scalar is refilled only when its
    // rate changed (never with a constant schedule).
    auto& rate = group_rates_[g];
    if (!lr_.defined() && (!rate.value.defined() || rate.rate != o.lr())) {
      if (rate.value.defined() && rate.value.device() == group.params[0].device())
        rate.value.fill_(o.lr());
      else
        rate.value = torch::full({}, o.lr(), group.params[0].options().dtype(torch::kFloat32));
      rate.rate = o.lr();
    }
    const torch::Tensor& lr = lr_.defined() ? lr_ : rate.value;
    at::_fused_adamw_(group.params, group.grads, group.exp_avgs, group.exp_avg_sqs, {}, steps, lr,
                      beta1, beta2, o.weight_decay(), o.eps(), /*amsgrad=*/false,
                      /*maximize=*/false);
  }
  return loss;
}

void FusedAdamW::count_replayed(const std::vector<void*>& stepped) {
  for (void* key : stepped) {
    auto* state = static_cast<AdamWParamState*>(state_.at(key).get());
    state->step(state->step() + 1);
    device_steps_.at(key).count = state->step();
  }
}

std::unique_ptr<torch::optim::Optimizer> make_optimizer(const TrainJob& job, BlockModel& model) {
  // Weight decay on weights (dimension >= 2), not on biases and normalization parameters.
  std::vector<torch::Tensor> decay, plain;
  for (const auto& p : model.parameters()) (p.dim() >= 2 ? decay : plain).push_back(p);
  std::vector<torch::optim::OptimizerParamGroup> groups;
  auto options = [&](double wd) -> std::unique_ptr<torch::optim::OptimizerOptions> {
    if (job.optimizer == Optimizer::sgd)
      return std::make_unique<torch::optim::SGDOptions>(
          torch::optim::SGDOptions(job.lr).momentum(job.momentum).weight_decay(wd));
    return std::make_unique<torch::optim::AdamWOptions>(
        torch::optim::AdamWOptions(job.lr).weight_decay(wd));
  };
  if (!decay.empty()) groups.emplace_back(decay, options(job.weight_decay));
  if (!plain.empty()) groups.emplace_back(plain, options(0));
  if (job.optimizer == Optimizer::sgd)
    return std::make_unique<torch::optim::SGD>(groups, torch::optim::SGDOptions(job.lr));
  return std::make_unique<FusedAdamW>(groups, torch::optim::AdamWOptions(job.lr));
}

}  // namespace mltool::train
