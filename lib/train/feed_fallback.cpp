// The pinned feed that becomes a host feed after an out-of-memory error (feed.hpp).
#include "feed.hpp"

#include <torch/torch.h>

namespace mltool::train {

FallbackFeed::FallbackFeed(std::unique_ptr<Feed> pinned,
                           std::function<std::unique_ptr<Feed>()> make_host)
    : inner_(std::move(pinned)), make_host_(std::move(make_host)) {}

void FallbackFeed::start(const torch::Tensor& order, std::int64_t batch, std::int64_t first) {
  order_ = order;
  batch_ = batch;
  served_ = first;
  inner_->start(order, batch, first);
}

std::optional<Batch> FallbackFeed::next() {
  auto b = inner_->next();
  if (b)
    ++served_;
  else
    order_ = torch::Tensor();  // the pass is over: nothing to go on with
  return b;
}

bool FallbackFeed::to_host() {
  if (host_) return false;
  inner_.reset();  // the pinned feed's hold on the device's rows goes first
  inner_ = make_host_();
  host_ = true;
  if (order_.defined()) inner_->start(order_, batch_, served_);
  return true;
}

}  // namespace mltool::train
