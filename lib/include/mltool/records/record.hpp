// The record layout of mltool datasets, one home for all three of its users: `mltool pack`
// writes records with encode(), training reads them with decode(), and `mltool inspect --deep`
// checks them against dataset.json's record_features as parse_record_features() reads them.
// The unit's feature names ("slide", "index", ...) and their kinds appear only in
// lib/records/record.cpp, the outcome's ("label", "target", ...) only in its task's file of
// lib/records/tasks/ (its codec); docs/formats.md#dataset specifies them.
//
// Adding a unit, as far as records go: its enumerator in PackUnit and name in kPackUnits
// (pack.hpp, pack_options.cpp), its row of the unit table in record.cpp (rows as one "index" or
// an "indices" list, a tile key, x and y), its name in schemas/dataset.schema.json's "unit",
// and its row in docs/formats.md#dataset. Pack, train and inspect name no feature. (Which
// labels reach which rows is pack_plan.cpp's; what a model trains on, lib/train's.)
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "mltool/io/example.hpp"
#include "mltool/records/pack.hpp"

namespace mltool::records {

/// The feature holding a record's label id; also the default label feature of inspect.
inline constexpr const char* kLabelFeature = "label";

/// One record, whatever its unit and task.
struct Record {
  std::int64_t label = 0;          ///< classification: id in the label map
  float target = 0;                ///< regression: the target
  float time = 0;                  ///< survival: time to the event or to censoring (> 0)
  float event = 0;                 ///< survival: 1 the event was observed, 0 censored
  std::vector<float> values;       ///< multilabel: per label 1 or 0, NaN where masked
  std::string slide;               ///< the slide of the rows
  std::vector<std::int64_t> rows;  ///< rows of features.npy: tile, image one; bag the bag's
  std::string key;                 ///< image: the tile key of the row
  /// Tile, image: the tile's level-0 corner (x, y), when the dataset has a tile store.
  std::optional<std::pair<std::int64_t, std::int64_t>> xy;
};

/// What a reader of a dataset accepts: label ids below `labels` (classification; multilabel:
/// exactly `labels` outcomes), rows below `rows`, finite targets, times > 0 and events 0 or 1;
/// `manifest` (dataset.json) is named in messages.
struct RecordLimits {
  std::int64_t labels = 0;
  std::int64_t rows = 0;
  std::string manifest;
};

/// The records of one unit and task, with or without coordinates (x, y: never in bags). The
/// outcome is `label` (int64, classification), `target` (float, regression), `time` and
/// `event` (floats, survival), or `labels` (float list, 1 or 0 per label) and `label_mask`
/// (int64 list, 1 observed, 0 missing: the label's value is 0 and means nothing) (multilabel).
class RecordCodec {
 public:
  explicit RecordCodec(PackUnit unit, bool coordinates = false,
                       PackTask task = PackTask::classification);

  PackUnit unit() const { return unit_; }
  PackTask task() const { return task_; }
  /// Whether records carry the tile key of their row (Record::key), which writers look up.
  bool keyed() const;

  /// dataset.json's record_features: feature name → "int64", "int64_list", "float" or "bytes".
  nlohmann::json features() const;

  /// Adds the record's features to `example` (the outcome — label; target; time, event —
  /// then slide, rows, key, x, y: their order in the serialized bytes). With coordinates,
  /// `record.xy` must be set.
  void encode(const Record& record, io::ExampleBuilder& example) const;

  /// Reads what training uses into `out`: the outcome, the rows, and the sample's id (bag: the
  /// slide, image: the tile key); a tile's or image's slide and x, y are not read (left
  /// empty). FormatError naming `example.where()` for a missing or ill-typed feature, a
  /// label or row outside `limits`, a target that is not finite, a time that is not > 0 and
  /// finite, an event other than 0 or 1, an empty bag, or an image record without one key.
  void decode(const io::Example& example, const RecordLimits& limits, Record& out) const;

  /// Appends the float outcome of a decoded record, as training serves it: the target
  /// (regression), the time and the event (survival), one value per label with NaN where
  /// masked (multilabel); nothing for classification (its outcome is `label`).
  void append_targets(const Record& record, std::vector<float>& out) const;

 private:
  PackUnit unit_;
  bool coordinates_;
  PackTask task_;
};

/// The features holding a task's outcome, in record order: {"label"} (classification),
/// {"target"} (regression), {"time", "event"} (survival), {"labels", "label_mask"}
/// (multilabel). inspect reads them by these names.
std::vector<std::string> outcome_features(PackTask task);

/// A feature of dataset.json's record_features, as `inspect --deep` checks every record.
struct RecordFeature {
  std::string name;
  io::FeatureKind kind;  ///< int64_list, float_list or bytes_list
  bool list;             ///< any number of values ("int64_list"); else exactly one
  bool rows;             ///< its values are rows of the feature store
};

/// dataset.json's record_features (as the schema allows them), in its order.
std::vector<RecordFeature> parse_record_features(const nlohmann::json& record_features);

}  // namespace mltool::records
