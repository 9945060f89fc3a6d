// train_model: options, dataset and spec checked; feeds, model and optimizer set up; the run
// directory started or resumed; the loop run; the results exported.
#include "mltool/train/train.hpp"

#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <map>
#include <optional>
#include <sstream>

#include "class_plots.hpp"
#include "distributed.hpp"
#include "export.hpp"
#include "intervals.hpp"
#include "loop.hpp"
#include "mltool/features/encoder_card.hpp"
#include "mltool/features/stain.hpp"
#include "mltool/io/feature_store.hpp"
#include "mltool/io/manifest.hpp"
#include "mltool/io/table.hpp"
#include "mltool/io/tile_store.hpp"
#include "mltool/report/pages.hpp"
#include "mltool/train/augment.hpp"
#include "mltool/train/batches.hpp"
#include "mltool/train/model_spec.hpp"
#include "mltool/train/optimizer.hpp"
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
#include "script_model.hpp"
#include "section_plan.hpp"
#include "task.hpp"

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

// The checks between options; each option's own are in its declaration (train_options).
void check_job(const TrainJob& j) {
  util::check_options(train_options(), j);
  require<UsageError>(j.micro_batches <= j.batch, "--micro-batches must be between 1 and --batch");
  require<UsageError>(j.micro_batches == 1 || j.sections == 1,
                      "--micro-batches and --sections exclude each other");
  require<UsageError>(!(j.resume && j.overwrite), "--resume and --overwrite exclude each other");
  require<UsageError>(!j.gather_only || j.all_folds, "--gather-only needs --folds all");
  require<UsageError>(j.stain_reference.empty() || j.stain_norm != features::StainNorm::none,
                      "--stain-reference must be given with --stain-norm macenko or reinhard");
  check_data_parallel(j);
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
  if (path.empty()) path = store.tile_store();
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
  require<UsageError>(static_cast<bool>(job.tile_pixels),
                      "an image dataset needs TrainJob::tile_pixels (slide::open_tile_pixels)");
  return tile_source(std::make_shared<const io::TileStore>(io::TileStore::open(path, false)),
                     std::move(keys), job.tile_pixels);
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
  auto steps = step_sizes(samples, job.batch, job.last_batch == LastBatch::keep);
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

// What the job, the spec and the dataset decide, checked before the run directory is touched.
struct Plan {
  ModelSpec spec;
  DatasetInfo data;
  std::int64_t classes = 0;  ///< the model's outputs (Task::outputs)
  SplitSamples train, val;
  std::unique_ptr<Task> task;
  torch::Device device{torch::kCPU};
  std::unique_ptr<DataParallel> dp;  ///< data parallel: this rank's group; else null
  int threads = 0;
  std::shared_ptr<const RowSource> source;
  std::string tile_store;                 ///< image unit: the tile store read
  std::vector<std::size_t> named_bounds;  ///< the spec's "sections"; empty: --sections
  std::optional<ScriptModel> script;      ///< --model MODEL.pt: the TorchScript module
  std::optional<Augmenter> augment;       ///< --augment; unset: none
  /// --stain-norm fitted on --stain-reference; null: none.
  std::shared_ptr<const features::StainNormalizer> stain;
};

// --model MODEL.pt: the module loaded; the spec stands for it in run.json (its sha256, so
// --resume refuses another file). Every unit: features, bags, pixels.
void read_script(const TrainJob& job, Plan& p) {
  p.script = load_script_model(job.spec);
  p.spec.family = "torchscript";
  p.spec.document = {{"family", "torchscript"},
                     {"file", util::absolute_path(job.spec)},
                     {"sha256", p.script->sha256}};
  p.script->bag = p.data.unit == records::PackUnit::bag;
  p.script->pixels = p.data.unit == records::PackUnit::image;
}

// The TorchScript module's probe (script_model.hpp) on one sample of the rows' shape: a
// feature vector, or a tile as the module reads it (3 x T x T float, not the rows' T x T x 3).
void probe(const Plan& p) {
  auto sample = p.source->row_shape();
  if (p.script->pixels) sample = {sample.at(2), sample.at(0), sample.at(1)};
  probe_script(*p.script, sample, p.classes, p.data.manifest_path);
}

void check_spec_against_data(const TrainJob& job, const Plan& p) {
  const auto& data = p.data;
  if (!p.script)  // a TorchScript model's input is checked by its probe
    require<InputError>(p.spec.unit() == data.unit,
                        at_file(job.spec, "family " + p.spec.family + " trains on " +
                                              records::to_string(p.spec.unit()) + " records, but " +
                                              data.manifest_path + " was packed with --unit " +
                                              records::to_string(data.unit)));
  if (!p.script) {
    const std::string refused = p.spec.refuses(data.task);
    require<InputError>(refused.empty(),
                        at_file(job.spec, refused + " (" + data.manifest_path + " was packed for " +
                                              records::to_string(data.task) + ")"));
  }
  const bool labels = records::has_label_map(data.task);  // the classes are its labels
  require<InputError>(
      !p.spec.classes || *p.spec.classes == p.classes,
      at_file(job.spec,
              "/classes: " + std::to_string(p.spec.classes.value_or(0)) + ", but " +
                  (labels ? data.manifest_path + " has " + std::to_string(p.classes) + " labels"
                          : "the " + std::string(records::to_string(data.task)) +
                                " task's model has " + std::to_string(p.classes) + " output(s)")));
  require<InputError>(
      !p.spec.input_dims || data.unit == records::PackUnit::image ||
          *p.spec.input_dims == data.dims,
      at_file(job.spec, "/input_dims: " + std::to_string(p.spec.input_dims.value_or(0)) +
                            ", but the features of " + data.manifest_path + " have " +
                            std::to_string(data.dims) + " dimensions"));
}

// --augment and --stain-norm work on tile pixels: image datasets only.
void check_pixel_options(const TrainJob& job, Plan& p) {
  if (p.data.unit != records::PackUnit::image) {
    const std::string why =
        " applies to the tile pixels of image datasets (pack --unit image), "
        "but " +
        p.data.manifest_path + " was packed with --unit " + records::to_string(p.data.unit);
    require<UsageError>(job.augment.empty(), "--augment" + why);
    require<UsageError>(job.stain_norm == features::StainNorm::none, "--stain-norm" + why);
  }
  if (!job.augment.empty()) p.augment.emplace(parse_augment(job.augment), job.seed);
  if (job.stain_norm != features::StainNorm::none) {
    p.stain = std::make_shared<const features::StainNormalizer>(
        features::StainNormalizer::from_file(job.stain_norm, job.stain_reference));
    log::info(std::string("--stain-norm ") + util::name_of(features::kStainNorms, job.stain_norm) +
              " fitted on " + job.stain_reference + " (sha256 " + p.stain->sha256() + ")");
  }
}

// Sections: the spec's bounds, or --sections K balanced later; both checked here.
std::vector<std::size_t> check_sections(const TrainJob& job, const Plan& p) {
  require<UsageError>(
      p.spec.section_starts.empty() || (job.sections == 1 && job.micro_batches == 1),
      "the spec's \"sections\" (" + job.spec +
          ") and --sections or --micro-batches exclude each other");
  require<UsageError>(!job.offload_boundaries || job.sections > 1 || !p.spec.section_starts.empty(),
                      "--offload-boundaries needs sections (--sections K, or the spec's "
                      "\"sections\")");
  const auto model = p.script ? script_block_model(*p.script, p.classes)
                              : build_model(p.spec, p.data.dims, p.classes);
  const auto& names = model->names();
  require<UsageError>(!p.script || job.sections == 1 || names != std::vector<std::string>{"script"},
                      "--sections: " + job.spec +
                          (p.script && p.script->bag
                               ? " trains on bags, which sections do not cut"
                               : "'s forward does not run its top-level children in sequence") +
                          "; train it whole, or with --micro-batches");
  if (!p.spec.section_starts.empty()) {
    auto bounds = named_sections(names, p.spec.section_starts, job.spec);
    for (auto& b : bounds) b = model->first_part(b);  // block bounds → part bounds
    return bounds;
  }
  if (job.sections > 1)
    balance_sections(std::vector<std::int64_t>(model->part_count(), 1),
                     static_cast<std::size_t>(job.sections));
  return {};
}

// The samples to train and validate on: --train-split and --val-split, or with --fold I the
// other folds and fold I.
void read_samples(const TrainJob& job, Plan& p) {
  if (job.fold < 0) {
    p.train = read_split(p.data, job.train_split);
    p.val = read_split(p.data, job.val_split);
    return;
  }
  const auto& folds = p.data.fold_splits;
  require<UsageError>(!folds.empty(), "--fold " + std::to_string(job.fold) + ": " +
                                          p.data.manifest_path +
                                          " has no folds (pack it with --folds K)");
  require<UsageError>(job.fold < static_cast<int>(folds.size()),
                      "--fold " + std::to_string(job.fold) + ": " + p.data.manifest_path +
                          " has folds 0 to " + std::to_string(folds.size() - 1) +
                          " (with --fold auto: number the array tasks 0.." +
                          std::to_string(folds.size() - 1) + ")");
  std::vector<std::string> others;
  for (std::size_t i = 0; i < folds.size(); ++i)
    if (static_cast<int>(i) != job.fold) others.push_back(folds[i]);
  p.train = read_splits(p.data, others);
  p.val = read_split(p.data, folds[static_cast<std::size_t>(job.fold)]);
}

// Phase 1: the job, spec and dataset checked; the splits read; the device chosen and, data
// parallel, the group joined; the rows' source opened.
Plan resolve_plan(const TrainJob& job) {
  check_job(job);
  Plan p;
  p.data = read_dataset_info(job.dataset);
  if (is_script_file(job.spec))
    read_script(job, p);
  else
    p.spec = read_model_spec(job.spec);
  read_samples(job, p);
  p.task = make_task(job, p.data, p.train);
  p.classes = p.task->outputs();
  check_spec_against_data(job, p);
  check_pixel_options(job, p);
  const auto store = open_store(p.data);
  p.device = util::resolve_devices(job.device).front();  // the first GPU
  const bool group = job.world_size > 1 || job.join_group;
  if (group && p.device.is_cuda() && (job.device == "auto" || job.device == "cuda"))
    p.device = torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(job.local_rank));
  if (group) p.dp = std::make_unique<DataParallel>(job, p.device);
  p.threads = util::thread_count(job.threads);
  p.source = p.data.unit == records::PackUnit::image
                 ? image_source(job, p.data, *store, p.train, p.val, p.tile_store)
                 : feature_source(store);
  if (p.script) probe(p);
  p.named_bounds = check_sections(job, p);
  return p;
}

