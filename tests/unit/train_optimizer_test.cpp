// FusedAdamW (lib/train/optimizer.cpp): the fused kernel's steps equal LibTorch's AdamW loop
// (on the CPU here, through fuse_on_cpu; on a GPU the run uses it), the state is AdamW's, so
// checkpoints of either load into the other and continue alike.
#include "mltool/train/optimizer.hpp"

#include <gtest/gtest.h>
#include <torch/torch.h>

namespace mltool::train {
namespace {

using torch::optim::AdamWOptions;

std::vector<torch::optim::OptimizerParamGroup> groups_of(const std::vector<torch::Tensor>& params) {
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(std::vector<torch::Tensor>{params[0], params[1]},
                      std::make_unique<AdamWOptions>(AdamWOptions(3e-3).weight_decay(0.05)));
  groups.emplace_back(std::vector<torch::Tensor>{params[2]},
                      std::make_unique<AdamWOptions>(AdamWOptions(3e-3).weight_decay(0)));
  return groups;
}

std::vector<torch::Tensor> parameters() {
  torch::manual_seed(3);
  return {torch::randn({16, 8}).requires_grad_(), torch::randn({8, 4}).requires_grad_(),
          torch::randn({4}).requires_grad_()};
}

// Steps [from, to) on gradients that depend on the parameters (so that runs can drift apart),
// each step's batch and rate a function of its number alone.
void train(torch::optim::Optimizer& opt, const std::vector<torch::Tensor>& p, int from, int to) {
  for (int i = from; i < to; ++i) {
    torch::manual_seed(100 + i);
    const auto x = torch::randn({32, 16});
    opt.zero_grad(true);
    (torch::tanh(x.mm(p[0])).mm(p[1]) + p[2]).pow(2).mean().backward();
    for (auto& group : opt.param_groups()) group.options().set_lr(3e-3 * (1.0 + 0.1 * i));
    opt.step();
  }
}

double max_difference(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  double d = 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    d = std::max(d, (a[i] - b[i]).abs().max().item<double>());
  return d;
}

TEST(FusedAdamW, FusedStepsEqualLibTorchsLoop) {
  const auto a = parameters(), b = parameters();
  torch::optim::AdamW plain(groups_of(a), AdamWOptions(3e-3));
  FusedAdamW fused(groups_of(b), AdamWOptions(3e-3));
  EXPECT_FALSE(fused.fusable());  // no gradients yet; and on the CPU only after fuse_on_cpu
  fused.fuse_on_cpu();
  train(plain, a, 0, 30);
  train(fused, b, 0, 30);
  EXPECT_TRUE(fused.fusable());
  EXPECT_LT(max_difference(a, b), 1e-5);
  EXPECT_GT((a[0] - parameters()[0]).abs().max().item<double>(), 1e-2);  // it did train
  for (const auto& p : b) {
    const auto& s = static_cast<const torch::optim::AdamWParamState&>(
        *fused.state().at(p.unsafeGetTensorImpl()));
    EXPECT_EQ(s.step(), 30);
  }
}

TEST(FusedAdamW, CheckpointsLoadEitherWay) {
  // 10 fused steps, saved; loaded into LibTorch's AdamW and into a new FusedAdamW; 10 more
  // steps each: the weights of 20 steps without a break.
  const auto whole = parameters(), first = parameters();
  FusedAdamW straight(groups_of(whole), AdamWOptions(3e-3));
  straight.fuse_on_cpu();
  train(straight, whole, 0, 20);
  FusedAdamW before(groups_of(first), AdamWOptions(3e-3));
  before.fuse_on_cpu();
  train(before, first, 0, 10);
  std::stringstream saved;
  {
    torch::serialize::OutputArchive archive;
    before.save(archive);
    archive.save_to(saved);
  }
  auto resume = [&](torch::optim::Optimizer& o, const std::vector<torch::Tensor>& p) {
    std::stringstream in(saved.str());
    torch::serialize::InputArchive archive;
    archive.load_from(in);
    o.load(archive);
    train(o, p, 10, 20);
  };
  const auto p1 = parameters(), p2 = parameters();
  for (std::size_t i = 0; i < first.size(); ++i) {
    p1[i].data().copy_(first[i]);
    p2[i].data().copy_(first[i]);
  }
  torch::optim::AdamW plain(groups_of(p1), AdamWOptions(3e-3));
  resume(plain, p1);
  FusedAdamW fused(groups_of(p2), AdamWOptions(3e-3));
  fused.fuse_on_cpu();
  resume(fused, p2);
  EXPECT_LT(max_difference(p2, whole), 1e-6);
  EXPECT_LT(max_difference(p1, whole), 1e-5);
}

TEST(FusedAdamW, ARateReadFromADeviceScalarStepsAsTheGroupsOwn) {
  // What a CUDA graph's replays do (lib/train/graph_step.cpp): the rate in a scalar the
  // caller fills each step instead of the groups' options; and the host's counts advanced
  // by count_replayed for the parameters the last fused step updated.
  const auto a = parameters(), b = parameters();
  FusedAdamW own(groups_of(a), AdamWOptions(3e-3)), read(groups_of(b), AdamWOptions(3e-3));
  own.fuse_on_cpu();
  read.fuse_on_cpu();
  const auto lr = torch::zeros({});
  read.read_lr_from(lr);
  for (int i = 0; i < 12; ++i) {
    lr.fill_(3e-3 * (1.0 + 0.1 * i));  // what train() gives the groups at step i
    train(own, a, i, i + 1);
    train(read, b, i, i + 1);
  }
  EXPECT_EQ(max_difference(a, b), 0.0);
  // A fixed rate of 0 in the scalar: the groups' rate is not read.
  lr.fill_(0);
  const auto before = b[0].detach().clone();
  train(read, b, 12, 13);
  EXPECT_TRUE(torch::equal(b[0], before));
  ASSERT_EQ(read.last_stepped().size(), 3u);
  read.count_replayed(read.last_stepped());
  for (const auto& p : b)
    EXPECT_EQ(
        static_cast<const torch::optim::AdamWParamState&>(*read.state().at(p.unsafeGetTensorImpl()))
            .step(),
        14);
}

}  // namespace
}  // namespace mltool::train
