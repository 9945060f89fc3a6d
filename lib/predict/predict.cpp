// mltool predict: a finished run applied to new slides, one slide at a time, each slide's
// scores journaled so that a stopped prediction resumes (see predict.hpp).
#include "mltool/predict/predict.hpp"

#include <torch/torch.h>

#include <chrono>
#include <map>
#include <memory>
#include <set>
#include <unordered_map>

#include "mltool/io/sha256.hpp"
#include "mltool/io/table.hpp"
#include "mltool/io/tile_store.hpp"
#include "mltool/report/pages.hpp"
#ifdef MLTOOL_HAVE_SLIDE
#include "mltool/slide/view.hpp"
#endif
#include "mltool/train/safetensors.hpp"
#include "mltool/train/trained_run.hpp"
#include "mltool/util/device.hpp"
#include "mltool/util/error.hpp"
#include "mltool/util/file.hpp"
#include "mltool/util/log.hpp"
#include "mltool/util/math_env.hpp"
#include "mltool/util/output_lock.hpp"
#include "mltool/util/stop.hpp"
#include "predict_parts.hpp"

namespace mltool::predict {

using train::csv_field;
using train::exact_float;
using train::read_safetensors;
using train::SafetensorsEntry;
using train::SafetensorsFile;
using train::write_safetensors;
using Task = train::TaskOutputs;

namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;
constexpr const char* kJournalDir = ".predict";

// --label's id (the last label's if empty); UsageError naming the run's labels if it has none
// such.
std::size_t label_index(const PredictJob& job, const std::vector<std::string>& labels) {
  if (job.label.empty()) return labels.size() - 1;
  const auto it = std::find(labels.begin(), labels.end(), job.label);
  if (it == labels.end()) {
    std::string names;
    for (const auto& l : labels) names += (names.empty() ? "" : ", ") + l;
    throw UsageError("--label " + job.label + ": not a label of the run (" + names + ")");
  }
  return static_cast<std::size_t>(it - labels.begin());
}

// OUTPUT/.predict/: job.json, everything that decides the output's bytes, and SLIDE.safetensors,
// each finished slide's scores. A prediction into an output whose job.json differs is refused
// (or, --overwrite, the output's files are removed first: --overwrite always starts over).
class ScoreJournal {
 public:
  ScoreJournal(const PredictJob& job, const json& fingerprint)
      : dir_(util::join_path(job.output, kJournalDir)) {
    const std::string path = util::join_path(dir_, "job.json");
    const bool other = util::exists(path) ? json::parse(util::read_file(path)) != fingerprint
                                          : util::exists(job.output + "/predictions.csv");
    if (other && !job.overwrite)
      throw UsageError(job.output + ": holds a prediction with other settings (" + path +
                       "); predict into another directory, or replace it with --overwrite");
    if (other || job.overwrite)
      for (const char* name : {kJournalDir, "heatmaps", "view", "predictions.csv", "attention.csv"})
        util::remove_tree(util::join_path(job.output, name));
    util::make_directories(dir_);
    util::remove_stale_partials(dir_);
    if (!util::exists(path)) util::write_file_atomic(path, fingerprint.dump(2) + "\n");
  }

  // The scores of slide `id` if a previous run finished it (with `rows` rows), else nothing.
  std::optional<SlideScores> find(const std::string& id, std::size_t rows, bool bag) const {
    const std::string path = file(id);
    if (!util::exists(path)) return std::nullopt;
    const SafetensorsFile f = read_safetensors(path);
    const auto l = f.tensors.find("logits");
    const auto a = f.tensors.find("attention");
    if (l == f.tensors.end() || l->second.dtype != "F32" || l->second.shape.size() != 2 ||
        l->second.shape[0] != static_cast<std::int64_t>(bag ? 1 : rows) ||
        (a != f.tensors.end() && a->second.bytes != rows * sizeof(float))) {
      log::warn(at_file(path, "not this slide's scores: predicting it again"));
      return std::nullopt;
    }
    SlideScores s;
    s.logits = torch::from_blob(const_cast<void*>(l->second.data), l->second.shape).clone();
    if (a != f.tensors.end()) {
      const auto* p = static_cast<const float*>(a->second.data);
      s.attention.assign(p, p + rows);
    }
    return s;
  }