struct Feeds {
  FeedKind kind = FeedKind::host;  ///< pinned, host or sync: auto resolved
  std::unique_ptr<Feed> train, val;
  /// --feed auto's pinned feeds, which an out-of-memory error in the first epoch turns into
  /// host feeds (oom_step.hpp); null otherwise.
  FallbackFeed* train_fallback = nullptr;
  FallbackFeed* val_fallback = nullptr;
};

// Why the pinned feed cannot be used ("" if it can; then `matrix` holds the rows).
std::string try_pinned(const Plan& p, torch::Tensor& matrix) {
  const bool image = p.data.unit == records::PackUnit::image;
  const bool copies = p.device.is_cuda() || image;  // features on the CPU: the memory map itself
  const std::uint64_t need = pinned_bytes(*p.source), margin = std::uint64_t{256} << 20;
  const std::uint64_t free = copies ? util::free_memory(p.device) : need + margin;
  if (need + margin > free)
    return "the pinned feed needs " + std::to_string(need) + " bytes (" + gib(need) + ") on " +
           p.device.str() + " for the " + (image ? "decoded tiles" : "feature matrix") + " (plus " +
           gib(margin) + " to train in), which has " + std::to_string(free) + " (" + gib(free) +
           ") free";
  try {
    matrix = p.source->whole(p.device, p.threads);
  } catch (const c10::OutOfMemoryError&) {
    return "the pinned feed ran out of memory on " + p.device.str() + " copying " + gib(need);
  } catch (const ResourceError& e) {
    return e.what();
  }
  return "";
}

