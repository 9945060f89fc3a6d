// The pinned feed, and what every feed shares: batch layout and finishing.
#include "feed.hpp"

#include <torch/torch.h>

#include <algorithm>

#include "mltool/train/gather.hpp"

namespace mltool::train {
namespace detail {

Layout layout(const SplitSamples& s, const std::int64_t* ids, std::int64_t n, bool bag) {
  Layout out;
  out.batch = n;
  if (!bag) {
    out.rows.resize(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i) out.rows[i] = s.rows[static_cast<std::size_t>(ids[i])];
    return out;
  }
  for (std::int64_t i = 0; i < n; ++i)
    out.length = std::max(out.length, s.length(static_cast<std::size_t>(ids[i])));
  out.rows.resize(static_cast<std::size_t>(n * out.length));
  out.mask.assign(out.rows.size(), 0);
  for (std::int64_t i = 0; i < n; ++i) {
    const auto id = static_cast<std::size_t>(ids[i]);
    const std::int64_t begin = s.offsets[id], len = s.length(id);
    for (std::int64_t j = 0; j < out.length; ++j) {
      const bool real = j < len;
      out.rows[i * out.length + j] = s.rows[static_cast<std::size_t>(real ? begin + j : begin)];
      out.mask[i * out.length + j] = real;
    }
  }
  return out;
}

Batch finish(const torch::Tensor& raw, torch::Tensor y, torch::Tensor mask, std::int64_t batch,
             std::int64_t length, const RowSource& source, records::PackUnit unit) {
  Batch b;
  b.size = batch;
  b.y = std::move(y);
  const auto shape = source.row_shape();
  if (unit == records::PackUnit::image) {
    std::vector<std::int64_t> dims{batch};
    dims.insert(dims.end(), shape.begin(), shape.end());
    b.x = raw.view(dims);
  } else if (unit == records::PackUnit::bag) {
    b.mask = mask.to(torch::kBool);
    b.x = raw.to(torch::kFloat32)
              .view({batch, length, shape[0]})
              .masked_fill(b.mask.logical_not().unsqueeze(-1), 0);
  } else {
    b.x = raw.to(torch::kFloat32).view({batch, shape[0]});
  }
  return b;
}

}  // namespace detail

namespace {

// mltool's gather kernel; index_select where this build has no CUDA kernels but torch has CUDA.
torch::Tensor gather(const torch::Tensor& matrix, const torch::Tensor& index) {
  if (matrix.is_cuda() && !built_with_cuda_kernels()) return matrix.index_select(0, index);
  return gather_rows(matrix, index, false);
}

torch::Tensor int64_tensor(const std::vector<std::int64_t>& v) {
  return torch::from_blob(const_cast<std::int64_t*>(v.data()),
                          {static_cast<std::int64_t>(v.size())}, torch::kInt64)
      .clone();
}

class PinnedFeed : public Feed {
 public:
  PinnedFeed(std::shared_ptr<const RowSource> source, torch::Tensor matrix,
             const SplitSamples& samples, const torch::Tensor& targets, records::PackUnit unit,
             const torch::Device& device)
      : source_(std::move(source)),
        matrix_(std::move(matrix)),
        samples_(samples),
        unit_(unit),
        device_(device) {
    targets_ = targets.to(device);
    if (unit_ != records::PackUnit::bag) rows_ = int64_tensor(samples.rows).to(device);
  }

  void start(const torch::Tensor& order, std::int64_t batch, std::int64_t first) override {
    order_ = order.contiguous();
    order_device_ =
        order_.to(device_);  // the pass's permutation crosses once; batches are cut on the device
    batch_ = batch;
    position_ = std::min(first * batch, order_.size(0));
  }

  std::optional<Batch> next() override {
    const std::int64_t total = order_.size(0);
    if (position_ >= total) return std::nullopt;
    const std::int64_t n = std::min(batch_, total - position_);
    const auto ids = order_device_.narrow(0, position_, n);
    const auto y = targets_.index_select(0, ids);
    Batch b;
    if (unit_ == records::PackUnit::bag) {
      // Bag lengths vary: the padded row list is laid out on the host (B·L indices) and
      // gathered on the device like any other batch.
      const auto l = detail::layout(samples_, order_.data_ptr<std::int64_t>() + position_, n, true);
      const auto index = int64_tensor(l.rows).to(device_);
      // A copy: on the CPU .to(device_) would return the view of l.mask, freed at the end of
      // this scope (the batch's mask then read whatever reused that memory).
      const auto mask =
          torch::from_blob(const_cast<std::uint8_t*>(l.mask.data()), {n, l.length}, torch::kUInt8)
              .to(device_, /*non_blocking=*/false, /*copy=*/true);
      b = detail::finish(gather(matrix_, index), y, mask, n, l.length, *source_, unit_);
    } else {
      const auto rows = rows_.index_select(0, ids);
      b = detail::finish(gather(matrix_, rows), y, {}, n, 1, *source_, unit_);
    }
    const auto* first = order_.data_ptr<std::int64_t>() + position_;
    b.ids.assign(first, first + n);
    position_ += n;
    return b;
  }

 private:
  std::shared_ptr<const RowSource> source_;
  torch::Tensor matrix_;
  const SplitSamples& samples_;
  records::PackUnit unit_;
  torch::Device device_;
  torch::Tensor targets_, rows_;
  torch::Tensor order_, order_device_;
  std::int64_t batch_ = 1, position_ = 0;
};

}  // namespace

std::unique_ptr<Feed> pinned_feed(std::shared_ptr<const RowSource> source, torch::Tensor matrix,
                                  const SplitSamples& samples, const torch::Tensor& targets,
                                  records::PackUnit unit, const torch::Device& device) {
  return std::make_unique<PinnedFeed>(std::move(source), std::move(matrix), samples, targets, unit,
                                      device);
}

}  // namespace mltool::train
