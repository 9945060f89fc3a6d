// The record layout of each unit (see record.hpp): the only place that names record features.
#include "mltool/records/record.hpp"

#include <cmath>

#include "mltool/util/error.hpp"

namespace mltool::records {
namespace {

constexpr const char* kSlide = "slide";
constexpr const char* kKey = "key";
constexpr const char* kX = "x";
constexpr const char* kY = "y";
constexpr const char* kTarget = "target";
constexpr const char* kTime = "time";
constexpr const char* kEvent = "event";
constexpr const char* kLabels = "labels";
constexpr const char* kLabelMask = "label_mask";

/// What sets one unit's records apart.
struct UnitLayout {
  PackUnit unit;
  const char* rows;  ///< the feature of the rows
  bool row_list;     ///< rows as an int64 list (any number), else one int64
  bool key;          ///< the tile key of the row
  bool xy;           ///< x, y when the dataset has a tile store
};

constexpr UnitLayout kUnitLayouts[] = {
    {PackUnit::tile, "index", false, false, true},
    {PackUnit::bag, "indices", true, false, false},
    {PackUnit::image, "index", false, true, true},
};

const UnitLayout& layout_of(PackUnit unit) {
  for (const auto& l : kUnitLayouts)
    if (l.unit == unit) return l;
  throw UsageError("no record layout for unit " + std::string(to_string(unit)));
}

// The single value of float feature `name`; FormatError naming the record otherwise.
float one_float(const io::Example& example, const char* name) {
  if (example.kind(name) != io::FeatureKind::float_list || example.floats(name).size() != 1)
    throw FormatError(example.where() + ": feature '" + name + "' must hold one float (" +
                      io::to_string(example.kind(name)) + " found)");
  return example.floats(name)[0];
}

// A multilabel record's values into `out`: one per label, NaN where the mask says missing.
void decode_labels(const io::Example& example, const RecordLimits& limits, Record& out) {
  const std::string& where = example.where();
  if (example.kind(kLabels) != io::FeatureKind::float_list ||
      example.kind(kLabelMask) != io::FeatureKind::int64_list)
    throw FormatError(where + ": features '" + kLabels + "' (floats) and '" + kLabelMask +
                      "' (int64s) are a multilabel record's outcome");
  const auto& values = example.floats(kLabels);
  const auto& mask = example.int64s(kLabelMask);
  if (static_cast<std::int64_t>(values.size()) != limits.labels || mask.size() != values.size())
    throw FormatError(where + ": " + std::to_string(values.size()) + " labels and " +
                      std::to_string(mask.size()) + " mask values, but " + limits.manifest +
                      " names " + std::to_string(limits.labels) + " label columns");
  out.values.clear();
  for (std::size_t i = 0; i < values.size(); ++i) {
    if ((mask[i] != 0 && mask[i] != 1) || (mask[i] == 1 && values[i] != 0 && values[i] != 1))
      throw FormatError(where + ": label " + std::to_string(i) + " is " +
                        std::to_string(values[i]) + " with mask " + std::to_string(mask[i]) +
                        " (a label is 0 or 1, a mask 0 or 1)");
    out.values.push_back(mask[i] == 1 ? values[i] : NAN);
  }
}

// The outcome of `example` into `out`, checked as RecordCodec::decode documents.
void decode_outcome(PackTask task, const io::Example& example, const RecordLimits& limits,
                    Record& out) {
  const std::string& where = example.where();
  switch (task) {
    case PackTask::classification:
      out.label = example.int64(kLabelFeature);
      if (out.label < 0 || out.label >= limits.labels)
        throw FormatError(where + ": label " + std::to_string(out.label) +
                          " is not in the label map of " + limits.manifest + " (" +
                          std::to_string(limits.labels) + " labels)");
      return;
    case PackTask::regression:
      out.target = one_float(example, kTarget);
      if (!std::isfinite(out.target))
        throw FormatError(where + ": target " + std::to_string(out.target) + " is not finite");
      return;
    case PackTask::survival:
      out.time = one_float(example, kTime);
      out.event = one_float(example, kEvent);
      if (!(std::isfinite(out.time) && out.time > 0))
        throw FormatError(where + ": time " + std::to_string(out.time) +
                          " is not a finite number > 0");
      if (out.event != 0 && out.event != 1)
        throw FormatError(where + ": event " + std::to_string(out.event) + " is neither 0 nor 1");
      return;
    case PackTask::multilabel: decode_labels(example, limits, out); return;
  }
}

}  // namespace

RecordCodec::RecordCodec(PackUnit unit, bool coordinates, PackTask task)
    : unit_(unit), coordinates_(coordinates && layout_of(unit).xy), task_(task) {}

bool RecordCodec::keyed() const { return layout_of(unit_).key; }

nlohmann::json RecordCodec::features() const {
  const UnitLayout& l = layout_of(unit_);
  nlohmann::json f = {{kSlide, "bytes"}};
  if (task_ == PackTask::classification) f[kLabelFeature] = "int64";
  if (task_ == PackTask::regression) f[kTarget] = "float";
  if (task_ == PackTask::survival) {
    f[kTime] = "float";
    f[kEvent] = "float";
  }
  if (task_ == PackTask::multilabel) {
    f[kLabels] = "float_list";
    f[kLabelMask] = "int64_list";
  }
  f[l.rows] = l.row_list ? "int64_list" : "int64";
  if (l.key) f[kKey] = "bytes";
  if (coordinates_) {
    f[kX] = "int64";
    f[kY] = "int64";
  }
  return f;
}

void RecordCodec::encode(const Record& record, io::ExampleBuilder& example) const {
  const UnitLayout& l = layout_of(unit_);
  if (task_ == PackTask::classification) example.add_int64(kLabelFeature, record.label);
  if (task_ == PackTask::regression) example.add_float(kTarget, record.target);
  if (task_ == PackTask::survival)
    example.add_float(kTime, record.time).add_float(kEvent, record.event);
  if (task_ == PackTask::multilabel) {
    std::vector<float> values;
    std::vector<std::int64_t> mask;
    for (const float v : record.values) {
      values.push_back(std::isnan(v) ? 0.0f : v);
      mask.push_back(std::isnan(v) ? 0 : 1);
    }
    example.add_floats(kLabels, values).add_int64s(kLabelMask, mask);
  }
  example.add_bytes(kSlide, record.slide);
  if (l.row_list) {
    example.add_int64s(l.rows, record.rows);
  } else {
    example.add_int64(l.rows, record.rows.at(0));
  }
  if (l.key) example.add_bytes(kKey, record.key);
  if (coordinates_) {
    example.add_int64(kX, record.xy.value().first);
    example.add_int64(kY, record.xy->second);
  }
}

void RecordCodec::decode(const io::Example& example, const RecordLimits& limits,
                         Record& out) const {
  const UnitLayout& l = layout_of(unit_);
  const std::string& where = example.where();
  decode_outcome(task_, example, limits, out);
  const auto check_row = [&](std::int64_t row) {
    if (row < 0 || row >= limits.rows)
      throw FormatError(where + ": row " + std::to_string(row) +
                        " is outside the feature matrix (" + std::to_string(limits.rows) +
                        " rows)");
  };
  out.slide.clear();
  out.key.clear();
  out.xy.reset();
  if (l.row_list) {
    const auto& rows = example.int64s(l.rows);
    if (rows.empty()) throw FormatError(where + ": an empty bag (no " + l.rows + ")");
    for (const auto r : rows) check_row(r);
    out.rows.assign(rows.begin(), rows.end());
    out.slide = example.bytes(kSlide).at(0);  // a bag's id: the slide of its rows
  } else {
    const auto row = example.int64(l.rows);
    check_row(row);
    out.rows.assign(1, row);
    if (l.key) {
      const auto& key = example.bytes(kKey);
      if (key.size() != 1)
        throw FormatError(where + ": feature '" + kKey + "' must hold one tile key");
      out.key = key[0];
    }
  }
}

void RecordCodec::append_targets(const Record& record, std::vector<float>& out) const {
  switch (task_) {
    case PackTask::classification: return;
    case PackTask::regression: out.push_back(record.target); return;
    case PackTask::survival: out.insert(out.end(), {record.time, record.event}); return;
    case PackTask::multilabel: out.insert(out.end(), record.values.begin(), record.values.end());
  }
}

std::vector<std::string> outcome_features(PackTask task) {
  switch (task) {
    case PackTask::regression: return {kTarget};
    case PackTask::survival: return {kTime, kEvent};
    case PackTask::multilabel: return {kLabels, kLabelMask};
    case PackTask::classification: break;
  }
  return {kLabelFeature};
}

std::vector<RecordFeature> parse_record_features(const nlohmann::json& record_features) {
  std::vector<RecordFeature> out;
  for (const auto& [name, value] : record_features.items()) {
    const std::string kind = value.get<std::string>();
    bool rows = false;
    for (const auto& l : kUnitLayouts) rows = rows || name == l.rows;
    const io::FeatureKind k = kind == "bytes" ? io::FeatureKind::bytes_list
                              : kind == "float" || kind == "float_list"
                                  ? io::FeatureKind::float_list
                                  : io::FeatureKind::int64_list;
    out.push_back({name, k, kind == "int64_list" || kind == "float_list", rows});
  }
  return out;
}

}  // namespace mltool::records
