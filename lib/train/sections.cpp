#include "mltool/train/sections.hpp"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <algorithm>
#include <limits>
#include <optional>

#include "mltool/util/error.hpp"
#include "replay.hpp"
#include "section_plan.hpp"

namespace mltool::train {
namespace {

std::int64_t bytes(const Activation& a) {
  std::int64_t n = static_cast<std::int64_t>(a.x.nbytes());
  if (a.mask.defined()) n += static_cast<std::int64_t>(a.mask.nbytes());
  return n;
}

// Runs parts [begin, end) one at a time; adds their outputs' bytes to `*total`.
Activation run_parts(BlockModel& model, Activation a, std::size_t begin, std::size_t end,
                     std::int64_t* total) {
  for (std::size_t i = begin; i < end; ++i) {
    a = model.forward_parts(std::move(a), i, i + 1);
    *total += bytes(a);
  }
  return a;
}

// A section's input as a leaf of its own graph: detached, and needing a gradient if it is
// floating point (the first section's input, the batch, needs none).
Activation leaf(const Activation& a, bool needs_grad) {
  Activation out{a.x.detach(), a.mask};
  if (needs_grad && out.x.is_floating_point()) out.x.requires_grad_(true);
  return out;
}

// The root of a section's backward: a scalar whose gradient with respect to `out` is `grad`.
// out.backward(grad) would keep both alive until the whole section's backward ends (the
// caller's reference, and the engine's root holding the gradient); from this root the engine
// frees the gradient after the first node and the output once the nodes that saved it ran,
// as PyTorch's non-reentrant checkpoint does: one activation less each, at the section's peak.
struct Seed : public torch::autograd::Function<Seed> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& out,
                               const torch::Tensor& grad) {
    ctx->saved_data["grad"] = grad;
    return torch::zeros({}, out.options());
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 const torch::autograd::variable_list&) {
    auto grad = ctx->saved_data.at("grad").toTensor();
    ctx->saved_data.erase("grad");
    return {grad, torch::Tensor()};
  }
};

// --offload-boundaries: a section input moved to pinned host memory (on CUDA), and back.
Activation to_host(const Activation& a) {
  auto host = [](const torch::Tensor& t) {
    if (!t.defined()) return t;
    auto out = torch::empty(t.sizes(), t.options().device(torch::kCPU).pinned_memory(true));
    out.copy_(t, /*non_blocking=*/true);
    return out;
  };
  return {host(a.x), host(a.mask)};
}
Activation to_device(const Activation& a, const torch::Device& device) {
  auto back = [&](const torch::Tensor& t) { return t.defined() ? t.to(device, true) : t; };
  return {back(a.x), back(a.mask)};
}

}  // namespace

std::vector<std::size_t> named_sections(const std::vector<std::string>& blocks,
                                        const std::vector<std::string>& starts,
                                        const std::string& where) {
  std::string all;
  for (const auto& b : blocks) all += (all.empty() ? "" : ", ") + b;
  std::vector<std::size_t> bounds{0};
  for (std::size_t i = 0; i < starts.size(); ++i) {
    const auto it = std::find(blocks.begin(), blocks.end(), starts[i]);
    const std::string at = "/sections/" + std::to_string(i) + ": '" + starts[i] + "' ";
    if (it == blocks.end())
      throw FormatError(
          at_file(where, at + "is not a block of the model (its blocks: " + all + ")"));
    const auto index = static_cast<std::size_t>(it - blocks.begin());
    if (index == 0)
      throw FormatError(at_file(where, at + "is the first block, which starts the first section "
                                            "anyway; name the blocks that start the others"));
    if (index <= bounds.back())
      throw FormatError(at_file(where, at + "does not come after '" + starts[i - 1] +
                                           "' (the blocks, in order: " + all + ")"));
    bounds.push_back(index);
  }
  bounds.push_back(blocks.size());
  return bounds;
}

std::vector<std::int64_t> part_output_sizes(BlockModel& model, const Activation& probe) {
  const torch::NoGradGuard no_grad;
  const bool training = model.is_training();
  model.eval();
  std::vector<std::int64_t> sizes;
  Activation a = probe;
  for (std::size_t i = 0; i < model.part_count(); ++i) {
    a = model.forward_parts(std::move(a), i, i + 1);
    sizes.push_back(a.x.numel());
  }
  model.train(training);
  return sizes;
}