// Phase 2: the feed. Pinned if asked for, or (auto) if the rows fit where they are copied to;
// auto falls back to the host feed with a warning.
Feeds choose_feed(const TrainJob& job, const Plan& p) {
  Feeds f;
  f.kind = job.feed;
  torch::Tensor matrix;
  if (f.kind == FeedKind::auto_choice || f.kind == FeedKind::pinned) {
    const std::string why = try_pinned(p, matrix);
    if (!why.empty() && f.kind == FeedKind::pinned) throw ResourceError(why + "; use --feed host");
    if (!why.empty()) log::warn(why + "; using the host feed");
    f.kind = why.empty() ? FeedKind::pinned : FeedKind::host;
  }
  const int workers = f.kind == FeedKind::host ? std::min(8, p.threads) : 0;
  auto make = [&](const SplitSamples& s) {
    const auto targets = p.task->targets(s);
    return f.kind == FeedKind::pinned
               ? pinned_feed(p.source, matrix, s, targets, p.data.unit, p.device)
               : host_feed(p.source, s, targets, p.data.unit, p.device, workers);
  };
  f.train = make(p.train);
  f.val = make(p.val);
  if (job.feed == FeedKind::auto_choice && f.kind == FeedKind::pinned && !p.dp) {
    const auto fallback = [&](std::unique_ptr<Feed>& feed, const SplitSamples& s) {
      auto wrapped = std::make_unique<FallbackFeed>(std::move(feed), [&p, &s] {
        return host_feed(p.source, s, p.task->targets(s), p.data.unit, p.device,
                         std::min(8, p.threads));
      });
      FallbackFeed* raw = wrapped.get();
      feed = std::move(wrapped);
      return raw;
    };
    f.train_fallback = fallback(f.train, p.train);
    f.val_fallback = fallback(f.val, p.val);
  }
  if (p.stain) {
    f.train = stained_feed(std::move(f.train), p.stain);
    f.val = stained_feed(std::move(f.val), p.stain);
  }
  return f;
}