  void save(const std::string& id, const SlideScores& s) const {
    const auto l = s.logits.contiguous();
    std::vector<SafetensorsEntry> t = {
        {"logits", "F32", {l.size(0), l.size(1)}, l.data_ptr(), l.nbytes()}};
    if (!s.attention.empty())
      t.push_back({"attention",
                   "F32",
                   {static_cast<std::int64_t>(s.attention.size())},
                   s.attention.data(),
                   s.attention.size() * sizeof(float)});
    std::map<std::string, std::string> metadata;
    if (!s.splits.empty()) metadata["mltool.split_batches"] = s.splits.dump();
    write_safetensors(file(id), t, metadata);
  }

 private:
  std::string file(const std::string& id) const {
    return util::join_path(dir_, id + ".safetensors");
  }
  std::string dir_;
};

// predictions.csv: sample, slide, then the task's columns (Task::output_header).
void write_predictions(const std::string& path, const std::vector<std::string>& samples,
                       const std::vector<std::string>& slides, const torch::Tensor& outputs,
                       const Task& task) {
  const auto o = outputs.to(torch::kFloat32).contiguous();
  const auto k = o.size(1);
  util::AtomicFile out(path);
  out.write("sample,slide," + task.output_header() + "\n");
  for (std::size_t i = 0; i < samples.size(); ++i)
    out.write(csv_field(samples[i]) + "," + csv_field(slides[i]) + "," +
              task.output_row(o.data_ptr<float>() + static_cast<std::int64_t>(i) * k) + "\n");
  out.commit();
}

void write_attention(const std::string& path, const std::vector<std::string>& keys,
                     const std::vector<float>& attention) {
  util::AtomicFile out(path);
  out.write("key,slide,attention\n");
  for (std::size_t i = 0; i < keys.size(); ++i)
    out.write(csv_field(keys[i]) + "," + csv_field(std::string(io::slide_of_key(keys[i]))) + "," +
              exact_float(attention[i]) + "\n");
  out.commit();
}

// Tile models of a task without probabilities (Task::label_names; regression, survival): each
// tile's prediction or risk, scaled to the slide's range in the PNG.
HeatmapScores outcome_scores(const SlideScores& s, const Task& task, HeatmapScores h) {
  const auto scores = std::make_shared<std::vector<double>>(task.scores(s.logits));
  const auto [lo, hi] = std::minmax_element(scores->begin(), scores->end());
  const double low = scores->empty() ? 0 : *lo, span = scores->empty() ? 0 : *hi - *lo;
  const std::string name = task.score_name();
  h.measure = [scores, name](std::size_t i, json& m) { m[name] = (*scores)[i]; };
  h.value = [scores, low, span](std::size_t i) {
    return span > 0 ? static_cast<float>(((*scores)[i] - low) / span) : 0.0f;
  };
  h.what = name + ", scaled to the slide's range";
  return h;
}

// What slide's heatmaps show: each tile's probabilities (Task::probabilities), --label's in the
// PNG (tile and image models), or its attention, divided by the slide's largest in the PNG (bag
// models).
HeatmapScores heatmap_scores(const PredictJob& job, const SlideScores& s,
                             const std::vector<std::string>& labels, const Task& task) {
  HeatmapScores h;
  h.size = job.heatmap_size;
  h.web = job.dicomweb;
  if (!s.attention.empty()) {
    const float largest = *std::max_element(s.attention.begin(), s.attention.end());
    h.measure = [&s](std::size_t i, json& m) { m["attention"] = s.attention[i]; };
    h.value = [&s, largest](std::size_t i) {
      return largest > 0 ? s.attention[i] / largest : 0.0f;
    };
    h.what = "attention / the slide's largest";
    return h;
  }
  if (labels.empty()) return outcome_scores(s, task, h);
  const auto label = static_cast<std::int64_t>(label_index(job, labels));
  const auto probs = task.probabilities(s.logits);
  const auto k = static_cast<std::int64_t>(labels.size());
  h.measure = [probs, k, &labels](std::size_t i, json& m) {
    const float* p = probs.data_ptr<float>() + static_cast<std::int64_t>(i) * k;
    for (std::int64_t c = 0; c < k; ++c) m["prob_" + labels[static_cast<std::size_t>(c)]] = p[c];
  };
  h.value = [probs, k, label](std::size_t i) {
    return probs.data_ptr<float>()[static_cast<std::int64_t>(i) * k + label];
  };
  h.what = "probability of " + labels[static_cast<std::size_t>(label)];
  return h;
}

// Everything that decides the output's bytes: a resume must repeat it.
json fingerprint(const PredictJob& job, const TrainedRun& run, const PredictInput& in,
                 const torch::Device& device, int math_threads, const Predictor& predictor) {
  json f = {{"run", util::absolute_path(job.run)},
            {"weights", util::name_of(kWeights, job.weights)},
            {"weights_sha256", io::sha256_hex(util::read_file(run.weights_file(run_weights(job))))},
            {"input", in.identity},
            {"batch", job.batch},
            {"slides", job.slides},
            {"device", device.is_cuda() ? "cuda" : "cpu"},
            {"heatmaps", in.tile_store.empty() ? "" : util::absolute_path(in.tile_store)},
            {"label", job.label},
            {"groups", job.group_table.empty()
                           ? json()
                           : json({util::absolute_path(job.group_table), job.group_column})},
            {"heatmap_size", job.heatmap_size}};
  if (device.is_cpu()) f["math_threads"] = math_threads;
  if (!predictor.stain_record().is_null()) f["stain_norm"] = predictor.stain_record();
  return f;
}

// The math threads a CPU prediction runs with: --math-threads, else a resumed prediction's.
int math_threads(const PredictJob& job) {
  const std::string path = util::join_path(util::join_path(job.output, kJournalDir), "job.json");
  int before = 0;
  if (util::exists(path)) {
    try {
      before = json::parse(util::read_file(path)).value("math_threads", 0);
    } catch (const json::exception&) {  // not ours: the journal refuses it later
    }
  }
  return util::set_math_threads(job.math_threads, before);
}

// What predict publishes, collected over the slides: per sample (tile, or bag) its logits,
// per tile its attention (bag models that tell it), in the input's order.
struct Collected {
  std::vector<std::string> samples, slides;  ///< per sample: its name and its slide
  std::vector<torch::Tensor> logits;         ///< per slide: tiles × classes, or 1 × classes
  std::vector<std::string> keys;             ///< the tiles with attention
  std::vector<float> attention;

