// train_model: options, dataset and spec checked; feeds, model and optimizer set up; the run
// directory started or resumed; the loop run; the results exported.
#include "mltool/train/train.hpp"

#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <map>
#include <optional>
#include <sstream>

#include "distributed.hpp"
#include "export.hpp"
#include "loop.hpp"
#include "mltool/io/feature_store.hpp"
#include "mltool/train/batches.hpp"
#include "mltool/train/model_spec.hpp"
#include "mltool/train/sections.hpp"
#include "mltool/train/step.hpp"
#include "mltool/util/device.hpp"
#include "mltool/util/error.hpp"
#include "mltool/util/file.hpp"
#include "mltool/util/log.hpp"
#include "mltool/util/output_lock.hpp"
#include "mltool/util/parallel.hpp"
#include "mltool/util/version.hpp"
#include "run_dir.hpp"

namespace mltool::train {
namespace {

// The math threads of a CPU run (util::set_math_threads); a count other than a resumed run's
// is allowed with a warning. 0 on a GPU.
int cpu_math_threads(int asked, const std::optional<nlohmann::json>& resumed) {
  const int before = resumed ? resumed->at("runtime").value("math_threads", 0) : 0;
  if (asked > 0 && before > 0 && asked != before)
    log::warn("--math-threads is now " + std::to_string(asked) + " (the run had " +
              std::to_string(before) + "): the result will differ from an uninterrupted run");
  return util::set_math_threads(asked, before);
}

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

template <typename T>
void require(bool ok, const std::string& message) {
  if (!ok) throw T(message);
}

void check_job(const TrainJob& j) {
  auto one_of = [](const std::string& v, std::initializer_list<const char*> names) {
    for (const char* n : names)
      if (v == n) return true;
    return false;
  };
  require<UsageError>(j.epochs >= 1, "--epochs must be at least 1");
  require<UsageError>(j.batch >= 1, "--batch must be at least 1");
  require<UsageError>(j.micro_batches >= 1 && j.micro_batches <= j.batch,
                      "--micro-batches must be between 1 and --batch");
  require<UsageError>(j.sections >= 1, "--sections must be at least 1");
  require<UsageError>(j.micro_batches == 1 || j.sections == 1,
                      "--micro-batches and --sections exclude each other");
  require<UsageError>(std::isfinite(j.lr) && j.lr > 0, "--lr must be a positive number");
  require<UsageError>(one_of(j.optimizer, {"adamw", "sgd"}), "--optimizer must be adamw or sgd");
  require<UsageError>(one_of(j.schedule, {"cosine", "constant"}),
                      "--schedule must be cosine or constant");
  require<UsageError>(one_of(j.feed, {"auto", "pinned", "host", "sync"}),
                      "--feed must be auto, pinned, host or sync");
  require<UsageError>(
      one_of(j.monitor, {"val_loss", "val_accuracy", "val_balanced_accuracy", "val_auc"}),
      "--monitor must be val_loss, val_accuracy, val_balanced_accuracy or val_auc");
  require<UsageError>(std::isfinite(j.weight_decay) && j.weight_decay >= 0,
                      "--weight-decay must be >= 0");
  require<UsageError>(std::isfinite(j.momentum) && j.momentum >= 0, "--momentum must be >= 0");
  require<UsageError>(std::isfinite(j.clip_norm) && j.clip_norm >= 0,
                      "--clip-norm must be >= 0 (0: no clipping)");
  require<UsageError>(
      j.warmup >= 0 && j.patience >= 0 && j.checkpoint_every >= 0 && j.max_steps >= 0,
      "--warmup, --patience, --checkpoint-every and --max-steps must be >= 0");
  require<UsageError>(j.log_every >= 1, "--log-every must be at least 1");
  require<UsageError>(!(j.resume && j.overwrite), "--resume and --overwrite exclude each other");
  require<UsageError>(one_of(j.last_batch, {"keep", "drop"}), "--last-batch must be keep or drop");
  require<UsageError>(std::isfinite(j.bucket_mb) && j.bucket_mb > 0,
                      "--dist-bucket-mb must be a positive number");
  check_data_parallel(j);
}

// Per label id, or empty for none.
std::vector<double> class_weights(const std::string& text, const SplitSamples& train,
                                  std::size_t classes) {
  if (text == "none") return {};
  std::vector<double> w;
  if (text == "balanced") {
    std::vector<double> count(classes, 0);
    for (const auto l : train.labels) ++count[static_cast<std::size_t>(l)];
    for (const double c : count)
      w.push_back(c > 0 ? static_cast<double>(train.size()) / (classes * c) : 0.0);
    return w;
  }
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    char* end = nullptr;
    const double v = std::strtod(item.c_str(), &end);
    require<UsageError>(
        !item.empty() && *end == '\0' && std::isfinite(v) && v >= 0,
        "--class-weights: '" + item + "' is not a weight (none, balanced, or W0,W1,... >= 0)");
    w.push_back(v);
  }
  require<UsageError>(w.size() == classes, "--class-weights: " + std::to_string(w.size()) +
                                               " weights for " + std::to_string(classes) +
                                               " labels");
  return w;
}

std::shared_ptr<const io::FeatureStore> open_store(const DatasetInfo& d) {
  auto store = std::make_shared<const io::FeatureStore>(io::FeatureStore::open(d.features));
  const std::string matrix = util::join_path(d.features, io::kFeaturesMatrixFile);
  const bool same = static_cast<std::int64_t>(store->rows()) == d.rows &&
                    static_cast<std::int64_t>(store->dims()) == d.dims &&
                    store->dtype() == d.dtype && util::file_size(matrix) == d.matrix_bytes;
  require<FormatError>(
      same,
      at_file(matrix,
              "is " + std::to_string(store->rows()) + " x " + std::to_string(store->dims()) + " " +
                  std::string(io::name(store->dtype())) + " (" +
                  std::to_string(util::file_size(matrix)) + " bytes), but " + d.manifest_path +
                  " pins " + std::to_string(d.rows) + " x " + std::to_string(d.dims) + " " +
                  std::string(io::name(d.dtype)) + " (" + std::to_string(d.matrix_bytes) +
                  " bytes): the feature store changed since it was packed"));
  return store;
}

// Image unit: the tiles of both splits, decoded from the tile store; rows become positions in
// a sorted list of their keys (store order, so decoding reads the store sequentially).
std::shared_ptr<const RowSource> image_source(const TrainJob& job, const DatasetInfo& d,
                                              const io::FeatureStore& store, SplitSamples& train,
                                              SplitSamples& val, std::string& path) {
  path = job.tiles.empty() ? d.tile_store : job.tiles;
  const auto& source = store.manifest().value("source", json::object());
  if (path.empty() && source.contains("tile_store") && source["tile_store"].is_string())
    path = source["tile_store"];
  require<InputError>(!path.empty(),
                      at_file(d.manifest_path,
                              "an image dataset, but neither it nor its feature store names "
                              "a tile store; pass --tiles STORE"));
  std::map<std::string, std::int64_t> local;
  for (const auto* s : {&train, &val})
    for (const auto& key : s->ids) local.emplace(key, 0);
  std::vector<std::string> keys;
  for (auto& [key, id] : local) {
    id = static_cast<std::int64_t>(keys.size());
    keys.push_back(key);
  }
  for (auto* s : {&train, &val})
    for (std::size_t i = 0; i < s->size(); ++i) s->rows[i] = local.at(s->ids[i]);
  return tile_source(path, std::move(keys));
}

std::unique_ptr<torch::optim::Optimizer> make_optimizer(const TrainJob& job, BlockModel& model) {
  // Weight decay on weights (dimension >= 2), not on biases and normalization parameters.
  std::vector<torch::Tensor> decay, plain;
  for (const auto& p : model.parameters()) (p.dim() >= 2 ? decay : plain).push_back(p);
  std::vector<torch::optim::OptimizerParamGroup> groups;
  auto options = [&](double wd) -> std::unique_ptr<torch::optim::OptimizerOptions> {
    if (job.optimizer == "sgd")
      return std::make_unique<torch::optim::SGDOptions>(
          torch::optim::SGDOptions(job.lr).momentum(job.momentum).weight_decay(wd));
    return std::make_unique<torch::optim::AdamWOptions>(
        torch::optim::AdamWOptions(job.lr).weight_decay(wd));
  };
  if (!decay.empty()) groups.emplace_back(decay, options(job.weight_decay));
  if (!plain.empty()) groups.emplace_back(plain, options(0));
  if (job.optimizer == "sgd")
    return std::make_unique<torch::optim::SGD>(groups, torch::optim::SGDOptions(job.lr));
  return std::make_unique<torch::optim::AdamW>(groups, torch::optim::AdamWOptions(job.lr));
}

std::string gib(std::uint64_t bytes) {
  std::ostringstream out;
  out.precision(2);
  out << std::fixed << static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0) << " GiB";
  return out.str();
}

