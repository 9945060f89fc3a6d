#include "mltool/features/extract.hpp"

#include <torch/torch.h>

#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <string_view>
#include <thread>

#include "extract_inputs.hpp"
#include "mltool/cuda/jpeg_decode.hpp"
#include "mltool/features/chunked_writer.hpp"
#include "mltool/features/extractor.hpp"
#include "mltool/features/shard.hpp"
#include "mltool/features/stain.hpp"
#include "mltool/io/feature_store.hpp"
#include "mltool/io/image_codec.hpp"
#include "mltool/io/manifest.hpp"
#include "mltool/io/tile_store.hpp"
#include "mltool/slide/tile_pixels.hpp"
#include "mltool/util/batch_split.hpp"
#include "mltool/util/bounded_queue.hpp"
#include "mltool/util/device.hpp"
#include "mltool/util/error.hpp"
#include "mltool/util/file.hpp"
#include "mltool/util/log.hpp"
#include "mltool/util/output_lock.hpp"
#include "mltool/util/parallel.hpp"
#include "mltool/util/stop.hpp"
#include "slide_stain.hpp"

namespace mltool::features {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

// Decoded tiles of one batch in a (pinned, when a GPU is used) host buffer.
struct HostBatch {
  std::uint64_t index = 0;      // batch number in this run
  std::uint64_t first_row = 0;  // row of its first tile
  std::int64_t size = 0;
  torch::Tensor pixels;  // pool buffer, batch × T × T × 3 uint8
  std::vector<std::uint8_t> invalid;
  std::vector<std::uint8_t> unstained;  // --stain-norm left the tile as it was (set on the device)
  // --decode device: each tile's JPEG stream (empty: none), decoded by the device thread, and
  // the tiles read on the host instead, in the first slots of `pixels` in this order.
  std::vector<std::string> jpegs;
  std::vector<std::int64_t> on_host;
};

struct Result {
  std::uint64_t first_row = 0;
  std::int64_t size = 0;
  torch::Tensor features;  // CPU float32 size × D
  std::vector<std::uint8_t> invalid;
  std::vector<std::uint8_t> unstained;
  std::optional<util::BatchSplit> split;  // computed in pieces after an out-of-memory error
};

// Results arrive from the device threads in any order and leave in batch order.
class Reorder {
 public:
  void put(std::uint64_t index, Result r) {
    std::lock_guard lock(mutex_);
    results_.emplace(index, std::move(r));
    cv_.notify_all();
  }
  // The result of batch `index`, or nothing once `done` says no more will come.
  std::optional<Result> take(std::uint64_t index, const std::function<bool()>& done) {
    std::unique_lock lock(mutex_);
    cv_.wait(lock, [&] { return results_.count(index) || done(); });
    auto it = results_.find(index);
    if (it == results_.end()) return std::nullopt;
    Result r = std::move(it->second);
    results_.erase(it);
    return r;
  }
  void wake() { cv_.notify_all(); }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  std::map<std::uint64_t, Result> results_;
};

// First error wins; everyone checks `stopped`.
struct Failure {
  std::mutex mutex;
  std::exception_ptr error;
  std::atomic<bool> stopped{false};
  void set(std::exception_ptr e) {
    std::lock_guard lock(mutex);
    if (!error) error = e;
    stopped = true;
  }
};

json source_json(const io::TileStore& store, const std::vector<std::string>& keys, int tile_size) {
  return {{"tile_store", util::absolute_path(store.path())},
          {"tiles", keys.size()},
          {"first_key", keys.front()},
          {"last_key", keys.back()},
          {"tile_size", tile_size}};
}

bool already_complete(const std::string& dir, const json& source, const json& model,
                      io::DType dtype) {
  const std::string manifest = util::join_path(dir, io::kFeaturesManifestFile);
  if (!util::exists(manifest) || util::exists(util::join_path(dir, ".extract-partial")))
    return false;
  try {
    const json doc = io::read_manifest(manifest, "features");
    json found = doc.value("source", json());
    if (found.is_object()) found.erase("merged_from");  // --merge of shards: one run's rows
    return found == source && doc.at("model") == model && doc.at("dtype") == io::name(dtype);
  } catch (const Error&) {
    return false;  // unreadable or old: extract again, which replaces it
  }
}

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0 && line.find(':') != std::string::npos) {
      std::string name = line.substr(line.find(':') + 1);
      name.erase(0, name.find_first_not_of(' '));
      return name;
    }
  return "unknown CPU";
}

// The option that sets a partial run's fingerprint field, for a refusal that names it: the
// field's option of that key, else the model (source and model fields).
std::string option_of(const std::string& field) {
  for (const auto& o : extract_options())
    if (o.key() == field) return o.flag();
  return "--model";
}

std::string value_text(const json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); }

// "--batch 7 (now 8)".
std::string option_value(const std::string& field, const json& before, const json& now) {
  // A model without "decode" decoded on the host (libjpeg-turbo).
  const auto text = [&](const json& v) {
    return v.is_null() ? (field == "decode" ? "libjpeg-turbo" : "unset") : value_text(v);
  };
  return option_of(field) + " " + text(before) + " (now " + text(now) + ")";
}

