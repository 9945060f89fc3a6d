// --stain-norm on a pixel model's feeds: each batch's tiles normalised on its device, as the
// batch comes, before the model's preprocessing (and before --augment). Both splits, every
// feed kind: the same bytes whichever feed serves them.
#include <torch/torch.h>

#include "feed.hpp"
#include "mltool/features/stain.hpp"

namespace mltool::train {
namespace {

class StainFeed : public Feed {
 public:
  StainFeed(std::unique_ptr<Feed> inner, std::shared_ptr<const features::StainNormalizer> stain)
      : inner_(std::move(inner)), stain_(std::move(stain)) {}
  void start(const torch::Tensor& order, std::int64_t batch, std::int64_t first) override {
    inner_->start(order, batch, first);
  }
  std::optional<Batch> next() override {
    auto b = inner_->next();
    if (b) {
      std::vector<std::uint8_t> unchanged;
      b->x = stain_->apply(b->x, unchanged);
    }
    return b;
  }

 private:
  std::unique_ptr<Feed> inner_;
  std::shared_ptr<const features::StainNormalizer> stain_;
};

}  // namespace

std::unique_ptr<Feed> stained_feed(std::unique_ptr<Feed> inner,
                                   std::shared_ptr<const features::StainNormalizer> stain) {
  return std::make_unique<StainFeed>(std::move(inner), std::move(stain));
}

}  // namespace mltool::train