bool has_batch_norm(torch::nn::Module& model) {
  for (const auto& b : model.named_buffers())
    if (b.key().size() >= 12 && b.key().compare(b.key().size() - 12, 12, "running_mean") == 0)
      return true;
  return false;
}

// The global batch of each step of an epoch. --last-batch keep trains the remainder as a
// smaller last step, unless batch norm would then get a part (a process's slice, or one of
// its micro-batches) of one sample, which it cannot normalize: that remainder is left out.
std::vector<std::int64_t> epoch_steps(const TrainJob& job, torch::nn::Module& model,
                                      std::int64_t samples) {
  auto steps = step_sizes(samples, job.batch, job.last_batch == "keep");
  if (steps.size() < 2 || steps.back() == steps.front() || !has_batch_norm(model)) return steps;
  const std::int64_t last = steps.back();
  for (int r = 0; r < job.world_size; ++r) {
    const std::int64_t part = rank_slice(last, job.world_size, r).size;
    if (part == 0) continue;
    for (const auto m : micro_batch_sizes(part, job.micro_batches))
      if (m == 1) {
        log::warn("the last " + std::to_string(last) +
                  " training samples of each epoch are left out: batch norm cannot normalize "
                  "a part of one sample (--last-batch keep; choose another --batch to keep "
                  "them)");
        steps.pop_back();
        return steps;
      }
  }
  return steps;
}

}  // namespace