// Refuses a resume whose settings would give other bits than the partial run's, naming the
// first setting that differs and its recorded value.
void check_resume(const std::string& dir, const json& stored, const json& now) {
  if (stored.is_null() || stored == now) return;
  const std::string partial = util::join_path(dir, ".extract-partial");
  const auto refuse = [&](const std::string& what) {
    throw UsageError(at_file(
        dir, "holds a partial extraction made with " + what +
                 "; a resume must repeat it to give the rows of an uninterrupted run: repeat it, "
                 "or start over with --overwrite (or remove " +
                 partial + ")"));
  };
  if (!stored.is_object())
    refuse("other settings (" + util::join_path(partial, "config.json") + ")");
  if (const json before = stored.value("shard", json()); before != now.value("shard", json()))
    refuse("--shard " + (before.is_null() ? "unset" : value_text(before)) + " (now " +
           (now.contains("shard") ? value_text(now.at("shard")) : "unset") + ")");
  if (const json before = stored.value("source", json()); before != now.at("source"))
    refuse("another tile store, or before the tile store changed (then: " +
           (before.is_object() ? value_text(before.value("tiles", json())) + " tiles in " +
                                     value_text(before.value("tile_store", json()))
                               : std::string("unknown")) +
           ")");
  for (const auto& [field, value] : now.items()) {
    if (field == "source" || field == "model" || field == "shard") continue;
    const json before = stored.value(field, json());
    if (before != value) refuse(option_value(field, before, value));
  }
  const json model_before = stored.value("model", json::object());
  for (const auto& [field, value] : now.at("model").items()) {
    const json before = model_before.is_object() ? model_before.value(field, json()) : json();
    if (field == "stain_reference" && before.is_object() && value.is_object() &&
        before.value("fit", json()) != value.value("fit", json()))
      refuse(option_value("stain_fit", before.value("fit", json()), value.value("fit", json())));
    if (before != value) refuse(option_value(field, before, value));
  }
  if (model_before.is_object())  // a field the partial run's model had and this one lacks
    for (const auto& [field, before] : model_before.items())
      if (!now.at("model").contains(field)) refuse(option_value(field, before, json()));
  refuse("other settings (" + util::join_path(partial, "config.json") + ")");
}

// Phase 1: the options, then what the run reads (check_inputs), before --overwrite empties.
void check_job(const ExtractJob& job) {
  util::check_options(extract_options(), job);
  check_inputs(job, builtin_names());
}

// One copy of the model per device.
std::vector<std::unique_ptr<Extractor>> load_replicas(const ExtractJob& job,
                                                      const ModelSettings& settings,
                                                      const std::vector<torch::Device>& devices,
                                                      int tile) {
  std::vector<std::unique_ptr<Extractor>> replicas;
  for (const auto& d : devices) replicas.push_back(load_extractor(job.model, d, tile, settings));
  return replicas;
}

// The job as run, and how the model is run: an encoder card's preprocessing (and on a GPU its
// --amp, and its --dtype) wherever the option was not given; a given one that disagrees wins,
// with a warning naming both values.
struct Resolved {
  ExtractJob job;
  ModelSettings settings;
};

template <class T, class Text>
void card_default(ExtractJob& job, T ExtractJob::*member, const T& card_value, const char* key,
                  const EncoderCard& card, Text text) {
  if (!job.given.count(key)) {
    job.*member = card_value;
  } else if (!(job.*member == card_value)) {
    std::string flag = key;
    std::replace(flag.begin(), flag.end(), '_', '-');
    log::warn("--" + flag + " " + text(job.*member) + " overrides the encoder card's " +
              text(card_value) + " (" + card.label() + ", " + card.file + ")");
  }
}

Resolved resolve_model(const ExtractJob& request, bool on_cpu) {
  Resolved r{request, {}};
  ExtractJob& job = r.job;
  ModelSettings& s = r.settings;
  if (job.model.rfind("builtin:", 0) != 0) s.card = read_encoder_card(job.model);
  if (s.card && s.card->slide)
    throw UsageError(at_file(job.model, "is a slide encoder (" + s.card->label() +
                                            "): run it with mltool extract --slide-encoder " +
                                            job.model + " FEATURES/ -o SLIDES/"));
  if (s.card) {
    const EncoderCard& card = *s.card;
    const auto number = [](int v) { return std::to_string(v); };
    card_default(job, &ExtractJob::input_size, card.resize.crop, "input_size", card, number);
    card_default(job, &ExtractJob::mean, card.mean, "mean", card, rgb_text);
    card_default(job, &ExtractJob::std, card.std, "std", card, rgb_text);
    const auto amp_text = [](Amp a) { return std::string(util::name_of(kAmps, a)); };
    if (card.amp && !on_cpu) card_default(job, &ExtractJob::amp, *card.amp, "amp", card, amp_text);
    const auto dtype_text = [](io::DType d) {
      return std::string(util::name_of(kFeatureDTypes, d));
    };
    if (card.dtype) card_default(job, &ExtractJob::dtype, *card.dtype, "dtype", card, dtype_text);
    s.preprocess.rule = card.resize;
    if (job.input_size != card.resize.crop)  // the user's size: a plain resize to it
      s.preprocess.rule->resize = s.preprocess.rule->crop = job.input_size;
    log::info("encoder " + card.label() + ": " + std::to_string(card.dims) + " dims, resize " +
              std::to_string(s.preprocess.rule->resize) + " " +
              (card.resize.bicubic ? "bicubic" : "bilinear") + ", crop " +
              std::to_string(s.preprocess.rule->crop) + ", mean " + rgb_text(job.mean) + ", std " +
              rgb_text(job.std));
  }
  s.preprocess.input_size = job.input_size;
  s.preprocess.mean = job.mean;
  s.preprocess.std = job.std;
  s.amp = job.amp;
  s.allow_wide = job.allow_wide_features;
  return r;
}

// "12.3", "0.25": a rate that stays readable below one a second.
std::string rate_text(double per_second) {
  char text[32];
  std::snprintf(text, sizeof text,
                per_second >= 100  ? "%.0f"
                : per_second >= 10 ? "%.1f"
                                   : "%.2f",
                per_second);
  return text;
}

// Everything that decides a row's bits. Batches start at multiples of --batch counted from
// row 0, so a resumed run forms exactly the batches an uninterrupted one does; on the CPU
// the math library splits a batch over the math threads, so their count is part of it too.
json fingerprint_of(const ExtractJob& job, const json& source, const json& model, bool on_cpu,
                    int math_threads, const util::Shard& shard) {
  json fingerprint = {{"source", source},
                      {"model", model},
                      {"dtype", io::name(job.dtype)},
                      {"batch", job.batch},
                      {"device", on_cpu ? "cpu" : "cuda"}};
  if (on_cpu) fingerprint["math_threads"] = math_threads;
  if (!shard.whole()) fingerprint["shard"] = shard.text();  // absent: older partial runs match
  return fingerprint;
}