std::vector<std::size_t> balance_sections(const std::vector<std::int64_t>& sizes, std::size_t k) {
  const std::size_t n = sizes.size();
  if (k < 1 || k > n)
    throw UsageError("--sections " + std::to_string(k) + ": the model has " + std::to_string(n) +
                     " blocks or residual units to cut between (at most one section each)");
  std::vector<std::int64_t> prefix(n + 1, 0);
  for (std::size_t i = 0; i < n; ++i) prefix[i + 1] = prefix[i] + sizes[i];
  // best[j][i]: the smallest largest-section sum of the first i blocks in j sections.
  constexpr auto kInf = std::numeric_limits<std::int64_t>::max();
  std::vector<std::vector<std::int64_t>> best(k + 1, std::vector<std::int64_t>(n + 1, kInf));
  std::vector<std::vector<std::size_t>> cut(k + 1, std::vector<std::size_t>(n + 1, 0));
  best[0][0] = 0;
  for (std::size_t j = 1; j <= k; ++j)
    for (std::size_t i = j; i <= n; ++i)
      for (std::size_t c = j - 1; c < i; ++c) {
        if (best[j - 1][c] == kInf) continue;
        const auto v = std::max(best[j - 1][c], prefix[i] - prefix[c]);
        if (v < best[j][i]) {
          best[j][i] = v;
          cut[j][i] = c;
        }
      }
  std::vector<std::size_t> bounds(k + 1, n);
  for (std::size_t j = k, i = n; j > 0; --j) {
    bounds[j] = i;
    i = cut[j][i];
    bounds[j - 1] = i;
  }
  return bounds;
}

torch::Tensor accumulate_gradients_sectioned(BlockModel& model, const Activation& in,
                                             const torch::Tensor& y, const StepLoss& step_loss,
                                             const std::vector<std::size_t>& bounds,
                                             std::int64_t* activation_bytes, bool offload) {
  const std::size_t k = bounds.size() - 1;
  const torch::Device device = in.x.device();
  offload = offload && device.is_cuda();
  std::vector<Activation> inputs(k);
  std::vector<RngState> rng(k);
  std::int64_t saved = 0, largest = 0;
  // Forward without graphs, keeping each section's input and the generators at its start.
  Activation a = in;
  {
    const torch::NoGradGuard no_grad;
    for (std::size_t s = 0; s + 1 < k; ++s) {
      inputs[s] = offload && s > 0 ? to_host(a) : a;
      if (s > 0 && !offload) saved += bytes(a);
      rng[s] = save_rng(device);
      std::int64_t section = 0;
      a = run_parts(model, a, bounds[s], bounds[s + 1], &section);
      largest = std::max(largest, section);
    }
  }
  // The last section with its graph, into the loss. Its graph, which holds its input (the
  // leaf's AccumulateGrad) and the loss, is dropped before the recomputes: only the input's
  // gradient goes on.
  if (k > 1) saved += bytes(a);
  torch::Tensor loss, grad;
  {
    Activation last = leaf(a, k > 1);
    a = Activation{};
    std::int64_t section = 0;
    const auto out = run_parts(model, last, bounds[k - 1], bounds[k], &section);
    largest = std::max(largest, section);
    const auto graph = output_loss(model, step_loss, out, y);
    graph.backward();
    loss = graph.detach();
    if (k > 1) grad = last.x.grad();
  }
  const RngState after = save_rng(device);
  // Back through the others, last first: recompute with the forward's masks, then backward
  // from a Seed, holding neither the output nor its gradient.
  for (std::size_t s = k - 1; s-- > 0;) {
    const auto buffers = snapshot_buffers(model, bounds[s], bounds[s + 1]);
    restore_rng(rng[s], device);
    Activation input = leaf(offload && s > 0 ? to_device(inputs[s], device) : inputs[s], s > 0);
    inputs[s] = Activation{};
    std::int64_t recomputed = 0;
    {
      auto root = Seed::apply(run_parts(model, input, bounds[s], bounds[s + 1], &recomputed).x,
                              std::move(grad));
      grad = torch::Tensor();
      root.backward();
    }
    largest = std::max(largest, recomputed);
    restore_buffers(buffers);  // after the backward, which holds them (their version counts)
    grad = s > 0 ? input.x.grad() : torch::Tensor();
  }
  restore_rng(after, device);
  if (activation_bytes) *activation_bytes = saved + largest;
  return loss;
}

std::vector<std::vector<std::string>> section_blocks(const BlockModel& model,
                                                     const std::vector<std::size_t>& bounds) {
  if (bounds.empty()) return {model.names()};
  std::vector<std::vector<std::string>> out;
  for (std::size_t s = 0; s + 1 < bounds.size(); ++s)
    out.push_back(model.names_of_parts(bounds[s], bounds[s + 1]));
  return out;
}

std::vector<std::size_t> plan_sections(std::int64_t sections, BlockModel& model,
                                       const RowSource& source, const SplitSamples& train,
                                       records::PackUnit unit, const torch::Device& device) {
  if (sections <= 1) return {};
  // One sample of the largest shape the run sees: a row, a tile, or the longest bag.
  std::vector<std::int64_t> dims{1};
  std::int64_t longest = 1;
  if (unit == records::PackUnit::bag) {
    for (std::size_t i = 0; i < train.size(); ++i) longest = std::max(longest, train.length(i));
    dims.push_back(longest);
  }
  for (const auto d : source.row_shape()) dims.push_back(d);
  Activation probe{
      torch::zeros(dims, torch::TensorOptions(device).dtype(
                             unit == records::PackUnit::image ? torch::kUInt8 : torch::kFloat32)),
      {}};
  if (unit == records::PackUnit::bag)
    probe.mask = torch::ones({1, longest}, torch::TensorOptions(device).dtype(torch::kBool));
  return balance_sections(part_output_sizes(model, probe), static_cast<std::size_t>(sections));
}

}  // namespace mltool::train
