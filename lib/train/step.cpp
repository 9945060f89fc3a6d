#include "mltool/train/step.hpp"

#include <torch/torch.h>

#include <algorithm>

#include "mltool/util/error.hpp"
#include "replay.hpp"

namespace mltool::train {
namespace {

namespace F = torch::nn::functional;

// Rows [begin, begin + n) of a batch; bags cut to the longest of those rows (`lengths`: the
// real instances of each bag, on the CPU), the padding past it being dropped.
Activation slice(const Activation& in, std::int64_t begin, std::int64_t n,
                 const torch::Tensor& lengths) {
  Activation out{in.x.narrow(0, begin, n), {}};
  if (in.mask.defined()) {
    out.mask = in.mask.narrow(0, begin, n);
    const auto longest =
        std::max<std::int64_t>(1, lengths.narrow(0, begin, n).max().item<std::int64_t>());
    out.x = out.x.narrow(1, 0, longest);
    out.mask = out.mask.narrow(1, 0, longest);
  }
  return out;
}

// The output of `in` (the logits, and what a family objective reads), block by block; adds
// each block's output bytes to `*total`.
Activation output_of(BlockModel& model, Activation a, std::int64_t* total) {
  for (std::size_t i = 0; i < model.size(); ++i) {
    a = model.forward(std::move(a), i, i + 1);
    *total += static_cast<std::int64_t>(a.x.nbytes()) +
              (a.mask.defined() ? static_cast<std::int64_t>(a.mask.nbytes()) : 0);
  }
  return a;
}

class CrossEntropy : public StepLoss {
 public:
  explicit CrossEntropy(torch::Tensor weights) : weights_(std::move(weights)) {}
  torch::Tensor loss_sum(const torch::Tensor& out, const torch::Tensor& y) const override {
    auto options = F::CrossEntropyFuncOptions().reduction(torch::kSum);
    if (weights_.defined()) options.weight(weights_);
    return F::cross_entropy(out, y, options);
  }
  torch::Tensor weight_sum(const torch::Tensor& y) const override {
    return weights_.defined() ? weights_.index_select(0, y).sum() : StepLoss::weight_sum(y);
  }
  torch::Tensor loss(const torch::Tensor& out, const torch::Tensor& y) const override {
    auto options = F::CrossEntropyFuncOptions();
    if (weights_.defined()) options.weight(weights_);
    return F::cross_entropy(out, y, options);
  }