// What features.json records as its source: the tile store, and for a shard which slides of
// it, with the settings a merge must find equal (--batch, the device kind, math threads).
json store_source(const json& source, const ShardPlan& plan, const json& fingerprint) {
  if (plan.shard.whole()) return source;
  json run = fingerprint;
  for (const char* field : {"source", "model", "dtype", "shard"}) run.erase(field);
  json out = source;
  out["shard"] = plan.to_json(run);
  return out;
}

void warn_if_other_cpu(const json& stored_note, const json& note) {
  if (stored_note.is_object() && stored_note.value("cpu", json()) != note["cpu"])
    log::warn(
        "resuming on another CPU (" + note["cpu"].get<std::string>() +
        ") than the partial run's (" + value_text(stored_note.value("cpu", json())) +
        "): the math library may take another code path there, so rows computed here can differ in "
        "their last bits from an uninterrupted run on either");
}

// The rows an earlier run committed, where this one resumes.
std::uint64_t resume_position(const ChunkedFeatureWriter& writer, std::uint64_t tiles) {
  const std::uint64_t first = writer.committed_rows();
  if (first > tiles)
    throw FormatError(at_file(writer.partial_dir(),
                              "holds more rows than the tile store (or its shard) has tiles"));
  if (first > 0)
    log::info("resuming after " + std::to_string(first) + " of " + std::to_string(tiles) +
              " tiles");
  return first;
}

// What a pipeline reads, named where it is built (extract_features). Everything it points to
// outlives the pipeline.
struct PipelineInputs {
  const ExtractJob* job = nullptr;
  const slide::TilePixels* pixels = nullptr;       // the tile store, or the slides of coordinates
  const std::vector<std::string>* keys = nullptr;  // the whole store's keys
  const ShardPlan* plan = nullptr;                 // the rows this run (its shard) takes
  int tile = 0;                                    // tile side, pixels
  std::int64_t dims = 0;                           // the model's features per row
  std::uint64_t first = 0;                         // rows committed by an earlier run
  std::vector<torch::Device> devices;              // one device thread each
  const StainNormalizer* stain = nullptr;          // --stain-norm, or null
  const SlideStains* slide_stains = nullptr;       // --stain-fit slide, or null
  bool device_decode = false;                      // JPEG tiles decoded by nvJPEG (--decode)
};

// The three stages and what they share: a reader fills pool buffers with decoded batches,
// one thread per device computes them and returns the buffers, the caller writes the rows.
// Every member is set from the inputs alone, so their order does not matter.
struct Pipeline {
  explicit Pipeline(const PipelineInputs& in)
      : job(*in.job),
        pixels(*in.pixels),
        keys(*in.keys),
        plan(*in.plan),
        tile(in.tile),
        dims(in.dims),
        stain(in.stain),
        slide_stains(in.slide_stains),
        device_decode(in.device_decode),
        first(in.first),
        batch(static_cast<std::uint64_t>(in.job->batch)),
        first_row(in.first < in.plan->rows ? in.plan->store_row(in.first) : in.keys->size()),
        batch_ids(in.plan->batches(in.first, static_cast<std::uint64_t>(in.job->batch))),
        pool(pool_size(in)),
        ready(pool_size(in)),
        live_workers(static_cast<int>(in.devices.size())) {
    const bool pinned = std::any_of(in.devices.begin(), in.devices.end(),
                                    [](const torch::Device& d) { return d.is_cuda(); });
    for (std::size_t i = 0; i < pool_size(in); ++i)
      pool.push(torch::empty({in.job->batch, in.tile, in.tile, 3},
                             torch::TensorOptions().dtype(torch::kUInt8).pinned_memory(pinned)));
  }
  // Host buffers of decoded batches: two for the reader, two for each device.
  static std::size_t pool_size(const PipelineInputs& in) { return 2 + 2 * in.devices.size(); }
  // A device thread waited `seconds` for a decoded batch.
  void note_wait(double seconds) {
    std::lock_guard lock(wait_mutex);
    wait_seconds += seconds;
    max_wait_seconds = std::max(max_wait_seconds, seconds);
  }
  // A device thread spent `seconds` normalising a batch's stain.
  void note_stain(double seconds) {
    std::lock_guard lock(wait_mutex);
    stain_seconds += seconds;
  }
  // Whether store row `row` is written: this run's (shard's) and not committed before.
  bool writes(std::uint64_t row) const { return row >= first_row && plan.takes_row(row); }
  // The batches this run computes.
  std::uint64_t batches() const { return batch_ids.size(); }

  const ExtractJob& job;
  const slide::TilePixels& pixels;
  const std::vector<std::string>& keys;  // batches count rows from the store's row 0
  const ShardPlan& plan;
  const int tile;
  const std::int64_t dims;
  const StainNormalizer* stain;
  const SlideStains* slide_stains;
  const bool device_decode;
  const std::uint64_t first;  // rows committed by an earlier run
  const std::uint64_t batch;
  // The store row of the first row to write; the batch's rows before it, and rows of other
  // shards' slides in the batches, are computed (so each row is computed where one run over
  // the store computes it) but not written.
  const std::uint64_t first_row;
  const std::vector<std::uint64_t> batch_ids;
  util::BoundedQueue<torch::Tensor> pool;
  util::BoundedQueue<HostBatch> ready;
  Reorder results;
  Failure failure;
  std::atomic<int> live_workers;
  std::unique_ptr<util::BatchSplitter> splitter;  // set by start_splitter
  std::mutex wait_mutex;
  double wait_seconds = 0, max_wait_seconds = 0;  // note_wait's
  double stain_seconds = 0;                       // note_stain's
  // The writer's: when the first batch's rows were written, and how many.
  Clock::time_point first_done;
  std::uint64_t first_rows = 0;
  std::uint64_t stain_unchanged = 0;             // rows written as they were (--stain-norm)
  std::atomic<std::uint64_t> device_decoded{0};  // tiles nvJPEG decoded (--decode device)
};

