// train --view (predict.hpp): a finished run's validation slides predicted inside the run with
// their viewer, and the run's report.html drawn again to link them. Which slides: the dataset's
// validation groups (dataset.json's group_split) — slides, or patients whose slides the labels
// table names — that the run's input (its features, or its image dataset's tile store) holds.
#include <set>

#include "mltool/io/feature_store.hpp"
#include "mltool/io/table.hpp"
#include "mltool/io/tile_store.hpp"
#include "mltool/predict/predict.hpp"
#include "mltool/report/pages.hpp"
#include "mltool/train/trained_run.hpp"
#include "mltool/util/error.hpp"
#include "mltool/util/file.hpp"
#include "mltool/util/log.hpp"
#include "predict_parts.hpp"
#ifdef MLTOOL_HAVE_SLIDE
#include "mltool/slide/view.hpp"
#endif

namespace mltool::predict {
namespace {

using json = nlohmann::json;

json read_json(const std::string& path) {
  try {
    return json::parse(util::read_file(path));
  } catch (const json::exception& e) {
    throw FormatError(path + ": not JSON: " + e.what());
  }
}

// The column that groups slides into the split's groups (patients), or "" when the groups
// are the slides themselves.
std::string group_column(const json& dataset) {
  const json labels = dataset.value("labels", json::object());
  for (const char* key : {"group_column", "bag_column"})
    if (labels.value(key, json()).is_string()) return labels[key].get<std::string>();
  const json folds = dataset.value("folds", json());
  if (folds.is_object() && folds.value("group_column", json()).is_string())
    return folds["group_column"].get<std::string>();
  return "";
}

// The slides of the validation split `val_split` (one split: only the training side joins
// several).
std::set<std::string> validation_slides(const json& dataset, const std::string& where,
                                        const std::string& val_split) {
  std::set<std::string> groups;
  try {
    for (const auto& [group, split] : dataset.at("group_split").items())
      if (split == val_split) groups.insert(group);
  } catch (const json::exception& e) {
    throw FormatError(where + ": group_split: " + e.what());
  }
  const std::string column = group_column(dataset);
  if (column.empty()) return groups;
  const json labels = dataset.value("labels", json::object());
  const io::Table table = io::read_table(labels.value("path", ""));
  const auto key = table.column(labels.value("key_column", "key"));
  const auto group = table.column(column);
  std::set<std::string> slides;
  for (const auto& row : table.rows)  // a key is a slide id, or a tile key
    if (groups.count(row[group])) slides.emplace(io::slide_of_key(row[key]));
  return slides;
}

// The slides the run's input holds: its features' keys, or its tile store's complete slides.
std::set<std::string> input_slides(const std::string& input, bool image) {
  std::set<std::string> slides;
  if (image) {
    const auto store = io::TileStore::open(input, false);  // closed before predict opens it
    for (const auto& id : store.completed_slides()) slides.insert(id);
    return slides;
  }
  const auto features = io::FeatureStore::open(input);
  for (std::uint64_t row = 0; row < features.rows(); ++row)
    slides.emplace(io::slide_of_key(features.key(row)));
  return slides;
}

// The job that predicts the run's validation slides: `like`'s device, threads and DICOMweb.
PredictJob validation_job(const train::TrainedRun& run, const std::string& run_dir,
                          const PredictJob& like) {
  const json& manifest = run.manifest().at("dataset");
  const std::string dataset_dir = manifest.value("path", "");
  const std::string where = util::join_path(dataset_dir, "dataset.json");
  const json dataset = read_json(where);
  const bool image = run.unit() == records::PackUnit::image;
  PredictJob job = like;
  job.run = run_dir;
  job.input = image ? (like.tiles.empty() ? run.tile_store() : like.tiles)
                    : dataset.value("features", json::object()).value("path", "");
  if (!image) job.tiles.clear();  // train's --tiles is an image dataset's
  job.output = util::join_path(run_dir, "validation");
  job.weights = Weights::final_weights;
  job.view = true;
  job.overwrite = true;  // derived from this run: a retrained run's replaces it
  const auto held = input_slides(job.input, image);
  for (const auto& slide : validation_slides(dataset, where, manifest.value("val_split", "")))
    if (held.count(slide)) job.slides.push_back(slide);
  if (job.slides.empty())
    throw InputError(where + ": none of the validation split's slides is in " + job.input +
                     ": nothing to view");
  return job;
}

}  // namespace

PredictReport predict_validation(const std::string& run_dir, const PredictJob& like) {
  const train::TrainedRun run = train::TrainedRun::open(run_dir);
  const PredictJob job = validation_job(run, run_dir, like);
  log::info(run_dir + ": predicting its " + std::to_string(job.slides.size()) +
            " validation slide" + (job.slides.size() == 1 ? "" : "s") + " into " + job.output +
            " (--view)");
  const PredictReport r = predict(job);
  const io::Table table = io::read_table(util::join_path(job.output, "predictions.csv"));
  report::PredictedSlides slides{"validation", &table, {}};
  for (const auto& [id, page] : site_pages(job.output, table))
    slides.viewer[id] = "validation/" + page;
  report::write_run_report(run_dir, run.manifest(), &slides);
  return r;
}

void check_predict_validation(const std::string& dataset_dir, const std::string& tiles) {
#ifdef MLTOOL_HAVE_SLIDE
  slide::check_leaflet(slide::ViewJob{});
#else
  throw UsageError("--view: this mltool was built without slides (MLTOOL_WITH_SLIDE)");
#endif
  const std::string where = util::join_path(dataset_dir, "dataset.json");
  const json dataset = read_json(where);
  std::string store = tiles.empty() ? dataset.value("tile_store", "") : tiles;
  if (dataset.value("unit", "") != "image") {
    const auto features = dataset.value("features", json::object()).value("path", "");
    store = io::FeatureStore::open(features).tile_store();
    if (store.empty() || !util::exists(store))
      throw UsageError("--view: the features " + features + " name no tile store that is " +
                       "still there (" + (store.empty() ? "none" : store) +
                       "): the validation slides' pages are drawn from it");
  }
  if (!io::TileStore::is_store(store))
    throw UsageError("--view: " + where + ": its tile store " + store + " is not there");
}

}  // namespace mltool::predict
