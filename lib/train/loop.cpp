#include "loop.hpp"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <memory>
#include <optional>

#include "distributed.hpp"
#include "export.hpp"
#include "graph_step.hpp"
#include "mltool/io/crc32c.hpp"
#include "mltool/train/batches.hpp"
#include "mltool/train/optimizer.hpp"
#include "mltool/train/sections.hpp"
#include "mltool/train/step.hpp"
#include "mltool/util/batch_split.hpp"
#include "mltool/util/error.hpp"
#include "mltool/util/log.hpp"
#include "mltool/util/stop.hpp"
#include "oom_step.hpp"

namespace mltool::train {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;
namespace F = torch::nn::functional;
constexpr double kPi = 3.14159265358979323846;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// Step losses stay on the device until drained at log steps, checkpoints and epoch ends only,
// so that a step never reads a value back from the device (the GPU runs ahead of the host);
// on the CPU too, so the CPU's --profile shows what a GPU step does. Draining checks each
// one is finite and adds it, in step order, to the window and epoch sums, so a resumed run
// sums identically.
class LossBook {
 public:
  explicit LossBook(LoopState& state) : state_(state) {}
  void add(const torch::Tensor& loss, std::int64_t step) {
    if (pending_.empty()) first_step_ = step;
    pending_.push_back(loss.detach());
  }
  void drain() {
    if (pending_.empty()) return;
    const auto values = torch::stack(pending_).to(torch::kCPU, torch::kFloat64);
    const auto* v = values.data_ptr<double>();
    for (std::size_t i = 0; i < pending_.size(); ++i) {
      if (!std::isfinite(v[i])) {
        bad_step_ = first_step_ + static_cast<std::int64_t>(i);
        bad_value_ = v[i];
        pending_.clear();
        throw_bad();
      }
      state_.window_loss += v[i];
      state_.epoch_loss += v[i];
      ++state_.window_count;
      ++state_.epoch_count;
    }
    pending_.clear();
  }
  std::function<void(std::int64_t step, double value)> on_bad;