// The out-of-memory size rule where the batches before this run's first left it: the splits
// the committed chunks recorded are replayed (batch_split.hpp).
void start_splitter(Pipeline& p, const ChunkedFeatureWriter& writer) {
  std::map<std::uint64_t, util::BatchSplit> recorded;
  for (const auto& j : writer.committed_splits()) {
    const util::BatchSplit s = util::BatchSplit::from_json(j, writer.partial_dir());
    recorded.emplace(s.batch, s);
  }
  p.splitter = std::make_unique<util::BatchSplitter>(p.job.batch, !p.job.no_oom_retry, recorded);
  if (recorded.empty() || p.batch_ids.empty()) return;
  std::vector<std::uint64_t> earlier = p.plan.batches(0, p.batch);
  earlier.erase(std::lower_bound(earlier.begin(), earlier.end(), p.batch_ids.front()),
                earlier.end());
  p.splitter->replay(earlier);
}

// "m.pt at input size 224", for an out-of-memory error.
std::string model_text(const Extractor& model, int input_size) {
  const json d = model.describe();
  return (d.contains("path") ? d.value("path", std::string())
                             : "builtin:" + d.value("name", std::string())) +
         " at input size " + std::to_string(input_size);
}

// Tiles `which` of batch `hb` read on the host (slide::TilePixels: decoded from the store, or
// read from the slides of a coordinates store, on --threads workers) into its buffer's slots
// from `slot` on, in that order. A tile that fails is marked invalid under --keep-going (or
// when its row is not written by this run); otherwise its error ends the run.
void read_on_host(Pipeline& p, HostBatch& hb, const std::vector<std::int64_t>& which,
                  std::int64_t slot) {
  if (which.empty()) return;
  const std::string* keys = p.keys.data() + hb.first_row;
  const std::size_t tile_bytes = static_cast<std::size_t>(p.tile) * p.tile * 3;
  p.pixels.read(
      which.size(), [&](std::size_t j) -> const std::string& { return keys[which[j]]; },
      p.job.threads, hb.pixels.data_ptr<std::uint8_t>() + slot * tile_bytes,
      [&](std::size_t j, const Error& e) {
        const auto i = static_cast<std::uint64_t>(which[j]);
        const bool recomputed = !p.writes(hb.first_row + i);  // committed already, or not ours
        if (!p.job.keep_going && !recomputed) throw;          // the read's error, as it is
        if (!recomputed) log::warn(std::string(e.what()) + "; its row is marked invalid (NaN)");
        hb.invalid[i] = 1;
      });
}

// Batch `b` of this run read into `buffer`: every tile decoded on the host, or with --decode
// device each tile's JPEG stream, the tiles without one decoded on the host.
HostBatch decode_batch(Pipeline& p, std::uint64_t b, torch::Tensor buffer) {
  HostBatch hb;
  hb.index = b;
  hb.first_row = p.batch_ids[b] * p.batch;
  hb.size =
      static_cast<std::int64_t>(std::min<std::uint64_t>(p.job.batch, p.keys.size() - hb.first_row));
  hb.pixels = buffer;
  hb.invalid.assign(hb.size, 0);
  std::vector<std::int64_t> all(static_cast<std::size_t>(hb.size));
  for (std::int64_t i = 0; i < hb.size; ++i) all[i] = i;
  if (!p.device_decode) {
    read_on_host(p, hb, all, 0);
    return hb;
  }
  const std::string* keys = p.keys.data() + hb.first_row;
  p.pixels.read_jpeg(
      static_cast<std::size_t>(hb.size),
      [keys](std::size_t i) -> const std::string& { return keys[i]; }, p.job.threads, hb.jpegs);
  for (const std::int64_t i : all)
    if (hb.jpegs[i].empty()) hb.on_host.push_back(i);
  read_on_host(p, hb, hb.on_host, 0);
  return hb;
}

// Reader + decoders: batches in store order into pool buffers.
void read_batches(Pipeline& p) {
  try {
    for (std::uint64_t b = 0; b < p.batches() && !p.failure.stopped; ++b) {
      auto buffer = p.pool.pop();
      if (!buffer) break;
      if (!p.ready.push(decode_batch(p, b, *buffer))) break;
    }
  } catch (...) {
    p.failure.set(std::current_exception());
  }
  p.ready.close();
}

// --stain-norm on a batch: each tile's stain estimated from itself, or its slide's; the time
// it took noted (apply waits for its device: it reads the tiles' counts back).
torch::Tensor normalise_stain(Pipeline& p, HostBatch& hb, const torch::Tensor& input) {
  const auto start = Clock::now();
  torch::Tensor out;
  if (!p.slide_stains) {
    out = p.stain->apply(input, hb.unstained);
  } else {
    std::vector<const SourceStain*> sources;
    for (std::int64_t i = 0; i < hb.size; ++i)
      sources.push_back(p.slide_stains->of_row(hb.first_row + static_cast<std::uint64_t>(i)));
    out = p.stain->apply(input, sources, hb.unstained);
  }
  p.note_stain(std::chrono::duration<double>(Clock::now() - start).count());
  return out;
}

// A batch on its device: its features possibly still computing and, on a GPU, on their way
// to pinned host memory on a side stream (`copied` recorded after), so that the thread can
// queue the next batch's forward before it waits for this one's rows.
struct InFlight {
  HostBatch batch;
  torch::Tensor features;  // on the device
  std::optional<util::BatchSplit> split;
  torch::Tensor host;  // CUDA: the pinned copy, complete once `copied` is
  std::optional<at::cuda::CUDAEvent> copied;
};

