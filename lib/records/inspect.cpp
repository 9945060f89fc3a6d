// mltool inspect: inputs (a dataset directory or TFRecord files), the dataset.json
// cross-checks, and the per-group figures built from what inspect_scan.cpp read.
#include "mltool/records/inspect.hpp"

#include <algorithm>
#include <cmath>

#include "inspect_scan.hpp"
#include "mltool/io/example.hpp"
#include "mltool/io/feature_store.hpp"
#include "mltool/io/manifest.hpp"
#include "mltool/io/npy.hpp"
#include "mltool/io/tfrecord.hpp"
#include "mltool/records/pack.hpp"
#include "mltool/records/record.hpp"
#include "mltool/util/error.hpp"
#include "mltool/util/file.hpp"
#include "task_spec.hpp"

namespace mltool::records {
namespace {

using nlohmann::json;

// Deep: the feature store's matrix is the one dataset.json pins (shape, dtype, size; the
// SHA-256 is not recomputed) and its invalid rows, which no record may use.
void check_feature_store(const std::string& manifest_path, const json& features,
                         detail::ScanSpec& spec) {
  const std::string dir = features.at("path").get<std::string>();
  const std::string matrix = util::join_path(dir, io::kFeaturesMatrixFile);
  const util::MappedFile map(matrix);
  const io::NpyHeader header = io::parse_npy_header(map.data(), map.size(), matrix);
  const auto mismatch = [&](const std::string& field, const std::string& recorded,
                            const std::string& found) {
    return FormatError(at_file(manifest_path, "/features/" + field + ": " + recorded + ", but " +
                                                  matrix + " has " + found));
  };
  const auto rows = features.at("rows").get<std::uint64_t>();
  const auto dims = features.at("dims").get<std::uint64_t>();
  if (header.shape.size() != 2)
    throw mismatch("rows", "a matrix", std::to_string(header.shape.size()) + " dimensions");
  if (header.shape[0] != rows)
    throw mismatch("rows", std::to_string(rows), std::to_string(header.shape[0]) + " rows");
  if (header.shape[1] != dims)
    throw mismatch("dims", std::to_string(dims), std::to_string(header.shape[1]) + " columns");
  const std::string dtype = features.at("dtype").get<std::string>();
  if (io::name(header.dtype) != dtype)
    throw mismatch("dtype", dtype, std::string(io::name(header.dtype)));
  const auto bytes = features.at("matrix_bytes").get<std::uint64_t>();
  if (map.size() != bytes)
    throw mismatch("matrix_bytes", std::to_string(bytes), std::to_string(map.size()) + " bytes");
  const json store = io::read_manifest(util::join_path(dir, io::kFeaturesManifestFile), "features");
  if (store.contains("invalid_rows"))
    spec.invalid_rows = store["invalid_rows"].get<std::vector<std::uint64_t>>();
  std::sort(spec.invalid_rows.begin(), spec.invalid_rows.end());
  spec.rows = rows;
}

std::string histogram_text(const std::vector<std::uint64_t>& h) { return json(h).dump(); }

// Regression, survival: a split's outcome_stats against what its shards hold (count; events,
// or the mean target to rounding).
void check_outcome_stats(const std::string& path, const std::string& at, const json& split,
                         const GroupReport& group, PackTask task) {
  if (!has_outcome_stats(task) || !split.contains("outcome_stats")) return;
  const json& stats = split.at("outcome_stats");
  const auto disagree = [&](const std::string& field, const std::string& found) {
    return FormatError(at_file(path, at + "/outcome_stats/" + field + ": " +
                                         stats.at(field).dump() + ", but its shards hold " +
                                         found));
  };
  if (stats.at("count").get<std::uint64_t>() != group.outcome_records)
    throw disagree("count", std::to_string(group.outcome_records) + " records");
  if (group.outcome_records == 0) return;
  const double n = static_cast<double>(group.outcome_records);
  if (detail::spec_of(task).figure_kind == detail::OutcomeFigure::rate) {
    const auto events = static_cast<std::uint64_t>(std::llround(group.outcome_mean * n));
    if (stats.at("events").get<std::uint64_t>() != events)
      throw disagree("events", std::to_string(events) + " events");
  } else if (std::fabs(stats.at("mean").get<double>() - group.outcome_mean) >
             1e-9 * std::max(1.0, std::fabs(group.outcome_mean))) {
    throw disagree("mean", "a mean target of " + json(group.outcome_mean).dump());
  }
}

// What dataset.json says against what the shards hold.
void check_manifest(const std::string& path, const json& doc, const InspectReport& report) {
  const auto disagree = [&](const std::string& pointer, const std::string& recorded,
                            const std::string& found) {
    return FormatError(at_file(path, pointer + ": " + recorded + ", but " + found));
  };
  const auto& splits = doc.at("splits");
  std::size_t g = 0;
  for (const auto& [name, split] : splits.items()) {
    const GroupReport& group = report.groups[g++];
    const std::string at = "/splits/" + name;
    const auto shards_per_split = doc.at("shards_per_split").get<std::size_t>();
    if (split.at("shards").size() != shards_per_split) {
      throw disagree(at + "/shards", std::to_string(split.at("shards").size()) + " shards",
                     "/shards_per_split is " + std::to_string(shards_per_split));
    }
    for (std::size_t i = 0; i < group.shards.size(); ++i) {
      const json& recorded = split.at("shards")[i];
      const ShardReport& s = group.shards[i];
      const std::string where = at + "/shards/" + std::to_string(i);
      if (recorded.at("records").get<std::uint64_t>() != s.records)
        throw disagree(where + "/records", recorded.at("records").dump(),
                       s.file + " holds " + std::to_string(s.records));
      if (recorded.at("bytes").get<std::uint64_t>() != s.bytes)
        throw disagree(where + "/bytes", recorded.at("bytes").dump(),
                       s.file + " has " + std::to_string(s.bytes));
      if (recorded.at("label_histogram").get<std::vector<std::uint64_t>>() != s.label_histogram) {
        throw disagree(where + "/label_histogram", recorded.at("label_histogram").dump(),
                       s.file + " holds " + histogram_text(s.label_histogram));
      }
    }
    if (split.at("records").get<std::uint64_t>() != group.records)
      throw disagree(at + "/records", split.at("records").dump(),
                     "its shards hold " + std::to_string(group.records));
    if (split.at("label_histogram").get<std::vector<std::uint64_t>>() != group.label_histogram) {
      throw disagree(at + "/label_histogram", split.at("label_histogram").dump(),
                     "its shards hold " + histogram_text(group.label_histogram));
    }
    check_outcome_stats(path, at, split, group, report.task);
  }
  if (doc.at("records").get<std::uint64_t>() != report.records)
    throw disagree("/records", doc.at("records").dump(),
                   "the shards hold " + std::to_string(report.records));
}

// The balance and interleave figures of a group whose shards are filled in.
void summarize(GroupReport& g, const RoundRobin& schedule, std::size_t labels) {
  std::vector<std::uint64_t> counts;
  std::vector<std::vector<std::uint64_t>> table;
  g.label_histogram.assign(labels, 0);
  for (std::size_t i = 0; i < g.shards.size(); ++i) {
    ShardReport& s = g.shards[i];
    counts.push_back(s.records);
    table.push_back(s.label_histogram);
    g.records += s.records;
    g.bytes += s.bytes;
    g.unlabeled += s.unlabeled;
    for (std::size_t l = 0; l < labels; ++l) g.label_histogram[l] += s.label_histogram[l];
    for (int d = 0; d < kDeciles; ++d) {
      s.factors[d] = schedule.factor(i, d);
      if (!std::isnan(s.factors[d]) && (s.oversample_decile < 0 || s.factors[d] > s.oversample)) {
        s.oversample = s.factors[d];
        s.oversample_decile = d;
      }
    }
    s.exhausted_at = schedule.exhausted_at(i);
    if (s.oversample_decile >= 0 && (g.oversampled_shard < 0 || s.oversample > g.max_oversample)) {
      g.max_oversample = s.oversample;
      g.oversampled_shard = static_cast<int>(i);
    }
  }
  g.max_min_ratio = max_min_ratio(counts);
  g.cv = coefficient_of_variation(counts);
  std::uint64_t labeled = 0;
  for (auto c : g.label_histogram) labeled += c;
  if (labels > 0 && labeled > 0) g.chi_square = chi_square_independence(table);
  for (int d = 0; d < kDeciles; ++d) {
    g.decile_records[d] = schedule.decile_size(d);
    std::uint64_t in_decile = 0;
    for (auto c : g.decile_labels[d]) in_decile += c;
    g.decile_deviation[d] = std::numeric_limits<double>::quiet_NaN();
    if (in_decile == 0 || labeled == 0) continue;
    double worst = 0;
    for (std::size_t l = 0; l < labels; ++l) {
      const double share =
          static_cast<double>(g.decile_labels[d][l]) / static_cast<double>(in_decile);
      const double overall =
          static_cast<double>(g.label_histogram[l]) / static_cast<double>(labeled);
      worst = std::max(worst, std::fabs(share - overall));
    }
    g.decile_deviation[d] = worst;
    if (g.worst_decile < 0 || worst > g.decile_drift) {
      g.decile_drift = worst;
      g.worst_decile = d;
    }
  }
  if (labels > 0 && labeled > 0) g.decile_p = decile_drift_p(g.label_histogram, g.decile_labels);
}

// Regression, survival: the group's outcome figures from its shards' moments, and how far
// each shard's mean is from the group's (exact hypergeometric test of the event count;
// normal approximation for a mean target), Bonferroni over the shards with records.
void summarize_outcome(GroupReport& g, const std::vector<const detail::Moments*>& shards,
                       PackTask task) {
  detail::Moments all;
  for (const auto* m : shards) all.merge(*m);
  g.outcome_records = all.count;
  if (all.count == 0) return;
  g.outcome_mean = all.mean;
  const detail::OutcomeFigure kind = detail::spec_of(task).figure_kind;
  if (kind == detail::OutcomeFigure::mean && all.count > 1)
    g.outcome_sd = std::sqrt(all.m2 / static_cast<double>(all.count - 1));
  const double variance = all.m2 / static_cast<double>(all.count);
  double smallest = 1;
  std::uint64_t cells = 0;
  for (std::size_t i = 0; i < shards.size(); ++i) {
    const detail::Moments& m = *shards[i];
    ShardReport& s = g.shards[i];
    s.outcome_records = m.count;
    if (m.count == 0) continue;
    s.outcome_mean = m.mean;
    s.outcome_p = kind == detail::OutcomeFigure::rate
                      ? hypergeometric_p(all.count, static_cast<std::uint64_t>(all.sum), m.count,
                                         static_cast<std::uint64_t>(m.sum))
                      : mean_shift_p(all.count, all.mean, variance, m.count, m.mean);
    ++cells;
    if (g.outcome_shard < 0 || s.outcome_p < smallest) {
      smallest = s.outcome_p;
      g.outcome_shard = static_cast<int>(i);
    }
  }
  g.outcome_p = std::min(1.0, smallest * static_cast<double>(cells));
}

InspectReport finish(const detail::ScanSpec& spec, detail::ScanResult&& scan,
                     std::vector<std::string> group_names, std::vector<std::string> files,
                     std::vector<std::string> labels) {
  InspectReport report;
  report.deep = spec.deep;
  report.task = spec.task;
  report.label_feature = spec.label_feature;
  report.labels = spec.label_ids ? std::move(labels) : std::move(scan.labels);
  report.groups.resize(group_names.size());
  for (std::size_t g = 0; g < group_names.size(); ++g)
    report.groups[g].name = std::move(group_names[g]);
  for (std::size_t i = 0; i < spec.shards.size(); ++i) {
    auto& counts = scan.shards[i];
    ShardReport s;
    s.file = files[i];
    s.index = spec.deep ? spec.shards[i].index : "";
    s.records = counts.records;
    s.bytes = counts.bytes;
    s.label_histogram = std::move(counts.histogram);
    s.unlabeled = counts.unlabeled;
    report.groups[spec.group_of[i]].shards.push_back(std::move(s));
  }
  std::vector<std::vector<const detail::Moments*>> moments(report.groups.size());
  for (std::size_t i = 0; i < spec.shards.size(); ++i)
    moments[spec.group_of[i]].push_back(&scan.shards[i].outcome);
  for (std::size_t g = 0; g < report.groups.size(); ++g) {
    report.groups[g].decile_labels = std::move(scan.decile_labels[g]);
    summarize(report.groups[g], scan.schedules[g], report.labels.size());
    if (has_outcome_stats(spec.task)) summarize_outcome(report.groups[g], moments[g], spec.task);
    report.records += report.groups[g].records;
    report.bytes += report.groups[g].bytes;
  }
  return report;
}

// Multilabel (a task with label_counts): each split's outcomes per label, read from its
// records, against dataset.json's label_counts where it has them.
void count_labels(const std::string& dir, const std::string& path, const json& doc,
                  InspectReport& report) {
  const auto counts = detail::spec_of(report.task).label_counts;
  if (!counts) return;
  LabelColumns columns;
  columns.labels = doc.at("labels").at("names").get<std::vector<std::string>>();
  const RecordCodec codec(parse_unit(doc.at("unit").get<std::string>()), false, report.task);
  const RecordLimits limits{static_cast<std::int64_t>(columns.labels.size()),
                            doc.at("features").at("rows").get<std::int64_t>(), path};
  Record record;
  std::size_t g = 0;
  for (const auto& [name, split] : doc.at("splits").items()) {
    std::vector<detail::Outcome> outcomes;
    for (const auto& shard : split.at("shards")) {
      io::TFRecordReader reader(util::join_path(dir, shard.at("file").get<std::string>()));
      std::string_view bytes;
      while (reader.next(bytes)) {
        codec.decode(io::parse_example(bytes, reader.where()), limits, record);
        outcomes.push_back({0, 0, 0, record.values});
      }
    }
    const json found = counts(outcomes, columns);
    if (split.contains("label_counts") && split.at("label_counts") != found)
      throw FormatError(at_file(path, "/splits/" + name +
                                          "/label_counts: " + split.at("label_counts").dump() +
                                          ", but its shards hold " + found.dump()));
    for (const auto& c : found)
      report.groups[g].label_counts.push_back(
          {c.at("label").get<std::string>(), c.at("positives").get<std::uint64_t>(),
           c.at("negatives").get<std::uint64_t>(), c.at("missing").get<std::uint64_t>()});
    ++g;
  }
}

InspectReport inspect_dataset(const InspectOptions& o) {
  const std::string& dir = o.inputs.front();
  const std::string path = util::join_path(dir, kDatasetManifestFile);
  if (!util::exists(path)) {
    throw InputError(at_file(dir, "not a dataset directory: it has no " +
                                      std::string(kDatasetManifestFile) +
                                      " (pass plain TFRecord files as files)"));
  }
  if (o.label_feature != kLabelFeature)
    throw UsageError("the label feature of dataset records is '" + std::string(kLabelFeature) +
                     "'; --label-feature is for TFRecord files");
  const json doc = io::read_manifest(path, "dataset");
  detail::ScanSpec spec;
  spec.deep = o.deep;
  spec.threads = o.threads;
  std::vector<std::string> groups, files;
  for (const auto& [name, split] : doc.at("splits").items()) {
    for (const auto& shard : split.at("shards")) {
      const auto file = shard.at("file").get<std::string>();
      spec.shards.push_back(
          {util::join_path(dir, file), util::join_path(dir, shard.at("index").get<std::string>())});
      spec.group_of.push_back(groups.size());
      files.push_back(file);
    }
    groups.push_back(name);
  }
  spec.groups = groups.size();
  spec.task = manifest_task(doc);
  auto labels = has_label_map(spec.task)
                    ? doc.at("labels").at("names").get<std::vector<std::string>>()
                    : std::vector<std::string>{};
  spec.label_ids = labels.size();
  if (o.deep) {
    spec.record_features = parse_record_features(doc.at("record_features"));
    check_feature_store(path, doc.at("features"), spec);
  }
  InspectReport report = finish(spec, detail::scan_shards(spec), groups, files, std::move(labels));
  report.dataset = dir;
  check_manifest(path, doc, report);
  count_labels(dir, path, doc, report);
  return report;
}

}  // namespace

InspectReport inspect(const InspectOptions& o) {
  if (o.inputs.empty()) throw UsageError("no dataset directory or TFRecord files given");
  if (o.label_feature.empty()) throw UsageError("the label feature name is empty");
  const bool any_directory = std::any_of(
      o.inputs.begin(), o.inputs.end(), [](const std::string& p) { return util::is_directory(p); });
  if (any_directory) {
    if (o.inputs.size() != 1)
      throw UsageError(
          "give one dataset directory, or TFRecord files, not several datasets or both");
    return inspect_dataset(o);
  }
  detail::ScanSpec spec;
  spec.deep = o.deep;
  spec.threads = o.threads;
  spec.label_feature = o.label_feature;
  spec.groups = 1;
  for (const auto& file : o.inputs) {
    const std::string index = io::index_path_for(file);
    spec.shards.push_back({file, o.deep && util::exists(index) ? index : ""});
    spec.group_of.push_back(0);
  }
  return finish(spec, detail::scan_shards(spec), {"files"}, o.inputs, {});
}

}  // namespace mltool::records