// The run directory, held by rank 0 (the writer) for the whole run.
struct OpenRun {
  std::optional<util::OutputLock> lock;
  bool resumable = false;  ///< it has a checkpoint to resume from
  std::unique_ptr<RunDir> dir;
  int math_threads = 0;  ///< CPU: LibTorch's math threads (0 on a GPU)
};

// Phase 3: the run directory created or checked for --resume (data parallel: rank 0 prepares
// it, the others wait, or fail with it), and the CPU's math threads set.
void open_run(const TrainJob& job, const Plan& p, OpenRun& r) {
  const auto prepare = [&] {
    r.lock.emplace(job.output, "mltool train");
    r.resumable = prepare_run_dir(job.output, job.resume, job.overwrite);
  };
  p.dp ? p.dp->on_rank0(prepare) : prepare();
  if (p.dp) r.resumable = p.dp->broadcast_value(r.resumable ? 1 : 0, p.device) != 0;
  r.dir = std::make_unique<RunDir>(job.output, !p.dp || p.dp->rank() == 0);
  if (p.device.is_cpu())
    r.math_threads =
        cpu_math_threads(job.math_threads, r.resumable ? r.dir->read_manifest() : std::nullopt);
}

// The encoder of the dataset's features (features.json's model.encoder: scripts/encoders.py's
// card, or an imported file's), or "" when it has none or no feature store.
std::string features_encoder(const DatasetInfo& d) {
  try {
    const std::string manifest = util::join_path(d.features, io::kFeaturesManifestFile);
    if (d.features.empty() || !util::exists(manifest)) return "";
    return features::encoder_name_of(
        io::read_manifest(manifest, "features").value("model", json()));
  } catch (const Error&) {
    return "";
  }
}

