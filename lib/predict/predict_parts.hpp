// The parts of `mltool predict` that predict.cpp puts together: what is read (a feature
// store's rows or a tile store's pixels, grouped by slide), the run's model that scores one
// slide at a time, and a slide's heatmaps. Internal to lib/predict.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "mltool/predict/predict.hpp"
#include "mltool/records/pack.hpp"
#include "mltool/train/row_source.hpp"
#include "mltool/train/trained_run.hpp"

namespace mltool::io {
class TileStore;
struct Table;
}  // namespace mltool::io
namespace mltool::features {
class StainNormalizer;
}

namespace mltool::predict {

using train::RowSource;
using train::TrainedRun;

/// Each slide of `table` (predictions.csv) that OUTPUT/view/ has a page of: slide id → its page,
/// relative to `output` ("view/<page>"): what a report links.
std::map<std::string, std::string> site_pages(const std::string& output, const io::Table& table);

/// What predict reads: row i of `source` is tile `keys[i]`; feature rows (tile and bag
/// models) or decoded tiles (image models).
struct PredictInput {
  std::shared_ptr<const RowSource> source;
  std::vector<std::string> keys;    ///< store order
  std::vector<std::string> slides;  ///< in the order of their first row
  bool grouped = false;             ///< --group-table: `slides` are groups (patients), each one bag
  std::size_t grouped_slides = 0;   ///< --group-table: the slides merged into the groups
  std::vector<std::vector<std::int64_t>> rows;  ///< per slide: its rows, in store order
  std::string tile_store;                       ///< the heatmaps' tile store, or ""
  std::shared_ptr<const io::TileStore> tiles;   ///< it, open (one LMDB environment per process)
  nlohmann::json identity;                      ///< what the rows are (a resume checks it)
};

/// The input of a run of `unit` (tile, bag: a feature store; image: a tile store) checked
/// against what the run was trained on (InputError naming the file otherwise).
PredictInput open_predict_input(const TrainedRun& run, const PredictJob& job);

/// The run's weights `job.weights` names.
train::RunWeights run_weights(const PredictJob& job);

/// One slide's scores: its tiles' logits (tile and image models, rows × classes) or its
/// bag's (1 × classes), float32 on the CPU; and a bag model's attention per tile (empty when
/// the model has none).
struct SlideScores {
  torch::Tensor logits;
  std::vector<float> attention;
  /// The batches computed in pieces after an out-of-memory error (util::BatchSplit, with
  /// first_row and rows counted in the slide); journaled with the scores.
  nlohmann::json splits = nlohmann::json::array();
};

/// The stain normalisation of a pixel model's prediction (predict_stain.cpp): the run's own
/// (run.json's stain_norm) unless job.stain_norm names a method; null: none. `record` gets
/// what the journal fingerprints (method, sha256, target), or null. UsageError for the
/// options on a feature model, a reference other than the run's without --stain-norm, or
/// --stain-reference alone on a run trained without; InputError for a missing reference.
std::shared_ptr<const features::StainNormalizer> predict_stain(const TrainedRun& run,
                                                               const PredictJob& job,
                                                               nlohmann::json& record);

/// How a feature store's features were stain-normalised, from its features.json "model"
/// (predict_stain.cpp): "none", or e.g. "macenko with reference sha256 1a2b3c4d5e6f
/// (--stain-fit tile)".
std::string features_stain_text(const nlohmann::json& model);

/// Why features of extractor `got` (features.json's "model") are not the run's, `want`:
/// their stain normalisations ("features normalised with none, but the run was trained on
/// features normalised with macenko with reference sha256 …") or else the fields that differ,
/// each value shortened, with the extract options that make them again (predict_stain.cpp).
std::string extractor_difference(const nlohmann::json& got, const nlohmann::json& want);

/// A finished run's model with the chosen weights, in eval mode on its device.
class Predictor {
 public:
  Predictor(const TrainedRun& run, const PredictJob& job, const torch::Device& device);
  /// Scores the slide made of `rows` of `source`, `batch` rows per forward pass (tiles and
  /// images; a bag is one pass), decoding on `threads` threads. A batch that runs out of memory
  /// is split (util::BatchSplitter; each slide starts at --batch again); `first_batch` is the
  /// number of the slide's first batch in the run.
  SlideScores score(const RowSource& source, const std::vector<std::int64_t>& rows,
                    std::uint64_t first_batch) const;
  bool bag() const { return model_.is_bag(); }
  /// The stain normalisation applied (predict_stain's record), or null.
  const nlohmann::json& stain_record() const { return stain_record_; }
  /// Whether the model tells its attention per tile (built-in bag models, and TorchScript
  /// bag modules with an `attention(bag)` method).
  bool has_attention() const { return model_.has_attention(); }
  /// --profile: ends the recording, if it is on, and writes the trace.
  void finish_profile() const { profiler_->finish(); }

 private:
  SlideScores score_bag(const torch::Tensor& x) const;
  train::InferenceModel model_;
  torch::Device device_;
  std::int64_t batch_ = 1;
  bool retry_ = true;
  int threads_ = 1;
  std::unique_ptr<util::StepProfiler> profiler_;  ///< --profile: told as each batch begins
  std::shared_ptr<const features::StainNormalizer> stain_;  ///< pixel models; null: none
  nlohmann::json stain_record_;
};

/// What a slide's heatmaps show of its tile i (its position in the slide's keys): QuPath
/// measurements, and the PNG's value in [0, 1].
struct HeatmapScores {
  std::function<void(std::size_t, nlohmann::json&)> measure;
  std::function<float(std::size_t)> value;
  std::string what;         ///< the PNG caption's name of the value
  int size = 1024;          ///< the PNG's long side
  io::DicomwebOptions web;  ///< how the PNG's slide is fetched if it is a DICOMweb series URL
};

/// Whether DIR/SLIDE.geojson (and, where slides can be drawn, DIR/SLIDE.png) exist.
bool slide_heatmaps_exist(const std::string& dir, const std::string& slide);

/// DIR/SLIDE.geojson (and DIR/SLIDE.png where slides can be drawn) for the slide's tiles
/// `keys`. Returns the tiles drawn.
std::int64_t write_slide_heatmaps(const io::TileStore& tiles, const std::string& slide,
                                  const std::vector<std::string>& keys, const std::string& dir,
                                  const HeatmapScores& scores);

}  // namespace mltool::predict
