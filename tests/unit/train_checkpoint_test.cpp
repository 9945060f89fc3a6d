// Checkpoints (lib/train/checkpoint.cpp): a run saved after some steps and loaded into a new
// model and optimizer continues exactly as the run that never stopped — weights, optimizer
// moments, batch norm statistics and the dropout RNG included.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "mltool/train/checkpoint.hpp"
#include "mltool/train/model_spec.hpp"
#include "mltool/train/models.hpp"
#include "mltool/util/error.hpp"
#include "mltool/util/file.hpp"
#include "support/errors.hpp"
#include "support/temp_dir.hpp"

namespace mltool::train {
namespace {

struct Setup {
  std::shared_ptr<BlockModel> model;
  std::unique_ptr<torch::optim::Optimizer> optimizer;
};

Setup make(const std::string& optimizer) {
  torch::manual_seed(3);
  const auto spec = parse_model_spec(
      nlohmann::json{{"family", "mlp"}, {"hidden", {16}}, {"batch_norm", true}, {"dropout", 0.3}},
      "spec");
  Setup s{build_model(spec, 8, 3), nullptr};
  if (optimizer == "sgd")
    s.optimizer = std::make_unique<torch::optim::SGD>(s.model->parameters(),
                                                      torch::optim::SGDOptions(0.1).momentum(0.9));
  else
    s.optimizer = std::make_unique<torch::optim::AdamW>(s.model->parameters(),
                                                        torch::optim::AdamWOptions(0.01));
  return s;
}

// Steps on fixed data; dropout draws from torch's generator, which carries across steps.
void steps(Setup& s, const torch::Tensor& xs, const torch::Tensor& ys, int first, int count) {
  for (int i = first; i < first + count; ++i) {
    s.optimizer->zero_grad();
    torch::nn::functional::cross_entropy(s.model->forward(Activation{xs[i], {}}), ys[i]).backward();
    s.optimizer->step();
  }
}

std::vector<torch::Tensor> state(BlockModel& m) {
  std::vector<torch::Tensor> out;
  for (const auto& p : m.parameters()) out.push_back(p.detach().clone());
  for (const auto& b : m.buffers()) out.push_back(b.clone());
  return out;
}

void expect_equal(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i)
    EXPECT_TRUE(torch::equal(a[i], b[i])) << "tensor " << i;
}

class CheckpointRoundTrip : public ::testing::TestWithParam<std::string> {};

TEST_P(CheckpointRoundTrip, ResumedEqualsUninterrupted) {
  testing::TempDir dir;
  torch::manual_seed(42);
  const auto xs = torch::randn({6, 6, 8});
  const auto ys = torch::randint(0, 3, {6, 6});

  auto whole = make(GetParam());
  torch::manual_seed(7);
  steps(whole, xs, ys, 0, 6);
  const auto expected = state(*whole.model);

  auto first = make(GetParam());
  torch::manual_seed(7);
  steps(first, xs, ys, 0, 3);
  LoopState saved;
  saved.epoch = 2;
  saved.epoch_step = 1;
  saved.step = 3;
  saved.window_loss = 1.25;
  saved.window_count = 2;
  saved.best = 0.5;
  saved.best_epoch = 1;
  saved.metrics_bytes = 1234;
  save_checkpoint(dir / "last.pt", *first.model, *first.optimizer, saved, torch::kCPU);
  EXPECT_FALSE(util::exists(dir / "last.pt.partial"));

  auto second = make(GetParam());
  torch::manual_seed(999);  // whatever the generator holds now, loading restores it
  const auto loaded =
      load_checkpoint(dir / "last.pt", *second.model, *second.optimizer, torch::kCPU);
  EXPECT_EQ(loaded.to_json(), saved.to_json());
  steps(second, xs, ys, 3, 3);
  expect_equal(state(*second.model), expected);
}

INSTANTIATE_TEST_SUITE_P(Optimizers, CheckpointRoundTrip, ::testing::Values("adamw", "sgd"));

TEST(Checkpoint, Errors) {
  testing::TempDir dir;
  auto s = make("adamw");
  EXPECT_THROW(load_checkpoint(dir / "none.pt", *s.model, *s.optimizer, torch::kCPU), InputError);
  util::write_file_atomic(dir / "junk.pt", "not a checkpoint");
  const auto junk = testing::error_of<FormatError>(
      [&] { load_checkpoint(dir / "junk.pt", *s.model, *s.optimizer, torch::kCPU); });
  EXPECT_TRUE(testing::contains(junk, dir / "junk.pt")) << junk;
  // Another model's checkpoint.
  save_checkpoint(dir / "other.pt", *s.model, *s.optimizer, LoopState{}, torch::kCPU);
  torch::manual_seed(0);
  auto other =
      build_model(parse_model_spec(nlohmann::json{{"family", "mlp"}, {"hidden", {4}}}, "s"), 8, 3);
  torch::optim::AdamW opt(other->parameters(), torch::optim::AdamWOptions(0.01));
  EXPECT_THROW(load_checkpoint(dir / "other.pt", *other, opt, torch::kCPU), FormatError);
  EXPECT_THROW(LoopState::from_json(nlohmann::json{{"format", "mltool.checkpoint"}}, "x"),
               FormatError);
}

}  // namespace
}  // namespace mltool::train