// run.json as this invocation starts: the dataset, spec, model, options ("options": what
// decides the result; "runtime": what does not, both from train_options()) and status.
json run_manifest(const TrainJob& job, const Plan& p, const Feeds& feeds, const OpenRun& run,
                  const Loop& loop, const json& blocks) {
  const auto& data = p.data;
  json dataset = {{"path", util::absolute_path(data.dir)},
                  {"manifest_sha256", data.manifest_sha256},
                  {"matrix_sha256", data.matrix_sha256},
                  {"unit", records::to_string(data.unit)},
                  {"labels", data.labels},
                  {"dims", data.dims},
                  {"train_split", p.train.name},
                  {"val_split", p.val.name},
                  {"train_samples", p.train.size()},
                  {"val_samples", p.val.size()}};
  if (!p.tile_store.empty()) dataset["tile_store"] = util::absolute_path(p.tile_store);
  if (const auto bags = data.manifest.at("labels").value("bag_column", json()); bags.is_string())
    dataset["bag_column"] = bags;
  if (const std::string encoder = features_encoder(data); !encoder.empty())
    dataset["encoder"] = encoder;
  json options = util::recorded(train_options(), job, "options");
  const json task = p.task->describe();
  options["class_weights"] = task.value("class_weights", json());
  options["loss"] = task.at("loss");  // auto resolved
  json runtime = util::recorded(train_options(), job, "runtime");
  runtime["device"] = p.device.str();
  runtime["feed"] = util::name_of(kFeeds, feeds.kind);
  runtime["threads"] = p.threads;
  runtime["math_threads"] = run.math_threads;
  runtime["resumed_from"] = 0;
  if (p.dp)
    runtime["world_size"] = job.world_size;
  else
    runtime.erase("dist_bucket_mb");
  json out = {{"format", kRunFormat},
              {"format_version", kRunFormatVersion},
              {"created_by", util::tool_version()},
              {"dataset", dataset},
              {"task", task},
              {"spec", p.spec.document},
              {"model",
               {{"blocks", blocks},
                {"parameters", loop.model.parameter_count()},
                {"input_dims", data.dims},
                {"classes", p.classes}}},
              {"options", options},
              {"runtime", runtime},
              {"steps_per_epoch", loop.steps_per_epoch},
              {"total_steps", loop.total_steps},
              {"status", to_string(RunStatus::running)},
              {"result", nullptr}};
  if (p.stain) {
    out["stain_norm"] = p.stain->record();
    out["stain_norm"]["reference"] = util::absolute_path(job.stain_reference);
    out["stain_norm"]["fit"] = "tile";
  }
  return out;
}

// The model on the device (data parallel: rank 0's weights and buffers everywhere).
std::shared_ptr<BlockModel> make_model(const TrainJob& job, const Plan& p) {
  torch::manual_seed(job.seed);
  auto model = p.script ? script_block_model(*p.script, p.classes)
                        : build_model(p.spec, p.data.dims, p.classes);
  model->to(p.device);
  if (p.dp) {
    auto tensors = model->parameters();
    for (const auto& b : model->buffers()) tensors.push_back(b);
    p.dp->broadcast(tensors);
  }
  return model;
}

// --resume: the run's options compared (a refusal stops every rank) and its last checkpoint
// loaded. Returns the state to continue from (a fresh one if there is no checkpoint yet).
LoopState resume_run(const Plan& p, OpenRun& run, Loop& loop, json& manifest) {
  LoopState state;
  const auto compare = [&] {
    const auto before = run.dir->read_manifest();
    for (const auto& w : compare_runs(*before, manifest, run.dir->path(kRunManifestFile)))
      log::warn(w);
  };
  p.dp ? p.dp->on_rank0(compare) : compare();
  if (!run.resumable) {
    log::warn(run.dir->path("checkpoints/last.pt") +
              " does not exist yet: starting from the beginning");
    return state;
  }
  // Data parallel: every rank reads it, so the run directory must be shared.
  const std::string last = run.dir->checkpoint("last.pt");
  const auto& dp = p.dp;
  if (dp && dp->rank() != 0 && !util::exists(last))
    throw ResourceError("data parallel --resume, rank " + std::to_string(dp->rank()) +
                        ": cannot see " + last +
                        "; every rank reads the checkpoint, so the run directory must be on "
                        "a filesystem all ranks share");
  state = load_checkpoint(last, loop.model, loop.optimizer, p.device);
  if (dp && dp->broadcast_value(state.step, p.device) != state.step)
    throw ResourceError("data parallel --resume, rank " + std::to_string(dp->rank()) + ": " + last +
                        " is at another step than rank 0's (step " + std::to_string(state.step) +
                        ")");
  manifest["runtime"]["resumed_from"] = state.step;
  log::info("resuming at step " + std::to_string(state.step) + " (epoch " +
            std::to_string(state.epoch + 1) + ")");
  return state;
}

