// The record layout of each unit (see record.hpp); the outcome's features are each task's
// (its codec, lib/records/tasks/).
#include "mltool/records/record.hpp"

#include <cmath>

#include "mltool/util/error.hpp"
#include "task_spec.hpp"

namespace mltool::records {
namespace {

constexpr const char* kSlide = "slide";
constexpr const char* kKey = "key";
constexpr const char* kX = "x";
constexpr const char* kY = "y";

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

}  // namespace

RecordCodec::RecordCodec(PackUnit unit, bool coordinates, PackTask task)
    : unit_(unit), coordinates_(coordinates && layout_of(unit).xy), task_(task) {}

bool RecordCodec::keyed() const { return layout_of(unit_).key; }

nlohmann::json RecordCodec::features() const {
  const UnitLayout& l = layout_of(unit_);
  nlohmann::json f = {{kSlide, "bytes"}};
  for (const auto& [name, kind] : detail::spec_of(task_).codec.features) f[name] = kind;
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
  detail::spec_of(task_).codec.encode(record, example);
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
  detail::spec_of(task_).codec.decode(example, limits, out);
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
  detail::spec_of(task_).codec.append_targets(record, out);
}

std::vector<std::string> outcome_features(PackTask task) {
  std::vector<std::string> out;
  for (const auto& [name, kind] : detail::spec_of(task).codec.features) out.emplace_back(name);
  return out;
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
