// predict's model: a finished run's model for inference (train::TrainedRun::model) scoring one
// slide at a time, batches gathered ahead and split on out-of-memory (see predict_parts.hpp).
#include <torch/script.h>
#include <torch/torch.h>

#include <future>

#include "mltool/features/stain.hpp"
#include "mltool/util/batch_split.hpp"
#include "mltool/util/error.hpp"
#include "mltool/util/file.hpp"
#include "mltool/util/parallel.hpp"
#include "predict_parts.hpp"

namespace mltool::predict {

namespace {

using json = nlohmann::json;

// Rows `rows[begin, end)` of `source` as one tensor of its row shape, decoded (tiles) on up to
// `threads` threads, in pinned memory if `pinned` (for an asynchronous copy to a GPU).
torch::Tensor gather(const RowSource& source, const std::vector<std::int64_t>& rows,
                     std::size_t begin, std::size_t end, int threads, bool pinned) {
  std::vector<std::int64_t> shape = source.row_shape();
  shape.insert(shape.begin(), static_cast<std::int64_t>(end - begin));
  auto out =
      torch::empty(shape, torch::TensorOptions().dtype(source.dtype()).pinned_memory(pinned));
  auto* base = static_cast<std::uint8_t*>(out.data_ptr());
  const std::size_t bytes = static_cast<std::size_t>(source.row_bytes());
  constexpr std::size_t kChunk = 32;
  const std::size_t chunks = (end - begin + kChunk - 1) / kChunk;
  util::parallel_for(chunks, threads, [&](std::size_t c) {
    const std::size_t first = begin + c * kChunk, n = std::min(kChunk, end - first);
    source.copy_rows(rows.data() + first, n, base + (first - begin) * bytes);
  });
  return out;
}

}  // namespace

train::RunWeights run_weights(const PredictJob& job) {
  return job.weights == Weights::best ? train::RunWeights::best : train::RunWeights::final_weights;
}

Predictor::Predictor(const TrainedRun& run, const PredictJob& job, const torch::Device& device)
    : model_(run.model(run_weights(job), device)),
      device_(device),
      batch_(job.batch),
      retry_(!job.no_oom_retry),
      threads_(util::thread_count(job.threads)) {
  stain_ = predict_stain(run, job, stain_record_);
  profiler_ = std::make_unique<util::StepProfiler>(job.profile, device_.is_cuda(), "batch");
}

// A bag's logits, and its attention per instance when the model tells it.
SlideScores Predictor::score_bag(const torch::Tensor& x) const {
  const train::BagScores b = model_.bag(x);
  SlideScores out;
  out.logits = b.logits;
  if (b.attention.defined())
    out.attention.assign(b.attention.data_ptr<float>(),
                         b.attention.data_ptr<float>() + b.attention.numel());
  return out;
}

// Tiles and images: batches of `batch_` rows from the slide's first, the next one gathered
// (decoded) while this one computes; on a GPU gathered into pinned memory and copied
// asynchronously. Bags: the slide's rows as one bag.
SlideScores Predictor::score(const RowSource& source, const std::vector<std::int64_t>& rows,
                             std::uint64_t first_batch) const {
  torch::NoGradGuard no_grad;
  const bool features = source.dtype() != torch::kUInt8;  // tiles' pixels stay uint8
  const bool cuda = device_.is_cuda();
  const auto prepare = [&](const torch::Tensor& host) {
    const auto x = host.to(device_, /*non_blocking=*/cuda);
    if (features) return x.to(torch::kFloat32);
    std::vector<std::uint8_t> unchanged;
    return stain_ ? stain_->apply(x, unchanged) : x;  // before the model's preprocessing
  };
  if (model_.is_bag()) {
    profiler_->begin_step();
    auto out = score_bag(prepare(gather(source, rows, 0, rows.size(), threads_, cuda)));
    profiler_->end_step();
    return out;
  }
  const auto batch = static_cast<std::size_t>(batch_);
  const auto fetch = [&](std::size_t b) {
    return gather(source, rows, b, std::min(rows.size(), b + batch), threads_, cuda);
  };
  SlideScores out;
  std::vector<torch::Tensor> parts;
  util::BatchSplitter splitter(batch_, retry_, {});
  const auto forward = [&](const torch::Tensor& x) { return model_.forward(x); };
  auto ahead = std::async(std::launch::async, fetch, std::size_t{0});
  for (std::size_t b = 0; b < rows.size(); b += batch) {
    profiler_->begin_step();
    const auto host = ahead.get();
    if (b + batch < rows.size()) ahead = std::async(std::launch::async, fetch, b + batch);
    std::optional<util::BatchSplit> split;
    parts.push_back(
        splitter
            .forward(prepare(host), first_batch + b / batch, forward, device_, model_.name(), split)
            .to(torch::kCPU, torch::kFloat32));
    if (split) {
      json j = split->to_json();
      j["first_row"] = b;
      j["rows"] = host.size(0);
      out.splits.push_back(j);
    }
    profiler_->end_step();
  }
  out.logits = parts.empty() ? torch::zeros({0, 0}) : torch::cat(parts);
  return out;
}

}  // namespace mltool::predict