// Out-of-memory changes to how the steps run (oom_step.hpp): a resumed run's continue, and
// run.json's runtime.oom_retry records them as they happen.
void keep_memory_changes(Loop& loop, const LoopState& state, json& manifest, RunDir& dir) {
  const auto record = [&manifest, &dir, &loop](const LoopState& s) {
    manifest["runtime"]["oom_retry"] = {{"micro_batches", loop.micro_batches},
                                        {"sections", s.oom_sections > 0 ? s.oom_sections : 1}};
    dir.write_manifest(manifest);
  };
  if (state.oom_micro_batches > loop.micro_batches) {
    loop.micro_batches = state.oom_micro_batches;
    log::info("resuming with " + std::to_string(loop.micro_batches) +
              " micro-batches, as an out-of-memory error left the run");
  }
  const auto sections = static_cast<std::int64_t>(loop.section_bounds.size()) - 1;  // -1: none
  if (state.oom_sections > std::max<std::int64_t>(1, sections)) {
    loop.section_bounds = loop.plan_sections(state.oom_sections);
    loop.micro_batches = 1;
    log::info("resuming with " + std::to_string(state.oom_sections) +
              " sections, as an out-of-memory error left the run");
  }
  if (state.oom_micro_batches > 0 || state.oom_sections > 0) record(state);
  loop.on_memory_change = record;
}

// The report of a finished (or stopped) loop.
TrainReport make_report(const TrainJob& job, const Plan& p, const Feeds& feeds, const Loop& loop,
                        const LoopState& state, const GradientReducer* reducer) {
  TrainReport r;
  r.output = job.output;
  r.status = state.status == RunStatus::running ? RunStatus::stopped : state.status;
  r.device = p.device.str();
  r.feed = util::name_of(kFeeds, feeds.kind);
  r.unit = records::to_string(p.data.unit);
  r.blocks = loop.model.names();
  r.parameters = loop.model.parameter_count();
  r.steps = state.step;
  r.epochs_done = state.epoch;
  r.best_epoch = state.best_epoch;
  r.best_value = state.best.value_or(0);
  r.monitor = util::name_of(kMonitors, job.monitor);
  r.memory_mode = !loop.section_bounds.empty() ? "sections"
                  : loop.micro_batches > 1     ? "micro_batches"
                                               : "plain";
  r.micro_batches = loop.micro_batches;
  r.sections = section_blocks(loop.model, loop.section_bounds);
  r.activation_bytes = loop.peak_activation_bytes;
  r.device_peak_bytes = util::peak_memory(p.device);
  if (reducer) {
    r.dist_buckets = reducer->buckets();
    r.dist_launched_in_backward = reducer->launched_in_backward();
  }
  return r;
}

// The median risk of the final model on its training samples (cross-validation splits each
// fold's out-of-fold risks into high and low at it).
double median_train_risk(const TrainJob& job, const Plan& p, Loop& loop) {
  auto risk = p.task->scores(
      evaluate(loop.model, loop.train_feed, p.train, job.batch, *p.task, !job.no_oom_retry)
          .outputs);
  std::sort(risk.begin(), risk.end());
  const std::size_t n = risk.size();
  return n % 2 ? risk[n / 2] : (risk[n / 2 - 1] + risk[n / 2]) / 2;
}