 private:
  void throw_bad() { on_bad(bad_step_, bad_value_); }
  LoopState& state_;
  std::vector<torch::Tensor> pending_;
  std::int64_t first_step_ = 0, bad_step_ = 0;
  double bad_value_ = 0;
};

// SplitMix64's finaliser: nearby inputs give unrelated seeds.
std::uint64_t mix(std::uint64_t x) {
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Data parallel: dropout's generators (the CPU's, and the device's on CUDA) seeded from
// (seed, step, rank) before each step, so ranks draw other masks and a resumed run the same.
void reseed_step(std::uint64_t seed, std::int64_t step, int rank, const torch::Device& device) {
  const std::uint64_t x =
      mix(seed * 0x9E3779B97F4A7C15ull + static_cast<std::uint64_t>(step) * 0xD6E8FEB86659FD93ull +
          static_cast<std::uint64_t>(rank) + 0x2545F4914F6CDD1Dull);
  auto set = [x](at::Generator gen) {
    std::lock_guard<std::mutex> lock(gen.mutex());
    gen.set_current_seed(x);
  };
  set(at::detail::getDefaultCPUGenerator());
  if (device.is_cuda()) set(at::globalContext().defaultGenerator(device));
}

}  // namespace

double learning_rate(const TrainJob& job, std::int64_t step, std::int64_t total) {
  if (job.warmup > 0 && step < job.warmup)
    return job.lr * static_cast<double>(step + 1) / static_cast<double>(job.warmup);
  if (job.schedule == Schedule::constant) return job.lr;
  const double span = static_cast<double>(std::max<std::int64_t>(1, total - job.warmup));
  const double t = std::min(1.0, static_cast<double>(step - job.warmup) / span);
  return job.lr * 0.5 * (1.0 + std::cos(kPi * t));
}

torch::Tensor epoch_order(std::uint64_t seed, int epoch, std::int64_t n) {
  // SplitMix64 of (seed, epoch): nearby seeds and epochs give unrelated streams.
  auto gen = at::make_generator<at::CPUGeneratorImpl>(mix(
      seed * 0x9E3779B97F4A7C15ull + static_cast<std::uint64_t>(epoch) + 0x632BE59BD9B4E019ull));
  return torch::randperm(n, gen, torch::TensorOptions().dtype(torch::kInt64));
}

void clip_gradients(const std::vector<torch::Tensor>& parameters, double max_norm) {
  std::vector<torch::Tensor> grads, norms;
  for (const auto& p : parameters)
    if (p.grad().defined()) {
      grads.push_back(p.grad());
      norms.push_back(p.grad().norm(2).to(torch::kFloat32));
    }
  if (grads.empty()) return;
  const auto total = torch::stack(norms).norm(2);
  const auto scale = (max_norm / (total + 1e-6)).clamp_max(1.0);
  for (auto& g : grads) g.mul_(scale.to(g.dtype()));
}

Evaluation evaluate(BlockModel& model, Feed& feed, const SplitSamples& samples, std::int64_t batch,
                    const Task& task, bool oom_retry) {
  const torch::NoGradGuard no_grad;
  model.eval();
  const auto n = static_cast<std::int64_t>(samples.size());
  feed.start(torch::arange(n, torch::kInt64), batch, 0);
  std::vector<torch::Tensor> outputs;
  // A batch that runs out of memory is split (util::BatchSplitter; the rows are independent
  // in eval mode): the pieces are ranges of its samples.
  util::BatchSplitter splitter(batch, oom_retry, {}, false);
  std::uint64_t number = 0;
  while (auto b = feed.next()) {
    const auto forward = [&](const torch::Tensor& rows) {
      const auto first = rows[0].item<std::int64_t>(), count = rows.size(0);
      return model.forward(
          Activation{b->x.narrow(0, first, count),
                     b->mask.defined() ? b->mask.narrow(0, first, count) : torch::Tensor()});
    };
    std::optional<util::BatchSplit> split;
    outputs.push_back(splitter
                          .forward(torch::arange(b->size, torch::kInt64), number++, forward,
                                   b->x.device(), "the model (validation)", split)
                          .to(torch::kCPU, torch::kFloat32));
  }
  model.train();
  Evaluation e;
  e.outputs = torch::cat(outputs);
  e.metrics = task.metrics(e.outputs, samples);
  return e;
}

namespace {

// run_loop's working set: the state it advances, the loss book, and what its log lines time.
struct Training {
  Training(Loop& l, LoopState& s)
      : loop(l),
        job(l.job),
        state(s),
        parameters(l.model.parameters()),
        book(s),
        lr(learning_rate(job, std::max<std::int64_t>(0, s.step - 1), l.total_steps)) {
    for (const auto size : loop.step_sizes) used += size;
  }
  Loop& loop;
  const TrainJob& job;
  LoopState& state;
  const Clock::time_point start = Clock::now();
  const std::vector<torch::Tensor> parameters;
  LossBook book;
  Clock::time_point last_log = Clock::now();
  std::int64_t samples_since_log = 0;
  // The rate of the last step done (what an epoch line resumed right at its end reports).
  double lr;
  std::int64_t used = 0;             // without --last-batch keep, the remainder is left out
  std::unique_ptr<GraphStep> graph;  // CUDA: steps replayed from a graph; null: none
};

// Drains the step losses first, so the saved sums hold every step done.
void checkpoint(Training& t, const std::string& name) {
  t.book.drain();
  if (!t.loop.run.writes()) return;
  LoopState saved = t.state;
  saved.metrics_bytes = t.loop.run.metrics_bytes();
  save_checkpoint(t.loop.run.checkpoint(name), t.loop.model, t.loop.optimizer, saved,
                  t.loop.device);
}

// A non-finite loss ends the run: logged, and thrown naming what a resume continues from.
[[noreturn]] void stop_on_bad_loss(Loop& loop, std::int64_t step, double value) {
  const std::string last =
      util::exists(loop.run.checkpoint("last.pt"))
          ? "the last good checkpoint, checkpoints/last.pt, is kept (--resume continues from it)"
          : "no checkpoint was written before it";
  const std::string message =
      "step " + std::to_string(step + 1) + ": the loss is " +
      (std::isnan(value) ? "NaN" : "infinite") +
      "; training stopped (lower --lr, clip with --clip-norm, or look for inf/NaN features); " +
      last;
  loop.run.log({{"event", "error"}, {"step", step + 1}, {"message", message}});
  throw ResourceError(at_file(loop.run.dir(), message));
}

TrainProgress progress_at(const Training& t, int epoch, std::int64_t epoch_step) {
  TrainProgress p;
  p.epoch = epoch + 1;  // of epoch (0-based)
  p.epochs = t.job.epochs;
  p.step = t.state.step;
  p.total_steps = t.loop.total_steps;
  p.epoch_step = epoch_step;
  p.steps_per_epoch = t.loop.steps_per_epoch;
  p.lr = t.lr;
  return p;
}

// Starts the training feed on the epoch's order, at state.epoch_step. Returns, data parallel,
// each step's gradient weight on this rank (else nothing).
std::vector<double> start_epoch(Training& t, int epoch) {
  Loop& loop = t.loop;
  const auto n = static_cast<std::int64_t>(loop.train.size());
  auto order = epoch_order(t.job.seed, epoch, n).narrow(0, 0, t.used);
  std::int64_t local_batch = loop.step_sizes.front();
  std::vector<double> scales;
  if (loop.dp) {
    if (local_batch < loop.dp->world())
      throw UsageError("data parallel: " + std::to_string(local_batch) +
                       " training samples per step for " + std::to_string(loop.dp->world()) +
                       " processes");
    order =
        rank_order(order, loop.step_sizes, *loop.dp, loop.task->sample_weights(loop.train), scales);
    // A loss over the whole step: each rank's gradient is already its share of the global one.
    if (!loop.task->per_sample()) scales.assign(scales.size(), 1.0);
    local_batch = rank_slice(local_batch, loop.dp->world(), loop.dp->rank()).size;
  }
  loop.train_feed.start(order, local_batch, t.state.epoch_step);
  return scales;
}

// Forward and backward over `b`, in micro-batches or sections; returns the batch's loss. Data
// parallel with a loss over the whole step (Cox), the loss is the global batch's (`global`
// samples, gathered from every rank).
torch::Tensor accumulate(Loop& loop, const Batch& b, std::int64_t global,
                         std::int64_t* activation_bytes) {
  const Activation in{b.x, b.mask};
  std::unique_ptr<StepLoss> across;
  if (loop.dp && !loop.task->per_sample()) across = rank_global_loss(*loop.task, *loop.dp, global);
  const StepLoss& loss = across ? *across : *loop.task;
  return loop.section_bounds.empty()
             ? accumulate_gradients(loop.model, in, b.y, loss, loop.micro_batches, activation_bytes)
             : accumulate_gradients_sectioned(loop.model, in, b.y, loss, loop.section_bounds,
                                              activation_bytes, loop.job.offload_boundaries);
}

// The test seam of --augment (docs/development.md): MLTOOL_DEBUG_AUGMENT=DIR appends, per
// augmented sample, "STEP SAMPLE CRC32C" to DIR/augment-rank<R>.txt, so a test can compare
// the pixels two runs (data parallel, resumed, in micro-batches) trained on.
void note_augmented(const Loop& loop, const Batch& b, std::int64_t step) {
  static const char* dir = std::getenv("MLTOOL_DEBUG_AUGMENT");
  if (!dir || !*dir) return;
  const auto x = b.x.to(torch::kCPU).contiguous();
  const auto bytes = static_cast<std::size_t>(x[0].numel());
  std::ofstream out(
      std::string(dir) + "/augment-rank" + std::to_string(loop.dp ? loop.dp->rank() : 0) + ".txt",
      std::ios::app);
  for (std::size_t i = 0; i < b.ids.size(); ++i)
    out << step << ' ' << b.ids[i] << ' '
        << io::crc32c(x.data_ptr<std::uint8_t>() + i * bytes, bytes) << '\n';
}

// A rank with no sample in a step of a loss over the whole step still joins its gathers.
torch::Tensor join_idle(Loop& loop, std::int64_t global) {
  const auto options = torch::TensorOptions().device(loop.device);
  auto targets = loop.task->targets(SplitSamples{});
  auto shape = targets.sizes().vec();
  shape[0] = 0;
  const auto out = torch::zeros({0, loop.task->outputs()}, options);
  return rank_global_loss(*loop.task, *loop.dp, global)
      ->loss(out, torch::zeros(shape, options.dtype(targets.scalar_type())))
      .detach();
}

// The update once the gradients are in: clipped (--clip-norm), then the optimizer's step.
void update(Training& t) {
  if (t.job.clip_norm > 0) clip_gradients(t.parameters, t.job.clip_norm);
  t.loop.optimizer.step();
}

// The graph step of a run whose steps can be captured (graph_step.hpp): CUDA, one process,
// AdamW, no --augment, no --no-cuda-graph; null otherwise. Its work is the eager step's.
std::unique_ptr<GraphStep> graph_step_for(Training& t) {
  Loop& loop = t.loop;
  auto* adamw = dynamic_cast<FusedAdamW*>(&loop.optimizer);
  if (t.job.no_cuda_graph || loop.dp || loop.augment || !adamw) return nullptr;
  return make_graph_step(loop.device, *adamw, [&t](const Batch& b) {
    std::int64_t bytes = 0;
    const torch::Tensor loss = accumulate(t.loop, b, b.size, &bytes);
    t.loop.peak_activation_bytes = std::max(t.loop.peak_activation_bytes, bytes);
    update(t);
    return loss;
  });
}

// The step on `b` from the run's CUDA graph, where it takes it (one part, no sections, the
// captured shapes); nothing where it does not. A failure before the capture is complete
// leaves the run to eager steps, with a warning.
std::optional<torch::Tensor> graphed_step(Training& t, const Batch& b) {
  Loop& loop = t.loop;
  if (t.graph && (loop.micro_batches != 1 || !loop.section_bounds.empty()))
    t.graph.reset();  // an out-of-memory retry cut the steps: the graph's memory goes too
  if (!t.graph || !t.graph->takes(b)) return std::nullopt;
  const bool was_captured = t.graph->captured();
  try {
    auto loss = t.graph->step(b, t.lr);
    if (!was_captured && t.graph->captured())
      log::info("CUDA graph: steps of " + std::to_string(b.size) +
                " samples replay the graph captured at step " + std::to_string(t.state.step + 1));
    return loss;
  } catch (const std::exception& e) {
    if (was_captured) throw;
    log::warn(std::string("CUDA graph: the step could not be captured (") + e.what() +
              "); every step runs eagerly");
    t.graph.reset();
    loop.optimizer.zero_grad(true);
    return std::nullopt;
  }
}

// One optimizer step on the feed's next batch; its loss goes to the book.
void train_step(Training& t, int epoch, const std::vector<double>& scales) {
  Loop& loop = t.loop;
  const TrainJob& job = t.job;
  LoopState& state = t.state;
  auto b = loop.train_feed.next();
  if (b && loop.augment) {
    b->x = loop.augment->apply(b->x, b->ids, state.step);
    note_augmented(loop, *b, state.step);
  }
  // Data parallel: a last batch smaller than the world leaves this rank nothing in it.
  const bool idle = loop.dp && state.epoch_step + 1 == loop.steps_per_epoch &&
                    rank_slice(loop.step_sizes.back(), loop.dp->world(), loop.dp->rank()).size == 0;
  if (!b && !idle)
    throw ResourceError("the training feed ended early in epoch " + std::to_string(epoch + 1));
  t.lr = learning_rate(job, state.step, loop.total_steps);
  for (auto& group : loop.optimizer.param_groups()) group.options().set_lr(t.lr);
  loop.optimizer.zero_grad(true);
  if (loop.dp) {  // dropout: other masks on each rank, the same ones on a resume
    reseed_step(job.seed, state.step, loop.dp->rank(), loop.device);
    loop.reducer->prepare(idle ? 0
                               : static_cast<int>(std::min<std::int64_t>(
                                     loop.section_bounds.empty() ? job.micro_batches : 1, b->size)),
                          scales[static_cast<std::size_t>(state.epoch_step)]);
  }
  auto loss = b && !idle ? graphed_step(t, *b) : std::nullopt;
  if (!loss) {
    std::int64_t activation_bytes = 0;
    const std::int64_t global = loop.step_sizes[static_cast<std::size_t>(state.epoch_step)];
    const bool joins = idle && loop.dp && !loop.task->per_sample();
    const torch::Tensor local_loss =
        joins  ? join_idle(loop, global)
        : idle ? torch::zeros({}, torch::TensorOptions().device(loop.device))
               : with_oom_retry(loop, state, b->size,
                                [&] { return accumulate(loop, *b, global, &activation_bytes); });
    loop.peak_activation_bytes = std::max(loop.peak_activation_bytes, activation_bytes);
    loss = loop.dp ? loop.reducer->finish(local_loss) : local_loss;
    update(t);
  }
  t.book.add(*loss, state.step);
  ++state.step;
  ++state.epoch_step;
  t.samples_since_log += loop.step_sizes[static_cast<std::size_t>(state.epoch_step - 1)];
}

// A "step" line: the mean loss since the last one, and the throughput. Returns that mean.
double log_step(Training& t, int epoch) {
  LoopState& state = t.state;
  t.book.drain();
  const double seconds = seconds_since(t.last_log);
  const double mean = state.window_loss / static_cast<double>(state.window_count);
  t.loop.run.log({{"event", "step"},
                  {"epoch", epoch + 1},
                  {"step", state.step},
                  {"loss", mean},
                  {"lr", t.lr},
                  {"samples_per_second", seconds > 0 ? t.samples_since_log / seconds : 0.0},
                  {"seconds", seconds_since(t.start)}});
  state.window_loss = 0;
  state.window_count = 0;
  t.samples_since_log = 0;
  t.last_log = Clock::now();
  return mean;
}

// SIGTERM (util/stop.hpp), seen between steps: every rank stops after the same step (data
// parallel: any rank's signal stops all, within kStopEvery steps), last.pt saved where
// --resume continues.
constexpr std::int64_t kStopEvery = 8;
void stop_if_requested(Training& t) {
  bool stop = util::stop_requested();
  if (t.loop.dp) {
    // Ranks agree every kStopEvery steps only: the exchange waits for the device, which a
    // step on a GPU otherwise need not.
    if (t.state.step % kStopEvery != 0) return;
    stop = t.loop.dp->any_rank(stop, t.loop.device);
  }
  if (!stop) return;
  checkpoint(t, "last.pt");
  t.loop.run.log({{"event", "stopped"}, {"step", t.state.step}, {"signal", "SIGTERM"}});
  throw StoppedError(
      at_file(t.loop.run.dir(), "stopped by SIGTERM after step " + std::to_string(t.state.step) +
                                    ", saved in checkpoints/last.pt; run the same command with "
                                    "--resume to continue (exit 75)"));
}

// The epoch's steps from state.epoch_step on; false when job.max_steps stopped them.
bool run_steps(Training& t, int epoch) {
  const TrainJob& job = t.job;
  LoopState& state = t.state;
  const std::vector<double> scales = start_epoch(t, epoch);
  while (state.epoch_step < t.loop.steps_per_epoch) {
    if (job.max_steps > 0 && state.step >= job.max_steps) {
      checkpoint(t, "last.pt");
      return false;
    }
    if (t.loop.profiler) t.loop.profiler->begin_step();
    train_step(t, epoch, scales);
    if (t.loop.profiler) t.loop.profiler->end_step();
    TrainProgress p = progress_at(t, epoch, state.epoch_step);
    if (state.step % job.log_every == 0) p.loss = log_step(t, epoch);
    if (job.checkpoint_every > 0 && state.step % job.checkpoint_every == 0)
      checkpoint(t, "last.pt");
    if (t.loop.progress) t.loop.progress(p);
    stop_if_requested(t);
  }
  return true;
}

// Whether `monitored` is a number that beats the best so far; if so it becomes the best.
bool note_best(LoopState& state, Monitor monitor, const json& monitored, int epoch) {
  if (!monitored.is_number()) return false;
  const double v = monitored.get<double>();
  const bool improved =
      !state.best || (lower_is_better(monitor) ? v < *state.best : v > *state.best);
  if (improved) {
    state.best = v;
    state.best_epoch = epoch + 1;
  }
  return improved;
}

// Epoch end: validation, best tracking, early stopping, the epoch's checkpoint.
void end_epoch(Training& t, int epoch) {
  Loop& loop = t.loop;
  const TrainJob& job = t.job;
  LoopState& state = t.state;
  t.book.drain();
  if (loop.dp) loop.dp->broadcast(buffers_of(loop.model));  // rank 0's batch-norm statistics
  const double train_loss =
      state.epoch_loss / static_cast<double>(std::max<std::int64_t>(1, state.epoch_count));
  const auto eval =
      evaluate(loop.model, loop.val_feed, loop.val, job.batch, *loop.task, !job.no_oom_retry);
  const auto& metrics = eval.metrics;
  const bool improved =
      note_best(state, job.monitor, metrics.at(util::name_of(kMonitors, job.monitor)), epoch);
  state.bad_epochs = improved ? 0 : state.bad_epochs + 1;
  state.epoch = epoch + 1;
  state.epoch_step = 0;
  state.epoch_loss = 0;
  state.epoch_count = 0;
  if (job.patience > 0 && state.bad_epochs >= job.patience && state.epoch < job.epochs)
    state.status = RunStatus::early_stopped;
  else if (state.epoch >= job.epochs)
    state.status = RunStatus::complete;
  json line = {
      {"event", "epoch"}, {"epoch", epoch + 1}, {"step", state.step}, {"train_loss", train_loss}};
  line.update(metrics);
  line.update(json{{"lr", t.lr}, {"best", improved}, {"seconds", seconds_since(t.start)}});
  loop.run.log(line);
  if (improved && loop.run.writes()) {
    checkpoint(t, "best.pt");
    export_safetensors(loop.model, loop.run.path("best.safetensors"), loop.run.export_metadata);
  }
  checkpoint(t, "last.pt");
  if (loop.progress) {
    TrainProgress p = progress_at(t, epoch, loop.steps_per_epoch);
    p.epoch_end = true;
    p.loss = train_loss;
    p.validation = metrics;
    p.improved = improved;
    loop.progress(p);
  }
}

}  // namespace

LoopState run_loop(Loop& loop, LoopState state) {
  Training t(loop, state);
  t.graph = graph_step_for(t);
  t.book.on_bad = [&loop](std::int64_t step, double value) { stop_on_bad_loss(loop, step, value); };
  while (state.status == RunStatus::running && state.epoch < loop.job.epochs) {
    const int epoch = state.epoch;
    if (!run_steps(t, epoch)) return state;  // job.max_steps: last.pt holds the position
    end_epoch(t, epoch);
  }
  return state;
}

}  // namespace mltool::train
