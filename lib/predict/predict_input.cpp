// predict's input: a feature store for tile and bag models, a tile store for image models,
// each checked against what the run was trained on (see predict_parts.hpp).
#include <torch/types.h>

#include <map>

#include "mltool/features/encoder_card.hpp"
#include "mltool/io/feature_store.hpp"
#include "mltool/io/sha256.hpp"
#include "mltool/io/slide_id.hpp"
#include "mltool/io/table.hpp"
#include "mltool/io/tile_store.hpp"
#include "mltool/slide/tile_pixels.hpp"
#include "mltool/util/error.hpp"
#include "mltool/util/file.hpp"
#include "mltool/util/log.hpp"
#include "predict_parts.hpp"

namespace mltool::predict {

using train::feature_source;
using train::tile_source;

namespace {

using json = nlohmann::json;

bool is_feature_store(const std::string& path) { return util::exists(path + "/features.json"); }

void check_features(const TrainedRun& run, const io::FeatureStore& store,
                    const std::string& where) {
  const auto dims = run.input_dims();
  if (static_cast<std::int64_t>(store.dims()) != dims)
    throw InputError(at_file(where, "features of " + std::to_string(store.dims()) +
                                        " dims, but the run was trained on " +
                                        std::to_string(dims) + "-dim features"));
  const json want = run.extractor();
  const json got = store.manifest().value("model", json());
  const std::string want_encoder = features::encoder_name_of(want),
                    got_encoder = features::encoder_name_of(got);
  if (!want.is_null() && want_encoder != got_encoder)
    throw InputError(
        at_file(where, "features of encoder '" + (got_encoder.empty() ? "(none)" : got_encoder) +
                           "', but the run was trained on features of encoder '" +
                           (want_encoder.empty() ? "(none)" : want_encoder) +
                           "': extract them with the run's encoder (mltool extract --model)"));
  if (!want.is_null() && want != got)
    throw InputError(at_file(where, extractor_difference(got, want)));
}

// The tile store for heatmaps: --tiles, else the features' own if it is still there, else
// none ("").
std::string heatmap_store(const PredictJob& job, const io::FeatureStore& store) {
  if (!job.tiles.empty()) {
    if (!util::exists(job.tiles)) throw InputError(at_file(job.tiles, "no such tile store"));
    return job.tiles;
  }
  const std::string path = store.tile_store();
  if (path.empty() || util::exists(path)) return path;
  log::warn(at_file(store.dir(),
                    "its tile store " + path + " is not there: no heatmaps (pass --tiles STORE)"));
  return "";
}

// Groups `in.keys` (of the store `input`) by slide: slides in the order of their first row.
// Each slide id is checked, as it names the slide's heatmap files.
void group_by_slide(PredictInput& in, const std::string& input) {
  std::map<std::string, std::size_t, std::less<>> index;
  for (std::size_t i = 0; i < in.keys.size(); ++i) {
    const std::string slide(io::slide_of_key(in.keys[i]));
    auto [it, added] = index.emplace(slide, in.slides.size());
    if (added) {
      io::check_slide_id(slide, input, in.keys[i]);
      in.slides.push_back(slide);
      in.rows.emplace_back();
    }
    in.rows[it->second].push_back(static_cast<std::int64_t>(i));
  }
}

// Keeps the slides --slide names, in the input's order; InputError for one it does not have.
void keep_slides(PredictInput& in, const PredictJob& job) {
  std::map<std::string, std::size_t> index;
  for (std::size_t s = 0; s < in.slides.size(); ++s) index.emplace(in.slides[s], s);
  std::vector<bool> keep(in.slides.size(), false);
  for (const auto& id : job.slides) {
    const auto it = index.find(id);
    if (it == index.end())
      throw InputError(at_file(
          job.input, "--slide " + id + ": no tiles of this slide" +
                         (in.source->dtype() == torch::kUInt8 ? " (complete) in the tile store"
                                                              : " in the feature store")));
    keep[it->second] = true;
  }
  std::size_t kept = 0;
  for (std::size_t s = 0; s < in.slides.size(); ++s) {
    if (!keep[s]) continue;
    if (kept != s) {  // a self-move would empty them: the first slide kept is often in place
      in.slides[kept] = std::move(in.slides[s]);
      in.rows[kept] = std::move(in.rows[s]);
    }
    ++kept;
  }
  in.slides.resize(kept);
  in.rows.resize(kept);
}

// --group-table: the slides merged into their groups' bags (groups in the order of their first
// slide; a bag's rows slide by slide). UsageError for a slide the table does not list.
void group_slides(PredictInput& in, const PredictJob& job) {
  const auto group_of = io::read_slide_groups(job.group_table, job.group_column);
  std::map<std::string, std::size_t> index;
  std::vector<std::string> groups;
  std::vector<std::vector<std::int64_t>> rows;
  for (std::size_t s = 0; s < in.slides.size(); ++s) {
    const auto it = group_of.find(in.slides[s]);
    if (it == group_of.end())
      throw UsageError(at_file(job.group_table, "does not list slide '" + in.slides[s] + "' of " +
                                                    job.input +
                                                    " (predict only the listed ones with "
                                                    "--slide)"));
    auto [at, added] = index.emplace(it->second, groups.size());
    if (added) {
      groups.push_back(it->second);
      rows.emplace_back();
    }
    rows[at->second].insert(rows[at->second].end(), in.rows[s].begin(), in.rows[s].end());
  }
  in.grouped_slides = in.slides.size();
  in.slides = std::move(groups);
  in.rows = std::move(rows);
  in.grouped = true;
}

PredictInput feature_input(const TrainedRun& run, const PredictJob& job) {
  const records::PackUnit unit = run.unit();
  if (io::TileStore::is_store(job.input))
    throw InputError(at_file(job.input, "a tile store, but a " +
                                            std::string(records::to_string(unit)) +
                                            " model predicts on features: extract them with the "
                                            "extractor the run was trained on (mltool extract), "
                                            "then predict on the feature store"));
  auto store = std::make_shared<io::FeatureStore>(io::FeatureStore::open(job.input));
  check_features(run, *store, job.input);
  PredictInput in;
  in.keys.reserve(store->rows());
  for (std::size_t i = 0; i < store->rows(); ++i) in.keys.emplace_back(store->key(i));
  in.tile_store = heatmap_store(job, *store);
  if (!in.tile_store.empty())
    in.tiles = std::make_shared<const io::TileStore>(io::TileStore::open(in.tile_store, false));
  in.identity = {
      {"features", util::absolute_path(job.input)},
      {"manifest_sha256", io::sha256_hex(util::read_file(job.input + "/features.json"))}};
  in.source = feature_source(std::move(store));
  return in;
}

// The settings of the tile store the run's images came from, or nothing if it is gone.
std::optional<io::TileSettings> trained_tile_settings(const TrainedRun& run) {
  const std::string path = run.tile_store();
  try {
    if (!path.empty()) return io::TileStore::open(path, false).settings();
  } catch (const Error& e) {
    log::warn(std::string(e.what()));
  }
  log::warn("the tile store the run was trained on (" + (path.empty() ? "none named" : path) +
            ") cannot be read: the input's tile size and resolution are not checked");
  return std::nullopt;
}

std::string describe(const io::TileSettings& s) {
  return std::to_string(s.tile_size) + " px tiles at " +
         (s.mpp ? std::to_string(*s.mpp) + " µm/px"
                : "pyramid level " + std::to_string(s.level.value_or(0)));
}

PredictInput image_input(const TrainedRun& run, const PredictJob& job) {
  if (!io::TileStore::is_store(job.input))
    throw InputError(
        at_file(job.input,
                std::string(is_feature_store(job.input) ? "a feature store" : "not a tile store") +
                    ", but an image model (rescnn, or a TorchScript module trained on an image "
                    "dataset) predicts on a tile store's pixels: give "
                    "the tile store (mltool tile)"));
  if (!job.tiles.empty() && util::absolute_path(job.tiles) != util::absolute_path(job.input))
    throw UsageError("--tiles " + job.tiles +
                     ": an image model's heatmaps are drawn from the "
                     "tile store it predicts on, " +
                     job.input);
  const auto trained = trained_tile_settings(run);  // opened and closed before the input
  auto store = std::make_shared<const io::TileStore>(io::TileStore::open(job.input, false));
  const auto settings = store->settings();
  if (!settings) throw InputError(at_file(job.input, "not a tile store (no meta 'store' record)"));
  if (trained) {
    const bool same = trained->tile_size == settings->tile_size && trained->mpp == settings->mpp &&
                      trained->level == settings->level;
    if (!same)
      throw InputError(at_file(job.input, "holds " + describe(*settings) +
                                              ", but the run was trained on " + describe(*trained) +
                                              ": tile the slides alike"));
  }
  PredictInput in;
  in.keys = store->complete_tile_keys();
  in.tile_store = job.input;
  in.identity = {{"tiles", util::absolute_path(job.input)}, {"settings", settings->to_json()}};
  in.tiles = store;
  in.source = tile_source(std::move(store), in.keys, slide::open_tile_pixels(job.dicomweb));
  return in;
}

}  // namespace

PredictInput open_predict_input(const TrainedRun& run, const PredictJob& job) {
  if (!util::exists(job.input)) throw InputError(at_file(job.input, "no such file or directory"));
  const records::PackUnit unit = run.unit();
  PredictInput in =
      unit == records::PackUnit::image ? image_input(run, job) : feature_input(run, job);
  group_by_slide(in, job.input);
  if (!job.slides.empty()) keep_slides(in, job);
  if (job.group_table.empty() != job.group_column.empty())
    throw UsageError("--group-table and --group-column go together");
  const std::string bag_column = run.bag_column();
  if (!job.group_table.empty()) {
    if (unit != records::PackUnit::bag)
      throw UsageError("--group-table: " + job.run + " is a " + records::to_string(unit) +
                       " model; groups are bags of bag models");
    group_slides(in, job);
  } else if (!bag_column.empty()) {
    log::warn(job.run + " was trained on bags of '" + bag_column +
              "' (pack --bag-by); each slide is predicted as its own bag: pass --group-table "
              "CSV --group-column " +
              bag_column + " to predict one bag per " + bag_column);
  }
  return in;
}

}  // namespace mltool::predict