// The final predictions' 95% intervals and charts (run.json's result.intervals and
// result.charts), from the predictions.csv just written.
void summarize_predictions(const TrainJob& job, const Plan& p, const RunDir& run, json& result) {
  auto table = io::read_table(run.path("predictions.csv"));
  const OutOfFold predictions{std::move(table.columns), std::move(table.rows)};
  const SampleGroups groups = job.bootstrap > 0 ? sample_groups(p.data, p.val) : SampleGroups{};
  if (job.bootstrap > 0)
    result["intervals"] = metric_intervals(p.task->statistics(predictions), predictions, groups,
                                           job.bootstrap, job.seed);
  const json counts = p.task->label_counts(predictions);
  if (!counts.is_null()) result["label_counts"] = counts;
  const json charts = p.task->draw_charts(run.dir(), predictions, groups, job.bootstrap, job.seed);
  if (!charts.empty()) result["charts"] = charts;
}

// Phase 5: a finished run's exports (model.safetensors, model.pt, predictions.csv), the end
// line of metrics.jsonl and run.json's result.
void finish_run(const TrainJob& job, const Plan& p, Loop& loop, const LoopState& state,
                TrainReport& report, json& manifest) {
  RunDir& run = loop.run;
  json result = {{"steps", state.step},
                 {"epochs", state.epoch},
                 {"best_epoch", state.best_epoch},
                 {"best_value", state.best ? json(*state.best) : json()},
                 {"validation", nullptr}};
  if (report.status != RunStatus::stopped && run.writes()) {
    export_safetensors(loop.model, run.path("model.safetensors"), run.export_metadata);
    export_state_dict(loop.model, run.path("model.pt"));
    if (p.script) save_script(*p.script->module, run.path("model.script.pt"));
    const auto eval =
        evaluate(loop.model, loop.val_feed, p.val, job.batch, *p.task, !job.no_oom_retry);
    write_predictions(run.path("predictions.csv"), p.val, eval.outputs, *p.task);
    report.validation = eval.metrics;
    result["validation"] = report.validation;
    summarize_predictions(job, p, run, result);
    if (p.task->records_train_median())
      result["train_risk_median"] = median_train_risk(job, p, loop);
    result.update(p.task->training_notes());
  }
  json end = {{"event", "end"},
              {"status", to_string(report.status)},
              {"step", state.step},
              {"best_epoch", state.best_epoch}};
  if (!report.validation.is_null()) end.update(report.validation);
  run.log(end);
  manifest["status"] = to_string(report.status);
  manifest["result"] = result;
  run.write_manifest(manifest);
  if (run.writes()) report::write_run_report(run.dir(), manifest);
}

// Phase 4's setting up: the loop's device, task, steps, sections, data parallel and progress.
void configure_loop(const TrainJob& job, const Plan& p, BlockModel& model, GradientReducer* reducer,
                    const std::function<void(const TrainProgress&)>& progress, Loop& loop) {
  loop.device = p.device;
  p.task->to(p.device);
  loop.task = p.task.get();
  loop.step_sizes = epoch_steps(job, model, static_cast<std::int64_t>(p.train.size()));
  loop.steps_per_epoch = static_cast<std::int64_t>(loop.step_sizes.size());
  loop.total_steps = loop.steps_per_epoch * job.epochs;
  loop.progress = progress;
  loop.section_bounds = p.named_bounds.empty() ? plan_sections(job.sections, model, *p.source,
                                                               p.train, p.data.unit, p.device)
                                               : p.named_bounds;
  loop.dp = p.dp.get();
  loop.reducer = reducer;
  loop.micro_batches = job.micro_batches;
  if (p.augment) loop.augment = &*p.augment;
  loop.plan_sections = [&model, &p](std::int64_t k) {
    return plan_sections(k, model, *p.source, p.train, p.data.unit, p.device);
  };
}

// The model's blocks as run.json and the exports list them: name and parameters.
json block_list(BlockModel& model) {
  json blocks = json::array();
  for (std::size_t i = 0; i < model.size(); ++i)
    blocks.push_back({{"name", model.names()[i]}, {"parameters", model.parameter_count(i)}});
  return blocks;
}