// Starts `f`'s features on their way to the host: after the forward, on `stream`.
void copy_to_host(InFlight& f, const c10::cuda::CUDAStream& stream) {
  const torch::InferenceMode guard;  // the features are an inference tensor; record_stream
                                     // counts as writing to them
  at::cuda::CUDAEvent computed;
  computed.record(c10::cuda::getCurrentCUDAStream(f.features.device().index()));
  computed.block(stream);
  const c10::cuda::CUDAStreamGuard on_stream(stream);
  f.host = torch::empty(f.features.sizes(),
                        f.features.options().device(torch::kCPU).pinned_memory(true));
  f.host.copy_(f.features, /*non_blocking=*/true);
  f.features.record_stream(stream);
  f.copied.emplace();
  f.copied->record(stream);
}

// `f`'s rows to the writer (on a GPU, once their copy is complete) and its buffer to the pool.
void collect(Pipeline& p, InFlight& f) {
  Result r;
  r.first_row = f.batch.first_row;
  r.size = f.batch.size;
  if (f.copied) {
    f.copied->synchronize();
    r.features = f.host;
  } else {
    r.features = f.features.to(torch::kCPU).contiguous();
  }
  r.invalid = std::move(f.batch.invalid);
  r.unstained = std::move(f.batch.unstained);
  r.split = f.split;
  p.pool.push(f.batch.pixels);
  p.results.put(f.batch.index, std::move(r));
}

// Decoded tiles on their way to the device on `copy_stream`, which the compute stream waits
// for; on the CPU, as they are.
torch::Tensor upload(torch::Tensor input, const std::optional<c10::cuda::CUDAStream>& copy_stream) {
  if (!copy_stream) return input;
  at::cuda::CUDAEvent copied;
  {
    const c10::cuda::CUDAStreamGuard on_copy(*copy_stream);
    input = input.to(copy_stream->device(), /*non_blocking=*/true);
    copied.record(*copy_stream);
  }
  const auto compute = c10::cuda::getCurrentCUDAStream(copy_stream->device_index());
  copied.block(compute);
  input.record_stream(compute);
  return input;
}

// nvJPEG on this thread's device (--decode device), or ResourceError saying why not.
std::unique_ptr<cuda::JpegDecoder> open_decoder(const torch::Device& device) {
  std::string why_not;
  auto decoder = cuda::JpegDecoder::open(why_not);
  if (!decoder)
    throw ResourceError("--decode device on " + device.str() + ": " + why_not +
                        "; decode on the host with --decode host");
  return decoder;
}

// --decode device: batch `hb`'s JPEG tiles decoded by nvJPEG into a device tensor on the
// compute stream, with no host copy of their pixels; the others — read on the host by the
// reader (hb.on_host), or refused by nvJPEG and read on the host here — copied into their rows.
torch::Tensor decode_on_device(Pipeline& p, HostBatch& hb, cuda::JpegDecoder& decoder,
                               const torch::Device& device) {
  const auto stream = c10::cuda::getCurrentCUDAStream(device.index());
  torch::Tensor out = torch::empty({hb.size, p.tile, p.tile, 3},
                                   torch::TensorOptions().dtype(torch::kUInt8).device(device));
  const std::vector<std::string_view> jpegs(hb.jpegs.begin(), hb.jpegs.end());
  const auto decoded = decoder.decode(jpegs, p.tile, out.data_ptr<std::uint8_t>(), stream.stream());
  std::vector<std::int64_t> refused;
  std::uint64_t on_device = 0;
  for (std::int64_t i = 0; i < hb.size; ++i) {
    on_device += decoded[i];
    if (!hb.jpegs[i].empty() && !decoded[i]) refused.push_back(i);
  }
  p.device_decoded += on_device;
  read_on_host(p, hb, refused, static_cast<std::int64_t>(hb.on_host.size()));
  std::vector<std::int64_t> rows = hb.on_host;
  rows.insert(rows.end(), refused.begin(), refused.end());
  if (!rows.empty()) {
    const auto n = static_cast<std::int64_t>(rows.size());
    const torch::Tensor index = torch::tensor(rows, torch::kLong).to(device, true);
    out.index_copy_(0, index, hb.pixels.narrow(0, 0, n).to(device, /*non_blocking=*/true));
  }
  return out;
}

// One thread per device: copy (side stream) → preprocess + forward → features to host (side
// stream). Batch N+1's forward is queued before batch N's rows are waited for, so the device
// never idles between batches while the host collects. `profiled`: this thread records
// --profile (the first device's).
void run_device(Pipeline& p, Extractor& model, bool profiled) {
  try {
    at::init_num_threads();  // this thread's OpenMP team: the math threads set above
    const torch::Device device = model.device();
    util::StepProfiler profiler(profiled ? p.job.profile : util::ProfileRequest{}, device.is_cuda(),
                                "batch");
    std::optional<c10::cuda::CUDAStream> copy_stream, back_stream;
    std::optional<c10::cuda::CUDAGuard> device_guard;
    std::unique_ptr<cuda::JpegDecoder> decoder;  // --decode device
    if (device.is_cuda()) {
      device_guard.emplace(device.index());
      copy_stream = c10::cuda::getStreamFromPool(false, device.index());
      back_stream = c10::cuda::getStreamFromPool(false, device.index());
      if (p.device_decode) decoder = open_decoder(device);
    }
    std::optional<InFlight> pending;
    for (bool first = true; !p.failure.stopped; first = false) {
      profiler.end_step();
      profiler.begin_step();
      const auto waiting = Clock::now();
      std::optional<HostBatch> hb;
      {
        RECORD_USER_SCOPE("extract: waiting for decoded tiles");  // a starved device shows here
        hb = p.ready.pop();
      }
      if (!hb) break;
      if (!first) p.note_wait(std::chrono::duration<double>(Clock::now() - waiting).count());
      torch::Tensor input = decoder ? decode_on_device(p, *hb, *decoder, device)
                                    : upload(hb->pixels.narrow(0, 0, hb->size), copy_stream);
      if (p.stain) input = normalise_stain(p, *hb, input);  // before the preprocessing
      std::optional<util::BatchSplit> split;
      auto features = p.splitter->forward(
          input, p.batch_ids[hb->index], [&](const torch::Tensor& x) { return model.forward(x); },
          device, model_text(model, p.job.input_size), split);
      if (features.size(1) != p.dims)
        throw UsageError("the model produced " + std::to_string(features.size(1)) +
                         " features for a batch of " + std::to_string(hb->size) + " tiles, not " +
                         std::to_string(p.dims));
      InFlight next{std::move(*hb), std::move(features), split, {}, {}};
      if (back_stream) copy_to_host(next, *back_stream);
      if (pending) collect(p, *pending);  // its forward ran while this one was queued
      pending = std::move(next);
    }
    if (pending) collect(p, *pending);
  } catch (...) {
    p.failure.set(std::current_exception());
    p.ready.close();
  }
  --p.live_workers;
  p.results.wake();
}