  // Adds slide `s`'s scores; tiles are kept in the order of their rows.
  void add(const PredictInput& in, std::size_t s, const SlideScores& scores, bool bag) {
    if (bag) {
      samples.push_back(in.slides[s]);
      slides.push_back(in.slides[s]);
    }
    for (std::size_t i = 0; i < in.rows[s].size(); ++i) {
      const std::string& key = in.keys[static_cast<std::size_t>(in.rows[s][i])];
      if (!bag) {
        samples.push_back(key);
        slides.push_back(in.slides[s]);
      }
      if (!scores.attention.empty()) {
        keys.push_back(key);
        attention.push_back(scores.attention[i]);
      }
    }
    logits.push_back(scores.logits);
  }
};

// The slides' heatmaps: DIR and the store, or none.
struct Heatmaps {
  std::shared_ptr<const io::TileStore> tiles;
  std::string dir;
};

// The number of slide `s`'s first batch in the run's batch order (every slide's batches counted,
// journaled or not, so a resumed run numbers them as the uninterrupted one: MLTOOL_DEBUG_OOM).
std::uint64_t first_batch(const PredictJob& job, const PredictInput& in, std::size_t s,
                          const Predictor& predictor) {
  std::uint64_t first = 0;
  const auto batch = static_cast<std::uint64_t>(job.batch);
  for (std::size_t i = 0; i < s; ++i)
    first += predictor.bag() ? 1 : (in.rows[i].size() + batch - 1) / batch;
  return first;
}

// Slide `s`: its scores from the journal or the model (then journaled), its heatmaps.
// Returns whether they came from the journal.
bool predict_slide(const PredictJob& job, const PredictInput& in, std::size_t s,
                   const Predictor& predictor, const ScoreJournal& journal, const Heatmaps& h,
                   const std::vector<std::string>& labels, const Task& task, Collected& c,
                   PredictReport& r) {
  const std::string& slide = in.slides[s];
  const auto& rows = in.rows[s];
  auto found = journal.find(slide, rows.size(), predictor.bag());
  const bool resumed = found.has_value();
  const SlideScores scores =
      resumed ? std::move(*found)
              : predictor.score(*in.source, rows, first_batch(job, in, s, predictor));
  if (!resumed) journal.save(slide, scores);
  r.split_batches += static_cast<std::int64_t>(scores.splits.size());
  c.add(in, s, scores, predictor.bag());
  if (!h.tiles || in.grouped || (predictor.bag() && scores.attention.empty())) return resumed;
  if (!h.tiles->is_complete(slide)) {
    log::warn(at_file(in.tile_store, "no complete slide '" + slide + "': no heatmap for it"));
    return resumed;
  }
  if (!(resumed && slide_heatmaps_exist(h.dir, slide))) {
    std::vector<std::string> keys;
    keys.reserve(rows.size());
    for (const auto row : rows) keys.push_back(in.keys[static_cast<std::size_t>(row)]);
    write_slide_heatmaps(*h.tiles, slide, keys, h.dir, heatmap_scores(job, scores, labels, task));
  }
  ++r.heatmaps;
  return resumed;
}

// --view's site, OUTPUT/view/, and its index: the viewer's defaults, predict's threads and
// DICOMweb options.
std::string view_site(const PredictJob& job) { return util::join_path(job.output, "view"); }

#ifdef MLTOOL_HAVE_SLIDE
slide::ViewJob view_job(const PredictJob& job) {
  slide::ViewJob v;
  v.site = view_site(job);
  v.threads = job.threads;
  v.dicomweb = job.dicomweb;
  return v;
}

// --view needs the tiles' store and Leaflet, and with --group-table the attention (a group's
// bag spans slides: its tiles' attention is what a slide's page shows): refused before the
// slides are predicted.
void check_view(const PredictJob& job, const PredictInput& in, const Predictor& predictor) {
  if (!job.view) return;
  if (in.grouped && !predictor.has_attention())
    throw UsageError(
        "--view with --group-table: the model tells no attention, so a slide of a "
        "group's bag has nothing to show; predict without --view");
  if (!in.tiles)
    throw UsageError(
        "--view: the prediction has no tile store to show (the features name none "
        "that is there): give it with --tiles STORE");
  slide::check_leaflet(view_job(job));
}

// What report.html links each slide to, written first with --view.
std::map<std::string, std::string> viewer_pages(const PredictJob& job, const io::Table& table) {
  if (job.view) slide::write_site({job.output}, view_job(job));
  return site_pages(job.output, table);
}
#else
void check_view(const PredictJob& job, const PredictInput&, const Predictor&) {
  if (job.view)
    throw UsageError("--view: this mltool was built without slides (MLTOOL_WITH_SLIDE)");
}

std::map<std::string, std::string> viewer_pages(const PredictJob&, const io::Table&) { return {}; }
#endif

}  // namespace