// When the pinned feed no longer fits, the loop moves both feeds to the host and run.json's
// runtime.feed says so (the caller writes run.json).
void allow_host_fallback(Loop& loop, Feeds& feeds, json& manifest) {
  loop.drop_pinned_feed = [&feeds, &manifest] {
    if (!feeds.train_fallback || !feeds.train_fallback->to_host()) return false;
    feeds.val_fallback->to_host();
    feeds.kind = FeedKind::host;
    manifest["runtime"]["feed"] = util::name_of(kFeeds, feeds.kind);
    return true;
  };
}

// Phase 4: the loop from `state`, profiled (data parallel: by rank 0; the ranks run the same
// steps); run.json records a loop that failed or was interrupted. Returns its seconds.
double run_profiled(const TrainJob& job, const Plan& p, Loop& loop, LoopState& state,
                    json& manifest) {
  util::StepProfiler profiler(!p.dp || p.dp->rank() == 0 ? job.profile : util::ProfileRequest{},
                              p.device.is_cuda(), "step");
  loop.profiler = &profiler;
  util::reset_peak_memory(p.device);
  const auto loop_start = Clock::now();
  try {
    state = run_loop(loop, state);
  } catch (const Error& e) {
    manifest["status"] =
        to_string(e.kind() == ErrorKind::stopped ? RunStatus::interrupted : RunStatus::failed);
    manifest["result"] = {{"steps", state.step}, {"error", e.what()}};
    loop.run.write_manifest(manifest);
    throw;
  }
  profiler.finish();
  loop.profiler = nullptr;
  return std::chrono::duration<double>(Clock::now() - loop_start).count();
}

}  // namespace

TrainReport train_model(const TrainJob& job,
                        const std::function<void(const TrainProgress&)>& progress) {
  const auto start = Clock::now();
  util::count_cpu_memory();
  const Plan p = resolve_plan(job);
  OpenRun run;  // the output lock cannot move: filled in place
  open_run(job, p, run);
  Feeds feeds = choose_feed(job, p);

  const auto model = make_model(job, p);
  const auto optimizer = make_optimizer(job, *model);
  const auto n = static_cast<std::int64_t>(p.train.size());
  const auto reducer =
      p.dp ? std::make_unique<GradientReducer>(*p.dp, model->parameters(),
                                               static_cast<std::int64_t>(job.bucket_mb * 1048576.0))
           : nullptr;
  Loop loop(job, *model, *optimizer, *run.dir, {*feeds.train, p.train}, {*feeds.val, p.val});
  configure_loop(job, p, *model, reducer.get(), progress, loop);

  const json blocks = block_list(*model);
  json manifest = run_manifest(job, p, feeds, run, loop, blocks);
  run.dir->export_metadata = {{"format", "pt"},
                              {"mltool.spec", p.spec.document.dump()},
                              {"mltool.labels", json(p.data.labels).dump()},
                              {"mltool.blocks", blocks.dump()},
                              {"mltool.created_by", util::tool_version()}};
  LoopState state = job.resume ? resume_run(p, run, loop, manifest) : LoopState{};
  keep_memory_changes(loop, state, manifest, *run.dir);
  allow_host_fallback(loop, feeds, manifest);
  const std::int64_t resumed_from = state.step;
  run.dir->open_metrics(state.metrics_bytes);
  run.dir->write_manifest(manifest);
  log::info(std::to_string(n) + " " + records::to_string(p.data.unit) + " samples to train on, " +
            std::to_string(p.val.size()) + " to validate; " +
            std::to_string(model->parameter_count()) + " parameters; " +
            util::name_of(kFeeds, feeds.kind) + " feed on " + p.device.str());

  const double loop_seconds = run_profiled(job, p, loop, state, manifest);
  TrainReport report = make_report(job, p, feeds, loop, state, reducer.get());
  report.resumed_from = resumed_from;
  report.samples_per_second = loop_seconds > 0
                                  ? static_cast<double>((state.step - resumed_from) *
                                                        std::min(n, std::int64_t{job.batch})) /
                                        loop_seconds
                                  : 0;
  finish_run(job, p, loop, state, report, manifest);
  report.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return report;
}

}  // namespace mltool::train