TrainReport train_model(const TrainJob& job,
                        const std::function<void(const TrainProgress&)>& progress) {
  const auto start = Clock::now();
  check_job(job);
  const ModelSpec spec = read_model_spec(job.spec);
  const DatasetInfo data = read_dataset_info(job.dataset);
  const auto classes = static_cast<std::int64_t>(data.labels.size());
  require<InputError>(
      spec.unit() == data.unit,
      at_file(job.spec, "family " + spec.family + " trains on " + records::to_string(spec.unit()) +
                            " records, but " + data.manifest_path + " was packed with --unit " +
                            records::to_string(data.unit)));
  require<InputError>(
      classes >= 2, at_file(data.manifest_path, "has " + std::to_string(classes) +
                                                    " label(s); classification needs at least 2"));
  require<InputError>(
      !spec.classes || *spec.classes == classes,
      at_file(job.spec, "/classes: " + std::to_string(spec.classes.value_or(0)) + ", but " +
                            data.manifest_path + " has " + std::to_string(classes) + " labels"));
  require<InputError>(
      !spec.input_dims || data.unit == records::PackUnit::image || *spec.input_dims == data.dims,
      at_file(job.spec, "/input_dims: " + std::to_string(spec.input_dims.value_or(0)) +
                            ", but the features of " + data.manifest_path + " have " +
                            std::to_string(data.dims) + " dimensions"));
  require<UsageError>(
      job.monitor != "val_auc" || classes == 2,
      "--monitor val_auc needs two labels, the dataset has " + std::to_string(classes));
  const auto store = open_store(data);
  SplitSamples train = read_split(data, job.train_split);
  SplitSamples val = read_split(data, job.val_split);
  const auto weights = class_weights(job.class_weights, train, static_cast<std::size_t>(classes));
  torch::Device device = util::resolve_devices(job.device).front();  // the first GPU
  const bool group = job.world_size > 1 || job.join_group;
  if (group && device.is_cuda() && (job.device == "auto" || job.device == "cuda"))
    device = torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(job.local_rank));
  const auto dp = group ? std::make_unique<DataParallel>(job, device) : nullptr;
  const int threads = util::thread_count(job.threads);

  std::string tile_store;
  const auto source = data.unit == records::PackUnit::image
                          ? image_source(job, data, *store, train, val, tile_store)
                          : feature_source(store);

  // Sections: the spec's bounds, or --sections K balanced later; either checked before the run
  // directory is touched.
  require<UsageError>(spec.section_starts.empty() || (job.sections == 1 && job.micro_batches == 1),
                      "the spec's \"sections\" (" + job.spec +
                          ") and --sections or --micro-batches exclude each other");
  require<UsageError>(!job.offload_boundaries || job.sections > 1 || !spec.section_starts.empty(),
                      "--offload-boundaries needs sections (--sections K, or the spec's "
                      "\"sections\")");
  std::vector<std::size_t> named_bounds;
  {
    const auto names = build_model(spec, data.dims, classes)->names();
    if (!spec.section_starts.empty())
      named_bounds = named_sections(names, spec.section_starts, job.spec);
    else if (job.sections > 1)
      balance_sections(std::vector<std::int64_t>(names.size(), 1),
                       static_cast<std::size_t>(job.sections));
  }
  bool resumable = false;  // data parallel: rank 0 prepares it, the others wait (or fail)
  std::optional<util::OutputLock> lock;  // held by rank 0 (the writer) for the whole run
  const auto prepare = [&] {
    lock.emplace(job.output, "mltool train");
    resumable = prepare_run_dir(job.output, job.resume, job.overwrite);
  };
  dp ? dp->on_rank0(prepare) : prepare();
  if (dp) resumable = dp->broadcast_value(resumable ? 1 : 0, device) != 0;
  RunDir run(job.output, !dp || dp->rank() == 0);
  const int math_threads =
      device.is_cpu()
          ? cpu_math_threads(job.math_threads, resumable ? run.read_manifest() : std::nullopt)
          : 0;

  // The feed: pinned if asked for, or (auto) if the matrix fits where it has to be copied to.
  std::string feed = job.feed;
  torch::Tensor matrix;
  if (feed == "auto" || feed == "pinned") {
    const bool copies =
        device.is_cuda() ||
        data.unit == records::PackUnit::image;  // features on the CPU: the memory map itself
    const std::uint64_t need = pinned_bytes(*source), margin = std::uint64_t{256} << 20;
    const std::uint64_t free = copies ? util::free_memory(device) : need + margin;
    std::string why;
    if (need + margin > free)
      why = "the pinned feed needs " + std::to_string(need) + " bytes (" + gib(need) + ") on " +
            device.str() + " for the " +
            (data.unit == records::PackUnit::image ? "decoded tiles" : "feature matrix") +
            " (plus " + gib(margin) + " to train in), which has " + std::to_string(free) + " (" +
            gib(free) + ") free";
    if (why.empty()) {
      try {
        matrix = source->whole(device, threads);
      } catch (const c10::OutOfMemoryError&) {
        why = "the pinned feed ran out of memory on " + device.str() + " copying " + gib(need);
      } catch (const ResourceError& e) {
        why = e.what();
      }
    }
    if (!why.empty()) {
      if (feed == "pinned") throw ResourceError(why + "; use --feed host");
      log::warn(why + "; using the host feed");
      feed = "host";
    } else {
      feed = "pinned";
    }
  }
  const int workers = feed == "host" ? std::min(8, threads) : 0;
  auto make_feed = [&](const SplitSamples& s) {
    return feed == "pinned" ? pinned_feed(source, matrix, s, data.unit, device)
                            : host_feed(source, s, data.unit, device, workers);
  };
  auto train_feed = make_feed(train);
  auto val_feed = make_feed(val);

  torch::manual_seed(job.seed);
  auto model = build_model(spec, data.dims, classes);
  model->to(device);
  if (dp) {  // rank 0's weights and buffers everywhere
    auto tensors = model->parameters();
    for (const auto& b : model->buffers()) tensors.push_back(b);
    dp->broadcast(tensors);
  }
  auto optimizer = make_optimizer(job, *model);
  const auto n = static_cast<std::int64_t>(train.size());
  const auto steps = epoch_steps(job, *model, n);
  const auto reducer =
      dp ? std::make_unique<GradientReducer>(*dp, model->parameters(),
                                             static_cast<std::int64_t>(job.bucket_mb * 1048576.0))
         : nullptr;
  Loop loop{job,
            *model,
            *optimizer,
            *train_feed,
            *val_feed,
            train,
            val,
            device,
            {},
            classes,
            static_cast<std::int64_t>(steps.size()),
            0,
            run,
            progress,
            named_bounds.empty()
                ? plan_sections(job.sections, *model, *source, train, data.unit, device)
                : named_bounds,
            0,
            dp.get(),
            reducer.get(),
            steps};
  loop.total_steps = loop.steps_per_epoch * job.epochs;
  if (!weights.empty()) loop.class_weights = torch::tensor(weights, torch::kFloat32).to(device);

  json blocks = json::array();
  for (std::size_t i = 0; i < model->size(); ++i)
    blocks.push_back({{"name", model->names()[i]}, {"parameters", model->parameter_count(i)}});
  json manifest = {{"format", kRunFormat},
                   {"format_version", kRunFormatVersion},
                   {"created_by", util::tool_version()},
                   {"dataset",
                    {{"path", util::absolute_path(data.dir)},
                     {"manifest_sha256", data.manifest_sha256},
                     {"matrix_sha256", data.matrix_sha256},
                     {"unit", records::to_string(data.unit)},
                     {"labels", data.labels},
                     {"dims", data.dims},
                     {"train_split", job.train_split},
                     {"val_split", job.val_split},
                     {"train_samples", train.size()},
                     {"val_samples", val.size()}}},
                   {"spec", spec.document},
                   {"model",
                    {{"blocks", blocks},
                     {"parameters", model->parameter_count()},
                     {"input_dims", data.dims},
                     {"classes", classes}}},
                   {"options",
                    {{"epochs", job.epochs},
                     {"batch", job.batch},
                     {"micro_batches", job.micro_batches},
                     {"sections", job.sections},
                     {"lr", job.lr},
                     {"optimizer", job.optimizer},
                     {"weight_decay", job.weight_decay},
                     {"momentum", job.momentum},
                     {"schedule", job.schedule},
                     {"warmup", job.warmup},
                     {"clip_norm", job.clip_norm},
                     {"class_weights", weights.empty() ? json() : json(weights)},
                     {"seed", job.seed},
                     {"monitor", job.monitor},
                     {"patience", job.patience},
                     {"last_batch", job.last_batch}}},
                   {"runtime",
                    {{"device", device.str()},
                     {"feed", feed},
                     {"threads", threads},
                     {"math_threads", math_threads},
                     {"log_every", job.log_every},
                     {"checkpoint_every", job.checkpoint_every},
                     {"max_steps", job.max_steps},
                     {"offload_boundaries", job.offload_boundaries},
                     {"resumed_from", 0}}},
                   {"steps_per_epoch", loop.steps_per_epoch},
                   {"total_steps", loop.total_steps},
                   {"status", "running"},
                   {"result", nullptr}};
  if (dp) {
    manifest["runtime"]["world_size"] = job.world_size;
    manifest["runtime"]["dist_bucket_mb"] = job.bucket_mb;
  }
  if (!tile_store.empty()) manifest["dataset"]["tile_store"] = util::absolute_path(tile_store);
  run.export_metadata = {{"format", "pt"},
                         {"mltool.spec", spec.document.dump()},
                         {"mltool.labels", json(data.labels).dump()},
                         {"mltool.blocks", blocks.dump()},
                         {"mltool.created_by", util::tool_version()}};

  TrainReport report;
  LoopState state;
  if (job.resume) {
    const auto compare = [&] {  // a refusal (another --seed, ...) stops every rank
      const auto before = run.read_manifest();
      for (const auto& w : compare_runs(*before, manifest, run.path(kRunManifestFile)))
        log::warn(w);
    };
    dp ? dp->on_rank0(compare) : compare();
    if (resumable) {  // data parallel: every rank reads it, so the run directory is shared
      const std::string last = run.checkpoint("last.pt");
      if (dp && dp->rank() != 0 && !util::exists(last))
        throw ResourceError("data parallel --resume, rank " + std::to_string(dp->rank()) +
                            ": cannot see " + last +
                            "; every rank reads the checkpoint, so the run directory must be on "
                            "a filesystem all ranks share");
      state = load_checkpoint(last, *model, *optimizer, device);
      if (dp && dp->broadcast_value(state.step, device) != state.step)
        throw ResourceError("data parallel --resume, rank " + std::to_string(dp->rank()) + ": " +
                            last + " is at another step than rank 0's (step " +
                            std::to_string(state.step) + ")");
      report.resumed_from = state.step;
      manifest["runtime"]["resumed_from"] = state.step;
      log::info("resuming at step " + std::to_string(state.step) + " (epoch " +
                std::to_string(state.epoch + 1) + ")");
    } else {
      log::warn(run.path("checkpoints/last.pt") +
                " does not exist yet: starting from the beginning");
    }
  }
  run.open_metrics(state.metrics_bytes);
  run.write_manifest(manifest);
  log::info(std::to_string(train.size()) + " " + records::to_string(data.unit) +
            " samples to train on, " + std::to_string(val.size()) + " to validate; " +
            std::to_string(model->parameter_count()) + " parameters; " + feed + " feed on " +
            device.str());

  const std::int64_t first_step = state.step;
  reset_device_peak(device);
  const auto loop_start = Clock::now();
  try {
    state = run_loop(loop, state);
  } catch (const Error& e) {
    manifest["status"] = "failed";
    manifest["result"] = {{"steps", state.step}, {"error", e.what()}};
    run.write_manifest(manifest);
    throw;
  }
  const double loop_seconds = std::chrono::duration<double>(Clock::now() - loop_start).count();

  report.output = job.output;
  report.status = state.status.empty() ? "stopped" : state.status;
  report.device = device.str();
  report.feed = feed;
  report.unit = records::to_string(data.unit);
  report.blocks = model->names();
  report.parameters = model->parameter_count();
  report.steps = state.step;
  report.epochs_done = state.epoch;
  report.best_epoch = state.best_epoch;
  report.best_value = state.best.value_or(0);
  report.monitor = job.monitor;
  report.memory_mode = !loop.section_bounds.empty() ? "sections"
                       : job.micro_batches > 1      ? "micro_batches"
                                                    : "plain";
  report.sections = section_blocks(*model, loop.section_bounds);
  report.activation_bytes = loop.peak_activation_bytes;
  report.device_peak_bytes = device_peak(device);
  if (reducer) {
    report.dist_buckets = reducer->buckets();
    report.dist_launched_in_backward = reducer->launched_in_backward();
  }
  report.samples_per_second =
      loop_seconds > 0
          ? static_cast<double>((state.step - first_step) * std::min(n, std::int64_t{job.batch})) /
                loop_seconds
          : 0;
  json result = {{"steps", state.step},
                 {"epochs", state.epoch},
                 {"best_epoch", state.best_epoch},
                 {"best_value", state.best ? json(*state.best) : json()},
                 {"validation", nullptr}};
  if (report.status != "stopped" && run.writes()) {
    export_safetensors(*model, run.path("model.safetensors"), run.export_metadata);
    export_state_dict(*model, run.path("model.pt"));
    const auto eval = evaluate(*model, *val_feed, val, job.batch, classes);
    write_predictions(run.path("predictions.csv"), val, eval.logits, data.labels);
    report.validation = eval.to_json();
    result["validation"] = report.validation;
  }
  json end = {{"event", "end"},
              {"status", report.status},
              {"step", state.step},
              {"best_epoch", state.best_epoch}};
  if (!report.validation.is_null()) end.update(report.validation);
  run.log(end);
  manifest["status"] = report.status;
  manifest["result"] = result;
  run.write_manifest(manifest);
  report.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return report;
}

}  // namespace mltool::train
