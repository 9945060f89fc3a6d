#include "mltool/train/step.hpp"

#include <torch/torch.h>

#include <algorithm>

#include "mltool/util/error.hpp"

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

// The logits of `in`, block by block; adds each block's output bytes to `*total`.
torch::Tensor logits_of(BlockModel& model, Activation a, std::int64_t* total) {
  for (std::size_t i = 0; i < model.size(); ++i) {
    a = model.forward(std::move(a), i, i + 1);
    *total += static_cast<std::int64_t>(a.x.nbytes()) +
              (a.mask.defined() ? static_cast<std::int64_t>(a.mask.nbytes()) : 0);
  }
  return a.x;
}

}  // namespace

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
                                   const torch::Tensor& class_weights, std::int64_t micro_batches,
                                   std::int64_t* activation_bytes) {
  const std::int64_t batch = in.x.size(0);
  const auto sizes = micro_batch_sizes(batch, micro_batches);
  auto options = F::CrossEntropyFuncOptions();
  if (class_weights.defined()) options.weight(class_weights);
  std::int64_t largest = 0;
  if (sizes.size() == 1) {
    const auto loss = F::cross_entropy(logits_of(model, in, &largest), y, options);
    loss.backward();
    if (activation_bytes) *activation_bytes = largest;
    return loss.detach();
  }
  // The whole batch's denominator: its sum of weights (stays on the device), or its size.
  options.reduction(torch::kSum);
  const torch::Tensor denominator =
      class_weights.defined()
          ? class_weights.index_select(0, y).sum()
          : torch::full({}, static_cast<double>(batch), in.x.options().dtype(torch::kFloat32));
  // Bags: one host copy of the lengths per step, to cut each part's padding.
  const torch::Tensor lengths =
      in.mask.defined() ? in.mask.sum(1).to(torch::kCPU, torch::kInt64) : torch::Tensor();
  torch::Tensor total;
  std::int64_t begin = 0;
  for (const auto n : sizes) {
    const auto part = slice(in, begin, n, lengths);
    std::int64_t part_bytes = 0;
    const auto loss =
        F::cross_entropy(logits_of(model, part, &part_bytes), y.narrow(0, begin, n), options) /
        denominator;
    loss.backward();
    largest = std::max(largest, part_bytes);
    total = total.defined() ? total + loss.detach() : loss.detach();
    begin += n;
  }
  if (activation_bytes) *activation_bytes = largest;
  return total;
}

}  // namespace mltool::train