std::map<std::string, std::string> site_pages(const std::string& output, const io::Table& table) {
  std::map<std::string, std::string> pages;
#ifdef MLTOOL_HAVE_SLIDE
  std::set<std::string> seen;
  const auto slide = table.column("slide");
  for (const auto& row : table.rows) {
    if (!seen.insert(row[slide]).second) continue;
    const auto page = slide::site_page(row[slide]);
    if (util::exists(util::join_path(util::join_path(output, "view"), page)))
      pages[row[slide]] = "view/" + page;
  }
#endif
  return pages;
}

json to_json(const PredictReport& r) {
  return {{"output", r.output},
          {"unit", r.unit},
          {"device", r.device},
          {"weights", r.weights},
          {"samples", r.samples},
          {"tiles", r.tiles},
          {"slides", r.slides},
          {"groups", r.groups},
          {"resumed", r.resumed},
          {"heatmaps", r.heatmaps},
          {"view", r.view.empty() ? json() : json(r.view)},
          {"split_batches", r.split_batches},
          {"memory", {{"device_peak_bytes", r.device_peak_bytes}}},
          {"seconds", r.seconds}};
}

namespace {

// Predicts the slides (each journaled, its heatmaps written) and returns their scores, holding
// the output's lock in `lock` from when the input is checked; the input, and with it the tile
// store that --view opens again, is closed on return.
Collected predict_slides(const PredictJob& job, const TrainedRun& run,
                         std::unique_ptr<util::OutputLock>& lock, PredictReport& r) {
  const auto labels = run.labels();
  const PredictInput in = open_predict_input(run, job);
  const torch::Device device = util::resolve_devices(job.device).front();
  const int threads = device.is_cpu() ? math_threads(job) : 0;
  const Predictor predictor(run, job, device);
  check_view(job, in, predictor);
  util::make_directories(util::parent_directory(util::absolute_path(job.output)));
  lock = std::make_unique<util::OutputLock>(job.output, "mltool predict");
  util::make_directories(job.output);
  const ScoreJournal journal(job, fingerprint(job, run, in, device, threads, predictor));
  const Heatmaps h{in.tiles, util::join_path(job.output, "heatmaps")};
  if (h.tiles) util::make_directories(h.dir);
  if (h.tiles && predictor.bag() && !predictor.has_attention())
    log::warn(job.run +
              "/model.script.pt: the TorchScript bag module has no attention(bag) "
              "method, so its tiles have no scores: no heatmaps");
  Collected c;
  util::reset_peak_memory(device);
  for (std::size_t s = 0; s < in.slides.size(); ++s) {
    r.resumed += predict_slide(job, in, s, predictor, journal, h, labels, run.task(), c, r);
    r.tiles += static_cast<std::int64_t>(in.rows[s].size());
    if (s + 1 < in.slides.size())  // SIGTERM: the slides done are journaled
      util::stop_if_requested(std::to_string(s + 1) + " of " + std::to_string(in.slides.size()) +
                              " slides, journaled in " + job.output);
  }
  predictor.finish_profile();
  r.device_peak_bytes = util::peak_memory(device);
  r.device = device.str();
  r.slides = static_cast<std::int64_t>(in.grouped ? in.grouped_slides : in.slides.size());
  r.groups = in.grouped ? static_cast<std::int64_t>(in.slides.size()) : 0;
  return c;
}

// attention.csv, predictions.csv, --view's site, then report.html (drawn from them).
void publish(const PredictJob& job, const TrainedRun& run, const Collected& c) {
  if (!c.attention.empty())
    write_attention(util::join_path(job.output, "attention.csv"), c.keys, c.attention);
  const Task& task = run.task();
  const auto outputs = c.logits.empty() ? torch::zeros({0, task.outputs()}) : torch::cat(c.logits);
  write_predictions(util::join_path(job.output, "predictions.csv"), c.samples, c.slides, outputs,
                    task);
  const io::Table table = io::read_table(util::join_path(job.output, "predictions.csv"));
  report::write_predict_report(job.output, job.run, run.manifest(), table,
                               run.known_label_metrics(table), viewer_pages(job, table));
}

}  // namespace

PredictReport predict(const PredictJob& job) {
  const auto start = Clock::now();
  util::count_cpu_memory();
  const TrainedRun run = TrainedRun::open(job.run);
  const auto labels = run.labels();
  if (!labels.empty()) label_index(job, labels);  // a bad --label stops before anything is written
  PredictReport r;
  std::unique_ptr<util::OutputLock> lock;
  const Collected c = predict_slides(job, run, lock, r);
  publish(job, run, c);
  r.output = job.output;
  r.unit = records::to_string(run.unit());
  r.weights = util::name_of(kWeights, job.weights);
  r.samples = static_cast<std::int64_t>(c.samples.size());
  if (job.view) r.view = util::join_path(view_site(job), "index.html");
  r.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return r;
}

}  // namespace mltool::predict
