// Training steps in parts (lib/train/step.cpp): micro-batches accumulate exactly the
// whole batch's gradient for models without batch norm, class weights included; with batch
// norm each part normalizes by its own statistics, so the gradients differ.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "mltool/train/model_spec.hpp"
#include "mltool/train/models.hpp"
#include "mltool/train/step.hpp"

namespace mltool::train {
namespace {

std::shared_ptr<BlockModel> make(const nlohmann::json& spec, std::int64_t dims,
                                 std::int64_t classes) {
  torch::manual_seed(11);
  return build_model(parse_model_spec(spec, "spec"), dims, classes);
}

// Every parameter's .grad after one step's forward and backward (the gradients zeroed first).
std::vector<torch::Tensor> gradients(BlockModel& model, const Activation& in,
                                     const torch::Tensor& y, const torch::Tensor& weights,
                                     std::int64_t parts, torch::Tensor* loss = nullptr) {
  model.zero_grad(true);
  const auto l = accumulate_gradients(model, in, y, *cross_entropy_loss(weights), parts);
  if (loss) *loss = l;
  std::vector<torch::Tensor> out;
  for (const auto& p : model.parameters()) out.push_back(p.grad().clone());
  return out;
}

// The largest difference of each tensor relative to its largest magnitude. A gradient that is
// zero but for rounding (the attention score's bias: softmax ignores a constant shift; below
// 1e-6 of the largest gradient) is compared relative to the largest gradient of all instead.
double max_relative_error(const std::vector<torch::Tensor>& a,
                          const std::vector<torch::Tensor>& b) {
  EXPECT_EQ(a.size(), b.size());
  double largest = 0;
  for (const auto& t : b) largest = std::max(largest, t.abs().max().item<double>());
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    double scale = b[i].abs().max().item<double>();
    if (scale < 1e-6 * largest) scale = largest;
    worst = std::max(worst, (a[i] - b[i]).abs().max().item<double>() / std::max(scale, 1e-30));
  }
  return worst;
}

TEST(MicroBatchSizes, FirstPartsTakeTheRemainder) {
  EXPECT_EQ(micro_batch_sizes(10, 3), (std::vector<std::int64_t>{4, 3, 3}));
  EXPECT_EQ(micro_batch_sizes(12, 4), (std::vector<std::int64_t>{3, 3, 3, 3}));
  EXPECT_EQ(micro_batch_sizes(7, 1), (std::vector<std::int64_t>{7}));
  EXPECT_EQ(micro_batch_sizes(2, 5), (std::vector<std::int64_t>{1, 1}));  // at most one a sample
}

TEST(MicroBatches, MlpGradientsEqualTheWholeBatch) {
  auto model = make({{"family", "mlp"}, {"hidden", {16, 8}}, {"activation", "gelu"}}, 12, 3);
  torch::manual_seed(1);
  const Activation in{torch::randn({10, 12}), {}};
  const auto y = torch::randint(0, 3, {10});
  const auto weights = torch::tensor({0.5, 2.0, 1.25}, torch::kFloat32);
  for (const auto& w : {torch::Tensor(), weights}) {
    torch::Tensor whole_loss, parts_loss;
    const auto whole = gradients(*model, in, y, w, 1, &whole_loss);
    for (const std::int64_t parts : {2, 3, 10}) {
      const auto split = gradients(*model, in, y, w, parts, &parts_loss);
      EXPECT_LE(max_relative_error(split, whole), 1e-5)
          << parts << " parts, " << (w.defined() ? "weighted" : "unweighted");
      EXPECT_NEAR(parts_loss.item<double>(), whole_loss.item<double>(), 1e-6);
    }
  }
}

TEST(MicroBatches, AbmilGradientsEqualTheWholeBatch) {
  auto model = make({{"family", "abmil"}, {"hidden", {8}}, {"attention", 6}}, 5, 2);
  torch::manual_seed(2);
  // Seven bags of 2..9 instances padded to 9; the parts are cut to their own longest bag.
  const std::vector<std::int64_t> lengths{3, 9, 2, 5, 4, 2, 7};
  const auto mask =
      torch::arange(9).unsqueeze(0) < torch::tensor(lengths, torch::kInt64).unsqueeze(1);
  const Activation in{torch::randn({7, 9, 5}).masked_fill(mask.logical_not().unsqueeze(-1), 0),
                      mask};
  const auto y = torch::tensor({0, 1, 1, 0, 1, 0, 0}, torch::kInt64);
  const auto weights = torch::tensor({1.0, 3.0}, torch::kFloat32);
  for (const auto& w : {torch::Tensor(), weights}) {
    const auto whole = gradients(*model, in, y, w, 1);
    for (const std::int64_t parts : {2, 3, 7})
      EXPECT_LE(max_relative_error(gradients(*model, in, y, w, parts), whole), 1e-5)
          << parts << " parts, " << (w.defined() ? "weighted" : "unweighted");
  }
}

// Families with their own loss terms (clam's instance loss, dsmil's max-instance loss): the
// parts still add up to the whole batch's gradient, the step's loss is the objective's (not
// the task's loss of the logits alone), and a bag's terms are its own whatever it is padded to.
TEST(MicroBatches, FamilyObjectivesAddUpOverParts) {
  const std::vector<nlohmann::json> specs = {
      {{"family", "clam_sb"}, {"hidden", {8}}, {"attention", 6}, {"dropout", 0}, {"k_sample", 3}},
      {{"family", "clam_mb"},
       {"hidden", {8}},
       {"attention", 6},
       {"dropout", 0},
       {"k_sample", 3},
       {"subtyping", true}},
      {{"family", "dsmil"}, {"passing_v", true}}};
  torch::manual_seed(3);
  const std::vector<std::int64_t> lengths{3, 9, 2, 5, 4, 1, 7};
  const auto mask =
      torch::arange(9).unsqueeze(0) < torch::tensor(lengths, torch::kInt64).unsqueeze(1);
  const Activation in{torch::randn({7, 9, 5}).masked_fill(mask.logical_not().unsqueeze(-1), 0),
                      mask};
  const auto y = torch::tensor({0, 2, 1, 0, 1, 2, 0}, torch::kInt64);
  const auto weights = torch::tensor({1.0, 3.0, 0.5}, torch::kFloat32);
  for (const auto& spec : specs) {
    auto model = make(spec, 5, 3);
    ASSERT_TRUE(model->objective()) << spec.dump();
    for (const auto& w : {torch::Tensor(), weights}) {
      torch::Tensor whole_loss, parts_loss;
      const auto whole = gradients(*model, in, y, w, 1, &whole_loss);
      for (const std::int64_t parts : {2, 3, 7}) {
        EXPECT_LE(max_relative_error(gradients(*model, in, y, w, parts, &parts_loss), whole), 1e-5)
            << spec.dump() << ", " << parts << " parts";
        EXPECT_NEAR(parts_loss.item<double>(), whole_loss.item<double>(), 1e-6) << spec.dump();
      }
      const torch::NoGradGuard no_grad;
      const auto logits_only = cross_entropy_loss(w)->loss(model->forward(in), y);
      EXPECT_GT(std::abs(whole_loss.item<double>() - logits_only.item<double>()), 1e-4)
          << spec.dump() << ": the family's own terms left out";
    }
    const torch::NoGradGuard no_grad;
    const auto padded = model->forward(in, 0, model->size());
    for (std::int64_t b = 0; b < 7; ++b) {
      const Activation alone{in.x.narrow(0, b, 1).narrow(1, 0, lengths[b]),
                             mask.narrow(0, b, 1).narrow(1, 0, lengths[b])};
      const auto own = model->forward(alone, 0, model->size());
      EXPECT_TRUE(torch::allclose(own.extra, padded.extra.narrow(0, b, 1), 1e-5, 1e-6))
          << spec.dump() << ", bag " << b;
      EXPECT_TRUE(torch::allclose(own.x, padded.x.narrow(0, b, 1), 1e-5, 1e-6));
    }
  }
}

TEST(MicroBatches, BatchNormUsesEachPartsStatistics) {
  auto whole = make({{"family", "mlp"}, {"hidden", {16}}, {"batch_norm", true}}, 6, 2);
  auto split = make({{"family", "mlp"}, {"hidden", {16}}, {"batch_norm", true}}, 6, 2);
  torch::manual_seed(3);
  const Activation in{torch::randn({8, 6}), {}};
  const auto y = torch::randint(0, 2, {8});
  const auto a = gradients(*whole, in, y, {}, 1);
  const auto b = gradients(*split, in, y, {}, 2);
  EXPECT_GT(max_relative_error(b, a), 1e-3);
  // The running statistics moved twice, by each half's statistics.
  const auto count = split->named_buffers()["hidden1.norm.num_batches_tracked"];
  EXPECT_EQ(count.item<std::int64_t>(), 2);
  EXPECT_FALSE(torch::allclose(split->named_buffers()["hidden1.norm.running_mean"],
                               whole->named_buffers()["hidden1.norm.running_mean"]));
}

}  // namespace
}  // namespace mltool::train