// Records in the chunk the rows of `r` that are written, computed in a split batch.
void note_split(const Pipeline& p, ChunkedFeatureWriter& writer, const Result& r) {
  std::uint64_t rows = 0;
  for (std::int64_t i = 0; i < r.size; ++i) rows += p.writes(r.first_row + i) ? 1 : 0;
  if (rows > 0) writer.note_split(r.split->to_json(), rows);
}

// Writer: rows in store order. Returns how many rows it wrote.
std::uint64_t write_rows(Pipeline& p, ChunkedFeatureWriter& writer, Clock::time_point run_start) {
  auto last_report = Clock::now();
  std::uint64_t written = 0;
  try {
    std::vector<float> nan_row(static_cast<std::size_t>(p.dims),
                               std::numeric_limits<float>::quiet_NaN());
    for (std::uint64_t b = 0; b < p.batches(); ++b) {
      auto r = p.results.take(b, [&] { return p.failure.stopped || p.live_workers == 0; });
      if (!r) break;
      const float* rows = r->features.data_ptr<float>();
      if (r->split) note_split(p, writer, *r);
      for (std::int64_t i = 0; i < r->size; ++i) {
        if (!p.writes(r->first_row + i)) continue;
        const bool invalid = r->invalid[i] != 0;
        writer.append(p.keys[r->first_row + i], invalid ? nan_row.data() : rows + i * p.dims,
                      invalid);
        if (!invalid && !r->unstained.empty() && r->unstained[i]) ++p.stain_unchanged;
        ++written;
      }
      if (p.first_rows == 0 && written > 0) {
        p.first_done = Clock::now();
        p.first_rows = written;
      }
      if (b + 1 < p.batches())  // SIGTERM: run_pipeline commits these rows as a chunk
        util::stop_if_requested(std::to_string(p.first + written) + " of " +
                                std::to_string(p.plan.rows) + " rows, committed");
      if (std::chrono::duration<double>(Clock::now() - last_report).count() >= 10) {
        last_report = Clock::now();
        const double s = std::chrono::duration<double>(Clock::now() - run_start).count();
        log::info(std::to_string(p.first + written) + "/" + std::to_string(p.plan.rows) +
                  " tiles, " + rate_text(written / s) + " tiles/s");
      }
    }
  } catch (...) {
    p.failure.set(std::current_exception());
  }
  return written;
}

// Runs the three stages to the end or the first error; on an error keeps the complete rows
// (the next run resumes after them) and rethrows it. Returns how many rows were written.
std::uint64_t run_pipeline(Pipeline& p, ChunkedFeatureWriter& writer,
                           const std::vector<std::unique_ptr<Extractor>>& replicas,
                           Clock::time_point& run_start) {
  std::thread reader(read_batches, std::ref(p));
  std::vector<std::thread> workers;
  for (std::size_t i = 0; i < replicas.size(); ++i)
    workers.emplace_back(run_device, std::ref(p), std::ref(*replicas[i]), i == 0);
  run_start = Clock::now();
  const std::uint64_t written = write_rows(p, writer, run_start);
  p.failure.stopped = true;
  p.ready.close();
  p.pool.close();
  reader.join();
  for (auto& t : workers) t.join();
  if (p.failure.error) {
    writer.commit_chunk();  // keep what is complete: the next run resumes after it
    std::rethrow_exception(p.failure.error);
  }
  return written;
}

// The tile store's complete tiles, and the rows of them this run (its shard) takes.
struct Tiles {
  std::unique_ptr<io::TileStore> store;  // a pointer: pixels keeps a reference to it
  std::unique_ptr<slide::TilePixels> pixels;
  int tile = 0;
  std::vector<std::string> keys;
  ShardPlan plan;
};

Tiles open_tiles(const ExtractJob& job) {
  Tiles t{
      std::make_unique<io::TileStore>(io::TileStore::open(job.store, false)), nullptr, 0, {}, {}};
  t.pixels = std::make_unique<slide::TilePixels>(*t.store, job.tile.dicomweb);
  t.tile = t.pixels->tile_size();
  t.keys = t.store->complete_tile_keys();
  if (t.keys.empty()) throw InputError(at_file(job.store, "holds no complete slide with tiles"));
  for (const auto& id : t.store->incomplete_slides())
    log::warn(job.store + ": slide " + id +
              " is incomplete (tiles failed when it was tiled): its features are those of the "
              "tiles there are; `mltool tile` into the store again fetches the others");
  t.plan = plan_shard(t.keys, util::resolve_shard(job.shard, job.shards));
  if (!t.plan.shard.whole())
    log::info("shard " + t.plan.shard.text() + ": " + std::to_string(t.plan.slides.size()) +
              " of " + std::to_string(t.plan.store_slides) + " slides, " +
              std::to_string(t.plan.rows) + " of " + std::to_string(t.keys.size()) + " tiles");
  return t;
}

