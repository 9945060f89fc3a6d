// predict's model: a finished run's built-in family or TorchScript module with its best or
// final weights, scoring one slide at a time (see predict_parts.hpp).
#include <torch/script.h>
#include <torch/torch.h>

#include <future>

#include "../train/export.hpp"
#include "../train/script_model.hpp"
#include "mltool/features/stain.hpp"
#include "mltool/train/model_spec.hpp"
#include "mltool/util/batch_split.hpp"
#include "mltool/util/error.hpp"
#include "mltool/util/file.hpp"
#include "mltool/util/parallel.hpp"
#include "predict_parts.hpp"

namespace mltool::predict {

using train::build_model;
using train::import_safetensors;
using train::load_script_model;
using train::ModelSpec;
using train::parse_model_spec;
using train::script_block_model;
using train::ScriptModel;

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

std::string weights_file(const PredictJob& job) {
  return job.run + "/" + (job.weights == Weights::best ? "best.safetensors" : "model.safetensors");
}

Predictor::Predictor(const json& run, records::PackUnit unit, const PredictJob& job,
                     const torch::Device& device)
    : device_(device),
      batch_(job.batch),
      retry_(!job.no_oom_retry),
      name_("the model of " + job.run),
      threads_(util::thread_count(job.threads)),
      bag_(unit == records::PackUnit::bag) {
  const auto& m = run.at("model");
  const auto classes = m.at("classes").get<std::int64_t>();
  if (run.at("spec").value("family", "") == "torchscript") {
    // The trained module as the run exported it; the chosen weights are loaded over its own.
    ScriptModel s = load_script_model(job.run + "/model.script.pt");
    s.bag = bag_;
    s.pixels = unit == records::PackUnit::image;
    script_ = s.module;
    model_ = script_block_model(s, classes);
  } else {
    const ModelSpec spec = parse_model_spec(run.at("spec"), job.run + "/run.json#/spec");
    model_ = build_model(spec, m.at("input_dims").get<std::int64_t>(), classes);
  }
  stain_ = predict_stain(run, job, stain_record_);
  import_safetensors(*model_, weights_file(job));
  profiler_ = std::make_unique<util::StepProfiler>(job.profile, device_.is_cuda(), "batch");
  model_->to(device_);
  model_->eval();
}

bool Predictor::has_attention() const {
  if (!bag_) return false;
  // Every built-in bag family's forward sets Activation::attention.
  return script_ ? script_->find_method("attention").has_value() : true;
}

// A bag's logits, and its attention per instance when the model tells it.
SlideScores Predictor::score_bag(const torch::Tensor& x) const {
  SlideScores out;
  torch::Tensor w;
  if (script_) {
    out.logits = model_->forward({x.unsqueeze(0), {}}).cpu();
    if (has_attention()) w = script_->run_method("attention", x).toTensor().reshape({-1});
  } else {
    const auto mask = torch::ones({1, x.size(0)}, torch::kBool).to(device_);
    const auto y = model_->forward({x.unsqueeze(0), mask}, 0, model_->size());
    if (y.attention.defined()) w = y.attention.reshape({-1});
    out.logits = y.x.cpu();
  }
  if (w.defined()) {
    if (w.numel() != x.size(0))
      throw InputError("the TorchScript module's attention(bag) returned " +
                       std::to_string(w.numel()) + " weights for a bag of " +
                       std::to_string(x.size(0)) + " tiles");
    w = w.to(torch::kCPU, torch::kFloat32).contiguous();
    out.attention.assign(w.data_ptr<float>(), w.data_ptr<float>() + w.numel());
  }
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
  if (bag_) {
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
  const auto forward = [&](const torch::Tensor& x) { return model_->forward({x, {}}); };
  auto ahead = std::async(std::launch::async, fetch, std::size_t{0});
  for (std::size_t b = 0; b < rows.size(); b += batch) {
    profiler_->begin_step();
    const auto host = ahead.get();
    if (b + batch < rows.size()) ahead = std::async(std::launch::async, fetch, b + batch);
    std::optional<util::BatchSplit> split;
    parts.push_back(
        splitter.forward(prepare(host), first_batch + b / batch, forward, device_, name_, split)
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
