// The host feed: rows gathered on worker threads into pinned host memory a few batches
// ahead, copied to the device on a side stream one batch ahead of the compute (double
// buffering). With no workers it is the sync feed: gather and blocking copy on the caller.
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/torch.h>

#include <condition_variable>
#include <cstring>
#include <exception>
#include <map>
#include <mutex>
#include <thread>

#include "feed.hpp"

namespace mltool::train {
namespace {

class HostFeed : public Feed {
 public:
  HostFeed(std::shared_ptr<const RowSource> source, const SplitSamples& samples,
           torch::Tensor targets, records::PackUnit unit, const torch::Device& device, int workers)
      : source_(std::move(source)),
        samples_(samples),
        targets_(targets.contiguous()),
        unit_(unit),
        device_(device),
        workers_(workers) {
    if (device_.is_cuda() && workers_ > 0)
      copy_stream_ = c10::cuda::getStreamFromPool(false, device_.index());
  }
  ~HostFeed() override { stop(); }

  void start(const torch::Tensor& order, std::int64_t batch, std::int64_t first) override {
    stop();
    order_ = order.contiguous();
    batch_ = batch;
    batches_ = (order_.size(0) + batch - 1) / batch;
    next_ = first;
    taken_ = first;
    ready_.clear();
    error_ = nullptr;
    stopping_ = false;
    inflight_.reset();
    for (int w = 0; w < workers_; ++w) threads_.emplace_back([this, first, w] { work(first + w); });
  }

  std::optional<Batch> next() override {
    if (next_ >= batches_) return std::nullopt;
    const std::int64_t b = next_++;
    if (workers_ == 0) return deliver(transfer(build(b), false));
    Transfer current =
        inflight_ && inflight_->index == b ? std::move(*inflight_) : transfer(*take(b, true), true);
    inflight_.reset();
    // Double buffering: the next batch's copy is issued now, so it runs while this one computes.
    if (device_.is_cuda() && b + 1 < batches_)
      if (auto ahead = take(b + 1, false)) inflight_ = transfer(*ahead, true);
    return deliver(std::move(current));
  }

 private:
  struct HostBatch {
    std::int64_t index = 0, size = 0, length = 1;
    torch::Tensor raw, y, mask;
    std::vector<std::int64_t> ids;
  };
  struct Transfer {
    std::int64_t index = 0, size = 0, length = 1;
    torch::Tensor raw, y, mask;
    std::optional<at::cuda::CUDAEvent> copied;
    std::vector<std::int64_t> ids;
  };

  HostBatch build(std::int64_t b) const {
    const std::int64_t n = std::min(batch_, order_.size(0) - b * batch_);
    const auto l = detail::layout(samples_, order_.data_ptr<std::int64_t>() + b * batch_, n,
                                  unit_ == records::PackUnit::bag);
    const auto pinned = torch::TensorOptions().pinned_memory(device_.is_cuda());
    HostBatch h;
    h.index = b;
    h.size = n;
    h.length = l.length;
    const auto* first = order_.data_ptr<std::int64_t>() + b * batch_;
    h.ids.assign(first, first + n);
    const auto rows = static_cast<std::int64_t>(l.rows.size());
    h.raw = torch::empty({rows, source_->row_bytes() / static_cast<std::int64_t>(
                                                           torch::elementSize(source_->dtype()))},
                         pinned.dtype(source_->dtype()));
    source_->copy_rows(l.rows.data(), l.rows.size(), static_cast<std::uint8_t*>(h.raw.data_ptr()));
    const auto y = targets_.index_select(0, order_.narrow(0, b * batch_, n));
    h.y = device_.is_cuda() ? y.pin_memory() : y;
    if (!l.mask.empty()) {
      h.mask = torch::empty({n, l.length}, pinned.dtype(torch::kUInt8));
      std::memcpy(h.mask.data_ptr(), l.mask.data(), l.mask.size());
    }
    return h;
  }

  void work(std::int64_t b) {
    try {
      for (; b < batches_; b += workers_) {
        {
          std::unique_lock lock(mutex_);
          cv_.wait(lock, [&] { return stopping_ || b < taken_ + 2 * workers_; });
          if (stopping_) return;
        }
        auto h = build(b);
        std::lock_guard lock(mutex_);
        ready_.emplace(b, std::move(h));
        cv_.notify_all();
      }
    } catch (...) {
      std::lock_guard lock(mutex_);
      if (!error_) error_ = std::current_exception();
      cv_.notify_all();
    }
  }

  // Batch b from the workers; without `wait`, nothing if it is not ready yet.
  std::optional<HostBatch> take(std::int64_t b, bool wait) {
    std::unique_lock lock(mutex_);
    if (wait) cv_.wait(lock, [&] { return ready_.count(b) || error_; });
    if (error_) std::rethrow_exception(error_);
    const auto it = ready_.find(b);
    if (it == ready_.end()) return std::nullopt;
    HostBatch h = std::move(it->second);
    ready_.erase(it);
    taken_ = std::max(taken_, b + 1);
    cv_.notify_all();
    return h;
  }

  Transfer transfer(HostBatch h, bool async) {
    Transfer t{h.index, h.size, h.length, h.raw, h.y, h.mask, std::nullopt, std::move(h.ids)};
    if (!device_.is_cuda()) return t;
    if (!async) {  // the sync feed: a blocking copy on the compute stream
      t.raw = h.raw.to(device_);
      t.y = h.y.to(device_);
      if (h.mask.defined()) t.mask = h.mask.to(device_);
      return t;
    }
    // Pinned blocks go back to torch's host allocator only once the copy has finished.
    const c10::cuda::CUDAStreamGuard on_copy(*copy_stream_);
    t.raw = h.raw.to(device_, /*non_blocking=*/true);
    t.y = h.y.to(device_, true);
    if (h.mask.defined()) t.mask = h.mask.to(device_, true);
    t.copied.emplace();
    t.copied->record(*copy_stream_);
    return t;
  }

  Batch deliver(Transfer t) {
    if (t.copied) {
      const auto compute = c10::cuda::getCurrentCUDAStream(device_.index());
      t.copied->block(compute);
      t.raw.record_stream(compute);
      t.y.record_stream(compute);
      if (t.mask.defined()) t.mask.record_stream(compute);
    }
    Batch out = detail::finish(t.raw, t.y, t.mask, t.size, t.length, *source_, unit_);
    out.ids = std::move(t.ids);
    return out;
  }

  void stop() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
    threads_.clear();
  }

  std::shared_ptr<const RowSource> source_;
  const SplitSamples& samples_;
  torch::Tensor targets_;  // CPU: row i is sample i's target
  records::PackUnit unit_;
  torch::Device device_;
  int workers_;
  std::optional<c10::cuda::CUDAStream> copy_stream_;
  torch::Tensor order_;
  std::int64_t batch_ = 1, batches_ = 0, next_ = 0;
  std::optional<Transfer> inflight_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::map<std::int64_t, HostBatch> ready_;
  std::int64_t taken_ = 0;
  std::exception_ptr error_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace

std::unique_ptr<Feed> host_feed(std::shared_ptr<const RowSource> source,
                                const SplitSamples& samples, torch::Tensor targets,
                                records::PackUnit unit, const torch::Device& device, int workers) {
  return std::make_unique<HostFeed>(std::move(source), samples, std::move(targets), unit, device,
                                    workers);
}

}  // namespace mltool::train