// Slides' QC pictures (--qc) show the slide normalised beside it.
void show_stain_in_qc(const StainNormalizer& stain, ExtractJob& job) {
  job.tile.qc_recolour = [stain](const io::RgbImage& image) { return stain.recolour(image); };
  job.tile.qc_recolour_caption = std::string("right: --stain-norm ") +
                                 util::name_of(kStainNorms, stain.method()) + " towards " +
                                 std::filesystem::path(job.stain_reference).filename().string() +
                                 ", the stain estimated on the picture";
}

// --stain-norm fitted on --stain-reference, or nothing; slides' QC pictures then show them
// normalised too.
std::optional<StainNormalizer> load_stain(ExtractJob& job) {
  if (job.stain_norm == StainNorm::none) return std::nullopt;
  StainNormalizer stain = StainNormalizer::from_file(job.stain_norm, job.stain_reference);
  log::info(std::string("--stain-norm ") + util::name_of(kStainNorms, job.stain_norm) +
            " fitted on " + job.stain_reference + " (sha256 " + stain.sha256() + ")");
  show_stain_in_qc(stain, job);
  return stain;
}

// What the stain normalisation was, in the model object of features.json and the resume
// fingerprint: a resume with another method, reference image or fit is refused, naming the
// option.
void record_stain(const StainNormalizer& stain, StainFit fit, json& model) {
  model["stain_norm"] = util::name_of(kStainNorms, stain.method());
  model["stain_reference"] = {{"sha256", stain.sha256()},
                              {"fit", util::name_of(kStainFits, fit)},
                              {"target", stain.target_json()}};
}

// --stain-fit slide: each of this run's slides' source stain, a partial run's where it
// recorded them (its config's note), so a resumed run normalises as the interrupted one did.
std::optional<SlideStains> fit_slide_stains(const ExtractJob& job, const StainNormalizer* stain,
                                            const Tiles& tiles, const json& stored_note) {
  if (!stain || job.stain_fit != StainFit::slide) return std::nullopt;
  const json recorded = stored_note.is_object() ? stored_note.value("stain_fits", json()) : json();
  const auto start = Clock::now();
  SlideStains fits(*stain, *tiles.pixels, tiles.keys, tiles.plan, job.threads, recorded,
                   util::join_path(job.output, ".extract-partial"));
  log::info("--stain-fit slide: " + std::to_string(tiles.plan.slides.size()) + " slides' stain " +
            (recorded.is_object() ? "as the partial run recorded it" : "estimated") + " in " +
            rate_text(std::chrono::duration<double>(Clock::now() - start).count()) + " s; " +
            std::to_string(fits.unfitted()) +
            " had no sampled tile with enough stain (their tiles are left as they are)");
  return fits;
}

// --decode device without a GPU: refused before anything is read or written.
void check_decode(const ExtractJob& job, const std::vector<torch::Device>& devices) {
  if (job.decode == Decode::device && !devices.front().is_cuda())
    throw UsageError(
        "--decode device decodes JPEG tiles on a GPU, and this run has none "
        "(--device " +
        job.device + "): use --decode host or auto");
}

// The decoder of this run's JPEG tiles (--decode): nvJPEG's backend on the GPUs, or
// libjpeg-turbo on the host. --decode device where it cannot be had: UsageError (no GPU, PNG
// tiles) or ResourceError (nvJPEG missing).
std::string choose_decoder(const ExtractJob& job, const std::vector<torch::Device>& devices,
                           const slide::TilePixels& pixels) {
  const std::string host = "libjpeg-turbo";
  if (job.decode == Decode::host) return host;
  const bool forced = job.decode == Decode::device;
  if (!devices.front().is_cuda()) return host;  // --decode device: refused by check_decode
  if (!pixels.may_be_jpeg()) {
    if (forced)
      throw UsageError("--decode device decodes JPEG tiles: " + job.store +
                       " holds PNG tiles; use --decode host or auto");
    return host;
  }
  const c10::cuda::CUDAGuard guard(devices.front().index());
  std::string why_not;
  const auto decoder = cuda::JpegDecoder::open(why_not);
  if (!decoder) {
    if (forced) throw ResourceError("--decode device: " + why_not + "; use --decode host");
    log::info("JPEG tiles decoded on the host (libjpeg-turbo): " + why_not);
    return host;
  }
  log::info("JPEG tiles decoded on the GPU by nvJPEG " + decoder->version() + " (" +
            decoder->backend() + "); tiles of other kinds on the host");
  return decoder->backend();
}

// What the pipeline did, into the report and the log: waits, stain, decoding, rates.
void note_run(const Pipeline& p, std::uint64_t written, Clock::time_point start,
              Clock::time_point run_start, ExtractReport& report) {
  report.input_wait_seconds = p.wait_seconds;
  report.max_input_wait_seconds = p.max_wait_seconds;
  report.stain_unchanged = p.stain_unchanged;
  report.stain_seconds = p.stain_seconds;
  report.device_decoded = p.device_decoded;
  if (p.device_decode)
    log::info(std::to_string(report.device_decoded) + " tiles decoded by " + report.decoder + ", " +
              std::to_string(written) +
              " written in all (tiles of other kinds, or that "
              "nvJPEG refused, were decoded on the host)");
  if (p.stain) {
    char took[64];
    std::snprintf(took, sizeof took, "; the normalisation took %.2f s", p.stain_seconds);
    log::info(std::to_string(p.stain_unchanged) + " of " + std::to_string(written) +
              " tiles had too little stain to normalise and were left as they were" + took);
  }
  const auto end = Clock::now();
  report.seconds = std::chrono::duration<double>(end - start).count();
  const double run_seconds = std::chrono::duration<double>(end - run_start).count();
  report.tiles_per_second = run_seconds > 0 ? written / run_seconds : 0;
  if (p.first_rows > 0) {
    report.first_batch_seconds = std::chrono::duration<double>(p.first_done - start).count();
    const double steady = std::chrono::duration<double>(end - p.first_done).count();
    if (written > p.first_rows && steady > 0)
      report.steady_tiles_per_second = static_cast<double>(written - p.first_rows) / steady;
  }
}