 private:
  torch::Tensor weights_;
};

// A per-sample loss in parts: each part's weighted sum over the whole batch's weights.
torch::Tensor per_sample_parts(BlockModel& model, const Activation& in, const torch::Tensor& y,
                               const StepLoss& loss, const std::vector<std::int64_t>& sizes,
                               const torch::Tensor& lengths, std::int64_t* largest) {
  const torch::Tensor denominator = loss.weight_sum(y);
  torch::Tensor total;
  std::int64_t begin = 0;
  for (const auto n : sizes) {
    const auto part = slice(in, begin, n, lengths);
    std::int64_t part_bytes = 0;
    const auto l =
        output_loss_sum(model, loss, output_of(model, part, &part_bytes), y.narrow(0, begin, n)) /
        denominator;
    l.backward();
    *largest = std::max(*largest, part_bytes);
    total = total.defined() ? total + l.detach() : l.detach();
    begin += n;
  }
  return total;
}

// A loss of the whole batch in parts: outputs without graphs, their gradient from the whole
// batch's loss, then each part again with its graph, back-propagating its slice.
torch::Tensor whole_batch_parts(BlockModel& model, const Activation& in, const torch::Tensor& y,
                                const StepLoss& loss, const std::vector<std::int64_t>& sizes,
                                const torch::Tensor& lengths, std::int64_t* largest) {
  if (model.objective())
    throw UsageError("a model family with its own loss terms needs a per-sample loss");
  const torch::Device device = in.x.device();
  const RngState rng = save_rng(device);
  const BufferSnapshot buffers = snapshot_buffers(model, 0, model.part_count());
  std::vector<torch::Tensor> outputs;
  {
    const torch::NoGradGuard no_grad;
    std::int64_t begin = 0;
    for (const auto n : sizes) {
      std::int64_t part_bytes = 0;
      outputs.push_back(output_of(model, slice(in, begin, n, lengths), &part_bytes).x);
      begin += n;
    }
  }
  restore_buffers(buffers);
  restore_rng(rng, device);
  const auto all = torch::cat(outputs).detach().requires_grad_(true);
  const auto total = loss.loss(all, y);
  const auto grad = torch::autograd::grad({total}, {all})[0];
  std::int64_t begin = 0;
  for (const auto n : sizes) {
    std::int64_t part_bytes = 0;
    output_of(model, slice(in, begin, n, lengths), &part_bytes)
        .x.backward(grad.narrow(0, begin, n));
    *largest = std::max(*largest, part_bytes);
    begin += n;
  }
  return total.detach();
}

}  // namespace

torch::Tensor StepLoss::weight_sum(const torch::Tensor& y) const {
  return torch::full({}, static_cast<double>(y.size(0)), y.options().dtype(torch::kFloat32));
}

torch::Tensor StepLoss::loss(const torch::Tensor& out, const torch::Tensor& y) const {
  return loss_sum(out, y) / weight_sum(y);
}

torch::Tensor output_loss_sum(const BlockModel& model, const StepLoss& loss, const Activation& out,
                              const torch::Tensor& y) {
  if (!model.objective()) return loss.loss_sum(out.x, y);
  if (!loss.per_sample())
    throw UsageError("a model family with its own loss terms needs a per-sample loss");
  return model.objective()(loss, out, y);
}

torch::Tensor output_loss(const BlockModel& model, const StepLoss& loss, const Activation& out,
                          const torch::Tensor& y) {
  if (!model.objective()) return loss.loss(out.x, y);
  return output_loss_sum(model, loss, out, y) / loss.weight_sum(y);
}

torch::Tensor sample_weights(const StepLoss& loss, const torch::Tensor& y) {
  std::vector<torch::Tensor> w;
  for (std::int64_t i = 0; i < y.size(0); ++i) w.push_back(loss.weight_sum(y.narrow(0, i, 1)));
  return w.empty() ? torch::zeros({0}, y.options().dtype(torch::kFloat32)) : torch::stack(w);
}

std::unique_ptr<StepLoss> cross_entropy_loss(torch::Tensor class_weights) {
  return std::make_unique<CrossEntropy>(std::move(class_weights));
}

std::vector<std::int64_t> micro_batch_sizes(std::int64_t batch, std::int64_t parts) {
  if (batch < 1 || parts < 1)
    throw UsageError("micro-batches: " + std::to_string(parts) + " parts of a batch of " +
                     std::to_string(batch));
  parts = std::min(parts, batch);
  std::vector<std::int64_t> sizes(static_cast<std::size_t>(parts), batch / parts);
  for (std::int64_t i = 0; i < batch % parts; ++i) ++sizes[static_cast<std::size_t>(i)];
  return sizes;
}

torch::Tensor accumulate_gradients(BlockModel& model, const Activation& in, const torch::Tensor& y,
                                   const StepLoss& loss, std::int64_t micro_batches,
                                   std::int64_t* activation_bytes) {
  const auto sizes = micro_batch_sizes(in.x.size(0), micro_batches);
  std::int64_t largest = 0;
  torch::Tensor total;
  if (sizes.size() == 1) {
    total = output_loss(model, loss, output_of(model, in, &largest), y);
    total.backward();
    total = total.detach();
  } else {
    // Bags: one host copy of the lengths per step, to cut each part's padding.
    const torch::Tensor lengths =
        in.mask.defined() ? in.mask.sum(1).to(torch::kCPU, torch::kInt64) : torch::Tensor();
    total = loss.per_sample() ? per_sample_parts(model, in, y, loss, sizes, lengths, &largest)
                              : whole_batch_parts(model, in, y, loss, sizes, lengths, &largest);
  }
  if (activation_bytes) *activation_bytes = largest;
  return total;
}

}  // namespace mltool::train
