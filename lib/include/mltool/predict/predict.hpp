// `mltool predict` as a library call: a finished run (mltool train) applied to a feature
// store (tile and bag models) or a tile store (image models), slide by slide. No LibTorch in
// this header, so the command line compiles without it.
//
//   pred/
//     .predict/         job.json (the settings a resume must repeat) and SLIDE.safetensors,
//                       each finished slide's scores: a stopped prediction resumes
//     predictions.csv   one row per sample in store order: sample (tile key, or slide for
//                       bags), slide, prediction, logit_LABEL..., prob_LABEL... (float32,
//                       %.9g: the exact float)
//     attention.csv     bag models: key, slide, attention (each tile's softmax weight in its
//                       slide's bag), in store order
//     heatmaps/SLIDE.geojson  with a tile store (--tiles, or the one features.json names):
//                       the slide as `export geojson` writes it, each tile of the features
//                       with prob_LABEL... (tile models) or attention (bag models) among its
//                       QuPath measurements
//     report.html       the page of the prediction: per slide its call and heatmap thumbnail
//                       (after predictions.csv; mltool/report/pages.hpp)
//     heatmaps/SLIDE.png  the same scores (--label's probability, or attention / the slide's
//                       largest) on the slide's thumbnail, with a colour bar and a caption
//     view/             --view: the predicted slides' offline viewer (mltool view), which
//                       report.html links each slide to
//
// Every file is written aside and renamed into place; predictions.csv last but for
// report.html, which is drawn from it, so its presence means the prediction is complete.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "mltool/features/stain_norm.hpp"
#include "mltool/io/dicomweb.hpp"
#include "mltool/util/options.hpp"
#include "mltool/util/profile.hpp"

namespace mltool::predict {

/// Which weights of a run: best.safetensors (the monitored best epoch) or model.safetensors.
enum class Weights { best, final_weights };
extern const util::EnumNames<Weights> kWeights;

struct PredictJob {
  std::string run;     ///< the run directory (mltool train), finished
  std::string input;   ///< a feature store (tile, bag models) or a tile store (image models)
  std::string output;  ///< the prediction directory (created)
  Weights weights = Weights::best;
  std::string device = "auto";      ///< auto (the first GPU, else CPU), cpu, cuda or cuda:N
  int math_threads = 0;             ///< LibTorch's math threads on the CPU; 0: a resumed run's
  util::ProfileRequest profile;     ///< --profile: a trace of a window of batches
  int threads = 0;                  ///< tile decoding threads (image models); 0: one per core
  int batch = 4096;                 ///< tiles per forward pass (tile and image models)
  std::vector<std::string> slides;  ///< the slides to predict; empty: every slide of the input
  std::string tiles;        ///< the tile store for heatmaps; empty: the one features.json names
  std::string label;        ///< the class whose probability the PNG heatmaps show; empty: the last
  int heatmap_size = 1024;  ///< the PNG heatmaps' long side, pixels
  /// Bag models: a table (columns `slide` and `group_column`) whose groups (patients) are the
  /// bags, all their slides' tiles in one; empty: each slide is a bag.
  std::string group_table;
  std::string group_column;
  bool overwrite = false;  ///< replace a prediction with other settings in `output`
  /// Also write the predicted slides' viewer (slide/view.hpp) into `output`/view/, before
  /// report.html, which links each slide to its page there.
  bool view = false;
  /// An out-of-memory error ends the run instead of splitting the batch (docs/memory-modes.md).
  bool no_oom_retry = false;
  /// Pixel models: none (the run's own normalisation, if it was trained with one), or a method
  /// to normalise to `stain_reference` on purpose (docs/predict.md#stain-normalisation).
  features::StainNorm stain_norm = features::StainNorm::none;
  std::string stain_reference;  ///< the reference image; empty: the run's recorded file
  /// How slides recorded as DICOMweb series URLs are fetched (--dicomweb-*): the heatmaps'
  /// pictures, and an image model's tiles in a coordinates store.
  io::DicomwebOptions dicomweb;
};

/// The table of PredictJob's options (docs/predict.md's synopsis is checked against it).
const util::Options<PredictJob>& predict_options();

struct PredictReport {
  std::string output;
  std::string unit;    ///< tile, bag or image
  std::string device;  ///< e.g. "cpu", "cuda:0"
  std::string weights;
  std::int64_t samples = 0;        ///< rows of predictions.csv
  std::int64_t tiles = 0;          ///< feature rows read
  std::int64_t slides = 0;         ///< slides read (with --group-table: merged into the groups)
  std::int64_t groups = 0;         ///< --group-table: the groups (bags) predicted; 0 without
  std::int64_t resumed = 0;        ///< slides whose scores a stopped prediction had journaled
  std::int64_t heatmaps = 0;       ///< slides with a heatmap
  std::string view;                ///< --view: the site's index.html; "" without
  std::int64_t split_batches = 0;  ///< batches this run computed in pieces (out of memory)
  /// The peak of the device's allocated bytes over the slides (util::peak_memory).
  std::int64_t device_peak_bytes = 0;
  double seconds = 0;
};

nlohmann::json to_json(const PredictReport& report);

/// Predicts (see the layout above), holding the output's lock. InputError for a run that is not
/// finished (still running, stopped or failed), an input of the wrong kind, a feature store
/// whose dims or extractor differ from those the run was trained on (run.json and the features
/// its dataset names), a tile store tiled otherwise than the run's, or a missing file;
/// FormatError for weights that do not match the run's model; UsageError for an output that
/// holds a prediction with other settings (without `overwrite`).
PredictReport predict(const PredictJob& job);

/// train --view, once a run has finished (docs/train.md#the-validation-slides-in-the-viewer):
/// the run's validation slides (its dataset's validation groups: slides, or the slides of
/// patients by the labels table) that its input holds, predicted with its final weights into
/// RUN/validation/ with --view's site (replacing an earlier one), then RUN/report.html drawn
/// again with a table of them, each id linking to its page. `like` gives the device, threads
/// and DICOMweb options. InputError naming the dataset where none of its validation slides is
/// in the input.
PredictReport predict_validation(const std::string& run_dir, const PredictJob& like);

/// What train --view needs, checked before the run trains on `dataset_dir`: Leaflet
/// (ResourceError naming --leaflet), a build with slides, and the tile store the pages are
/// drawn from (`tiles`, an image dataset's --tiles, else the dataset's, or its features'):
/// UsageError naming it where it is not there.
void check_predict_validation(const std::string& dataset_dir, const std::string& tiles);

}  // namespace mltool::predict
