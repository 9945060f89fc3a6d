// Sectioned training (lib/train/sections.cpp): keeping only the sections' inputs and
// recomputing each section in the backward pass gives a plain step's gradients, batch norm
// running statistics and generator state — dropout masks replayed, statistics moved once.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "mltool/train/model_spec.hpp"
#include "mltool/train/models.hpp"
#include "mltool/train/sections.hpp"
#include "mltool/train/step.hpp"
#include "mltool/util/device.hpp"
#include "mltool/util/error.hpp"

namespace mltool::train {
namespace {

std::shared_ptr<BlockModel> make(const nlohmann::json& spec, std::int64_t dims) {
  torch::manual_seed(21);
  return build_model(parse_model_spec(spec, "spec"), dims, 3);
}

struct After {
  std::vector<torch::Tensor> grads, buffers;
  torch::Tensor next_draw;  ///< what the generator gives after the step
  std::int64_t activation_bytes = 0;
};

// One step's forward and backward from a fixed generator state; bounds empty = plain.
After step(BlockModel& model, const Activation& in, const torch::Tensor& y,
           const std::vector<std::size_t>& bounds) {
  model.zero_grad(true);
  torch::manual_seed(5);
  After a;
  if (bounds.empty())
    accumulate_gradients(model, in, y, *cross_entropy_loss(), 1, &a.activation_bytes);
  else
    accumulate_gradients_sectioned(model, in, y, *cross_entropy_loss(), bounds,
                                   &a.activation_bytes);
  for (const auto& p : model.parameters()) a.grads.push_back(p.grad().clone());
  for (const auto& b : model.buffers()) a.buffers.push_back(b.clone());
  a.next_draw = torch::rand({4});
  return a;
}

double max_relative_error(const std::vector<torch::Tensor>& a,
                          const std::vector<torch::Tensor>& b) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double scale = std::max(b[i].abs().max().item<double>(), 1e-30);
    worst = std::max(worst, (a[i] - b[i]).abs().max().item<double>() / scale);
  }
  return worst;
}

void expect_same_step(const After& sectioned, const After& plain) {
  EXPECT_LE(max_relative_error(sectioned.grads, plain.grads), 1e-5);
  ASSERT_EQ(sectioned.buffers.size(), plain.buffers.size());
  for (std::size_t i = 0; i < plain.buffers.size(); ++i)
    EXPECT_TRUE(torch::allclose(sectioned.buffers[i].to(torch::kFloat64),
                                plain.buffers[i].to(torch::kFloat64), 1e-6, 0))
        << "buffer " << i;
  EXPECT_TRUE(torch::equal(sectioned.next_draw, plain.next_draw));
}