// What a partial run recorded (ChunkedFeatureWriter::partial_config): its fingerprint ("run"),
// its math threads and its note; nulls and 0 when there is none.
struct PartialRun {
  json run;
  json note;
  int math_threads = 0;
};

PartialRun read_partial(const std::string& output) {
  const json partial = ChunkedFeatureWriter::partial_config(output);
  if (!partial.is_object()) return {};
  PartialRun out{partial.value("run", json()), partial.value("note", json())};
  if (out.run.is_object()) out.math_threads = out.run.value("math_threads", 0);
  return out;
}

// The report as the run starts: where, the model (its stain, where tiles are decoded), the
// devices, the math threads and the shard.
ExtractReport start_report(const ExtractJob& job, const Tiles& tiles, const json& model,
                           std::int64_t dims, const StainNormalizer* stain,
                           const std::vector<torch::Device>& devices, int math_threads) {
  ExtractReport report;
  report.output = job.output;
  report.store = job.store;
  report.dims = dims;
  report.model = model;
  if (stain) record_stain(*stain, job.stain_fit, report.model);
  report.decoder = choose_decoder(job, devices, *tiles.pixels);
  if (report.decoder != "libjpeg-turbo") report.model["decode"] = report.decoder;  // else host
  for (const auto& d : devices) report.devices.push_back(d.str());
  report.math_threads = math_threads;
  report.shard = tiles.plan.shard.whole() ? "" : tiles.plan.shard.text();
  report.rows = tiles.plan.rows;
  return report;
}

// The note the feature chunks keep: the CPU (a resume on another one is warned about) and
// --stain-fit slide's estimates.
json chunk_note(bool on_cpu, const PartialRun& partial,
                const std::optional<SlideStains>& slide_stains) {
  json note = {{"cpu", cpu_model()}};
  if (slide_stains) note["stain_fits"] = slide_stains->to_json();
  if (on_cpu) warn_if_other_cpu(partial.note, note);
  return note;
}

}  // namespace

ExtractReport extract_features(const ExtractJob& request) {
  const auto start = Clock::now();
  check_job(request);
  const auto devices = util::resolve_devices(request.device);
  const bool on_cpu = devices.front().is_cpu();
  check_decode(request, devices);
  Resolved resolved = resolve_model(request, on_cpu);
  ExtractJob& job = resolved.job;
  const std::optional<StainNormalizer> stain = load_stain(job);  // before --overwrite empties
  const util::OutputLock lock(job.output, "mltool extract");     // one writer per feature store
  if (job.overwrite) ChunkedFeatureWriter::remove_all(job.output);
  auto tiled = resolve_inputs(job);  // job.store: the tile store, or the slides' coordinates
  const Tiles tiles = open_tiles(job);
  const ShardPlan& plan = tiles.plan;

  const PartialRun partial = read_partial(job.output);
  const int math_threads =
      on_cpu ? util::set_math_threads(job.math_threads, partial.math_threads) : 0;
  const auto replicas = load_replicas(job, resolved.settings, devices, tiles.tile);
  const std::int64_t dims = replicas.front()->dims();
  ExtractReport report = start_report(job, tiles, replicas.front()->describe(), dims,
                                      stain ? &*stain : nullptr, devices, math_threads);
  report.tiled = std::move(tiled);
  const json source = source_json(*tiles.store, tiles.keys, tiles.tile);
  const json fingerprint =
      fingerprint_of(job, source, report.model, on_cpu, math_threads, plan.shard);
  const json recorded = store_source(source, plan, fingerprint);
  if (already_complete(job.output, recorded, report.model, job.dtype)) {
    report.skipped = true;
    report.seconds = std::chrono::duration<double>(Clock::now() - start).count();
    return report;
  }

  check_resume(job.output, partial.run, fingerprint);
  const std::optional<SlideStains> slide_stains =
      fit_slide_stains(job, stain ? &*stain : nullptr, tiles, partial.note);
  ChunkedFeatureWriter writer(job.output, static_cast<std::uint64_t>(dims), fingerprint,
                              job.chunk_rows, chunk_note(on_cpu, partial, slide_stains));
  const std::uint64_t first = resume_position(writer, plan.rows);
  report.resumed_from = first;

  PipelineInputs inputs;
  inputs.job = &job;
  inputs.pixels = tiles.pixels.get();
  inputs.keys = &tiles.keys;
  inputs.plan = &plan;
  inputs.tile = tiles.tile;
  inputs.dims = dims;
  inputs.first = first;
  inputs.devices = devices;
  inputs.stain = stain ? &*stain : nullptr;
  inputs.slide_stains = slide_stains ? &*slide_stains : nullptr;
  inputs.device_decode = report.decoder != "libjpeg-turbo";
  Pipeline pipeline(inputs);
  start_splitter(pipeline, writer);
  Clock::time_point run_start;
  const std::uint64_t written = run_pipeline(pipeline, writer, replicas, run_start);
  const std::uint64_t total = plan.rows - first;
  if (written != total)
    throw ResourceError("extraction stopped after " + std::to_string(written) + " of " +
                        std::to_string(total) + " tiles");

  report.invalid = writer.finish(job.dtype, report.model, recorded,
                                 slide_stains ? slide_stains->to_json() : json());
  note_run(pipeline, written, start, run_start, report);
  return report;
}

}  // namespace mltool::features