TEST(BalanceSections, MinimizesTheLargestSection) {
  EXPECT_EQ(balance_sections({4, 1, 1, 4}, 2), (std::vector<std::size_t>{0, 2, 4}));
  EXPECT_EQ(balance_sections({4, 1, 1, 4}, 1), (std::vector<std::size_t>{0, 4}));
  EXPECT_EQ(balance_sections({4, 1, 1, 4}, 4), (std::vector<std::size_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(balance_sections({8, 2, 2, 2, 1}, 2), (std::vector<std::size_t>{0, 1, 5}));
  EXPECT_THROW(balance_sections({1, 2}, 3), UsageError);
}

TEST(Sections, MlpWithDropoutAndBatchNormStepsAsPlain) {
  const nlohmann::json spec{
      {"family", "mlp"}, {"hidden", {16, 12, 8}}, {"dropout", 0.3}, {"batch_norm", true}};
  torch::manual_seed(1);
  const Activation in{torch::randn({10, 6}), {}};
  const auto y = torch::randint(0, 3, {10});
  auto plain_model = make(spec, 6);
  const auto plain = step(*plain_model, in, y, {});
  for (const auto& bounds :
       std::vector<std::vector<std::size_t>>{{0, 1, 4}, {0, 2, 4}, {0, 1, 2, 3, 4}}) {
    auto model = make(spec, 6);
    expect_same_step(step(*model, in, y, bounds), plain);
  }
}

TEST(Sections, AbmilBagsStepAsPlain) {
  const nlohmann::json spec{{"family", "abmil"}, {"hidden", {8, 8}}, {"dropout", 0.25}};
  torch::manual_seed(4);
  const auto mask = torch::arange(6).unsqueeze(0) < torch::tensor({2, 6, 4}).unsqueeze(1);
  const Activation in{torch::randn({3, 6, 5}).masked_fill(mask.logical_not().unsqueeze(-1), 0),
                      mask};
  const auto y = torch::tensor({0, 2, 1}, torch::kInt64);
  auto plain_model = make(spec, 5);
  const auto plain = step(*plain_model, in, y, {});
  auto model = make(spec, 5);  // embed1, embed2, attention, head
  expect_same_step(step(*model, in, y, {0, 1, 3, 4}), plain);
}

TEST(Sections, RescnnStepsAsPlain) {
  const nlohmann::json spec{{"family", "rescnn"}, {"channels", {4, 8}}, {"dropout", 0.2}};
  torch::manual_seed(2);
  const Activation in{torch::randint(0, 256, {4, 16, 16, 3}).to(torch::kUInt8), {}};
  const auto y = torch::randint(0, 3, {4});
  auto plain_model = make(spec, 1);
  const auto plain = step(*plain_model, in, y, {});
  auto model = make(spec, 1);
  const auto sizes = part_output_sizes(*model, Activation{in.x.narrow(0, 0, 1), {}});
  ASSERT_EQ(sizes.size(), 5u);  // stem, stage1, stage2, pool, head
  EXPECT_EQ(sizes[0], 4 * 8 * 8);
  const auto bounds = balance_sections(sizes, 3);
  const auto sectioned = step(*model, in, y, bounds);
  expect_same_step(sectioned, plain);
  auto again = make(spec, 1);
  expect_same_step(step(*again, in, y, {0, 2, 4, 5}), plain);  // pool's dropout recomputed
  // Tracked: plain, every block's output; sectioned, the saved section inputs plus the
  // largest section's block outputs (float32, 4 samples).
  std::int64_t all = 0, saved = 0, largest = 0;
  for (const auto n : sizes) all += n * 4 * 4;
  for (std::size_t s = 0; s + 1 < bounds.size(); ++s) {
    std::int64_t section = 0;
    for (std::size_t b = bounds[s]; b < bounds[s + 1]; ++b) section += sizes[b] * 4 * 4;
    largest = std::max(largest, section);
    if (s > 0) saved += sizes[bounds[s] - 1] * 4 * 4;
  }
  EXPECT_EQ(plain.activation_bytes, all);
  EXPECT_EQ(sectioned.activation_bytes, saved + largest);
}

TEST(Sections, CutsBetweenTheUnitsOfAStage) {
  // Two residual units a stage: each is a part, and sections cut between them step as plain.
  const nlohmann::json spec{
      {"family", "rescnn"}, {"channels", {4, 8}}, {"blocks_per_stage", 2}, {"stem_stride", 1}};
  torch::manual_seed(3);
  const Activation in{torch::randint(0, 256, {4, 16, 16, 3}).to(torch::kUInt8), {}};
  const auto y = torch::randint(0, 3, {4});
  auto plain_model = make(spec, 1);
  const auto plain = step(*plain_model, in, y, {});
  auto model = make(spec, 1);
  EXPECT_EQ(model->names(), (std::vector<std::string>{"stem", "stage1", "stage2", "pool", "head"}));
  EXPECT_EQ(model->part_names(),
            (std::vector<std::string>{"stem", "stage1.0", "stage1.1", "stage2.0", "stage2.1",
                                      "pool", "head"}));
  EXPECT_EQ(model->first_part(2), 3u);
  EXPECT_EQ(model->first_part(5), 7u);
  const std::vector<std::size_t> bounds{0, 2, 3, 5, 7};  // stem+stage1.0 | stage1.1 | stage2 | …
  expect_same_step(step(*model, in, y, bounds), plain);
  EXPECT_EQ(section_blocks(*model, bounds),
            (std::vector<std::vector<std::string>>{
                {"stem", "stage1.0"}, {"stage1.1"}, {"stage2"}, {"pool", "head"}}));
  EXPECT_EQ(part_output_sizes(*model, Activation{in.x.narrow(0, 0, 1), {}}).size(), 7u);
}

TEST(Sections, AUnitsActivationRunsWithoutItsBranchesOutputs) {
  // The peak of a section's recompute is often a residual unit's end. Beside what the
  // backward saves, the sum needs both branches' outputs (three tensors of the output's size
  // at once, the unit's least); its activation needs the sum alone, not the branches. mltool
  // held both branches through it (four: 378 MB more than PyTorch's relu(y + shortcut(x)) at
  // the H100's 4 sections). Measured with the counting CPU allocator: the unit's peak above
  // what it leaves allocated (its output among it), 3 outputs' worth then, 2 now.
  util::count_cpu_memory();
  const nlohmann::json spec{
      {"family", "rescnn"}, {"channels", {8, 32}}, {"blocks_per_stage", 1}, {"stem_stride", 1}};
  auto model = make(spec, 1);
  const std::size_t unit = 2;  // stage2.0: stride 2, 8 -> 32 channels, a projected shortcut
  ASSERT_EQ(model->part_names().at(unit), "stage2");
  Activation x{torch::randint(0, 256, {64, 32, 32, 3}).to(torch::kUInt8), {}};
  {
    const torch::NoGradGuard no_grad;
    x = model->forward_parts(x, 0, unit);
  }
  const torch::Device cpu(torch::kCPU);
  util::reset_peak_memory(cpu);
  const auto out = model->forward_parts(x, unit, unit + 1).x;
  const std::int64_t during = util::peak_memory(cpu);
  util::reset_peak_memory(cpu);
  const std::int64_t kept = util::peak_memory(cpu);
  const auto one = static_cast<std::int64_t>(out.nbytes());
  EXPECT_LE(during - kept, 2 * one + one / 2)
      << "above what it keeps: " << during - kept << " bytes; the output: " << one;
}

}  // namespace
}  // namespace mltool::train
