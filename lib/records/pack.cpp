#include "mltool/records/pack.hpp"

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <future>

#include "mltool/io/example.hpp"
#include "mltool/io/feature_store.hpp"
#include "mltool/io/manifest.hpp"
#include "mltool/io/sha256.hpp"
#include "mltool/io/tfrecord.hpp"
#include "mltool/records/record.hpp"
#include "mltool/records/shards.hpp"
#include "mltool/util/error.hpp"
#include "mltool/util/file.hpp"
#include "mltool/util/log.hpp"
#include "mltool/util/output_lock.hpp"
#include "mltool/util/parallel.hpp"
#include "mltool/util/version.hpp"
#include "outcome.hpp"
#include "pack_plan.hpp"
#include "task_spec.hpp"

namespace mltool::records {

using nlohmann::json;

std::string shard_file_name(const std::string& split, std::uint32_t index, std::uint32_t count) {
  char digits[32];
  std::snprintf(digits, sizeof digits, "-%05u-of-%05u", index, count);
  return split + digits + ".tfrecord";
}

namespace {

void rename_or_throw(const std::string& from, const std::string& to) {
  if (::rename(from.c_str(), to.c_str()) != 0) {
    throw ResourceError(sys_message(to, "cannot rename " + from + " into place", errno));
  }
}

/// Removes the partial directory unless released: a failed pack leaves nothing behind.
class PartialDir {
 public:
  explicit PartialDir(std::string path) : path_(std::move(path)) {
    util::remove_tree(path_);  // a leftover of an earlier process with our pid
    util::make_directories(path_);
  }
  ~PartialDir() {
    if (!released_) {
      try {
        util::remove_tree(path_);
      } catch (...) {
      }
    }
  }
  PartialDir(const PartialDir&) = delete;
  PartialDir& operator=(const PartialDir&) = delete;
  const std::string& path() const { return path_; }
  void release() { released_ = true; }

 private:
  std::string path_;
  bool released_ = false;
};

std::string sha256_of(const io::FeatureStore& store) {
  const auto map = store.mapping();
  io::Sha256 h;
  constexpr std::size_t kChunk = 64 << 20;  // streamed, so pages can be dropped behind us
  for (std::size_t at = 0; at < map->size(); at += kChunk) {
    h.update(map->data() + at, std::min(kChunk, map->size() - at));
  }
  return h.hex();
}

struct WrittenShard {
  std::uint64_t records = 0;
  std::uint64_t bytes = 0;
  std::vector<std::uint64_t> histogram;  // records per label id
};

// The outcome of planned record `r` into `record`.
void set_outcome(PackTask task, const detail::PackPlan& plan, const detail::PlannedRecord& r,
                 Record& record) {
  if (has_label_map(task)) {
    record.label = r.label;
    return;
  }
  const detail::Outcome& o = plan.outcomes[r.label];
  record.target = o.target;
  record.time = o.time;
  record.event = o.event;
  record.values = o.values;
}

// Writes the records plan.records[members[m]] for m in `order` as one committed shard.
WrittenShard write_shard(const std::string& path, const std::vector<std::uint64_t>& order,
                         const std::vector<std::uint64_t>& members, const detail::PackPlan& plan,
                         const io::FeatureStore& store, const RecordCodec& codec,
                         std::size_t labels_count) {
  io::TFRecordWriter writer(path);
  WrittenShard out;
  out.histogram.assign(labels_count, 0);
  io::ExampleBuilder example;
  std::string bytes;
  Record record;  // reused: its buffers keep their capacity
  for (std::size_t k = 0; k < order.size(); ++k) {
    // Shards list their records shuffled: fetch ahead of the random walk over the plan.
    if (k + 8 < order.size()) __builtin_prefetch(&plan.records[members[order[k + 8]]]);
    const auto& r = plan.records[members[order[k]]];
    set_outcome(codec.task(), plan, r, record);
    record.slide = plan.slides[r.slide];
    const auto first = plan.index.begin() + static_cast<std::ptrdiff_t>(r.first);
    record.rows.assign(first, first + static_cast<std::ptrdiff_t>(r.count));
    if (codec.keyed()) record.key = store.key(plan.rows[r.first]);
    if (plan.coordinates) record.xy = (*plan.coordinates)[r.first];
    example.clear();
    codec.encode(record, example);
    example.serialize(bytes);
    writer.write(bytes);
    if (labels_count) ++out.histogram[r.label];
  }
  writer.commit();
  out.records = writer.records();
  out.bytes = writer.bytes();
  return out;
}

// Logs (at -v) the seconds each phase took, to show where the time goes.
class PhaseClock {
 public:
  void operator()(const char* what) {
    const auto now = std::chrono::steady_clock::now();
    log::debug(std::string(what) + ": " +
               std::to_string(std::chrono::duration<double>(now - start_).count()) + " s");
    start_ = now;
  }

 private:
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

// The splits records go to: job.splits, or with folds the held-out ones and the folds.
std::vector<SplitSpec> splits_of(const PackJob& job) {
  if (job.folds == 0) return job.splits;
  return fold_splits(job.splits_given ? job.splits : std::vector<SplitSpec>{}, job.folds);
}

// Options that belong to another task or unit are refused, not silently ignored.
void check_task_options(const PackJob& job) {
  const LabelColumns& c = job.columns;
  const std::string task = std::string("--task ") + to_string(job.task);
  const auto refuse = [&](bool given, const char* option, const char* belongs) {
    if (given) throw UsageError(std::string(option) + " is for " + belongs + ", not " + task);
  };
  for (const detail::PackTaskSpec* spec : detail::kPackTaskSpecs) {
    if (spec->task == job.task) continue;
    const std::string belongs = std::string("--task ") + to_string(spec->task);
    for (const detail::TaskOption& o : spec->options)
      refuse(o.name && o.given(c), o.name, belongs.c_str());
  }
  if (!c.bag.empty() && job.unit != PackUnit::bag)
    throw UsageError("--bag-by makes bags: it needs --unit bag");
}

void check_job(const PackJob& job) {
  util::check_options(pack_options(), job);
  validate_splits(splits_of(job));
  check_task_options(job);
  if (job.output.empty()) throw UsageError("no output directory given");
}

// What splits, folds and shards balance: the label (classification) or the outcome's stratum.
std::vector<std::uint32_t> record_strata(const detail::PackPlan& plan, PackTask task) {
  std::vector<std::uint32_t> out;
  out.reserve(plan.records.size());
  if (has_label_map(task)) {
    for (const auto& r : plan.records) out.push_back(r.label);
    return out;
  }
  std::vector<detail::Outcome> outcomes;
  outcomes.reserve(plan.records.size());
  for (const auto& r : plan.records) outcomes.push_back(plan.outcomes[r.label]);
  return detail::strata(task, outcomes);
}

SplitAssignment assign_record_splits(const detail::PackPlan& plan,
                                     const std::vector<std::uint32_t>& strata,
                                     const std::vector<SplitSpec>& splits, const PackJob& job) {
  std::vector<SplitItem> items;
  items.reserve(plan.records.size());
  for (std::size_t i = 0; i < plan.records.size(); ++i)
    items.push_back({plan.groups[plan.records[i].group], strata[i]});
  return assign_splits(items, splits, job.seed, detail::stratum_classes(job.task));
}

// What killed packs to this output left beside it.
void remove_stale_partials(const std::string& output) {
  std::string name = util::absolute_path(output);
  while (name.size() > 1 && name.back() == '/') name.pop_back();
  util::remove_stale_partials(util::parent_directory(name),
                              name.substr(name.rfind('/') + 1) + ".partial-");
}

// What the splits are written from and the manifest describes.
struct Packing {
  const PackJob& job;
  const io::FeatureStore& store;
  const detail::PackPlan& plan;
  const std::vector<SplitSpec>& splits;
  const std::vector<std::uint32_t>& strata;  ///< per record
  const SplitAssignment& assignment;
};

// Writes split `s` as job.shards shards into `dir`; returns its manifest entry.
json write_split(const Packing& p, const std::string& dir, std::uint32_t s, PackReport& report) {
  const PackJob& job = p.job;
  const std::string& name = p.splits[s].name;
  const std::size_t labels_count = p.plan.labels.size();
  std::vector<std::uint64_t> members;
  std::vector<std::uint32_t> member_labels;
  std::vector<detail::Outcome> outcomes;
  for (std::uint64_t i = 0; i < p.plan.records.size(); ++i) {
    if (p.assignment.record_split[i] != s) continue;
    members.push_back(i);
    member_labels.push_back(p.strata[i]);
    if (!has_label_map(job.task)) outcomes.push_back(p.plan.outcomes[p.plan.records[i].label]);
  }
  const auto shard_of = assign_shards(member_labels, job.shards, job.seed);
  const auto shards = shard_members(shard_of, job.shards, job.seed);
  std::vector<std::uint64_t> split_histogram(labels_count, 0);
  json shard_docs = json::array();
  // Shards are independent: written side by side, then recorded in order.
  std::vector<WrittenShard> written(job.shards);
  const RecordCodec codec(job.unit, p.plan.coordinates.has_value(), job.task);
  util::parallel_for(job.shards, job.threads, [&](std::size_t j) {
    written[j] = write_shard(
        util::join_path(dir, shard_file_name(name, static_cast<std::uint32_t>(j), job.shards)),
        shards[j], members, p.plan, p.store, codec, labels_count);
  });
  for (std::uint32_t j = 0; j < job.shards; ++j) {
    const std::string file = shard_file_name(name, j, job.shards);
    const auto& histogram = written[j].histogram;
    for (std::size_t l = 0; l < labels_count; ++l) split_histogram[l] += histogram[l];
    PackShard shard{name, file, written[j].records, written[j].bytes};
    shard_docs.push_back({{"file", file},
                          {"index", io::index_path_for(file)},
                          {"records", shard.records},
                          {"bytes", shard.bytes},
                          {"label_histogram", histogram}});
    report.records += shard.records;
    report.shards.push_back(shard);
    if (job.on_shard) job.on_shard(shard);
  }
  std::uint64_t groups = 0;
  for (const auto g : p.assignment.group_split) groups += g == s ? 1 : 0;
  json doc = {{"fraction", p.splits[s].fraction},
              {"records", members.size()},
              {"groups", groups},
              {"label_histogram", split_histogram},
              {"outcome_stats", detail::outcome_stats(job.task, outcomes)},
              {"shards", shard_docs}};
  if (const auto counts = detail::spec_of(job.task).label_counts)
    doc["label_counts"] = counts(outcomes, job.columns);
  return doc;
}

json nullable(const std::string& s) { return s.empty() ? json(nullptr) : json(s); }

// dataset.json's "outcome": the columns of a regression or survival outcome.
json outcome_columns(const PackJob& job) {
  return detail::spec_of(job.task).outcome_columns(job.columns);
}

// dataset.json's "folds", or null without --folds.
json folds_doc(const Packing& p) {
  const PackJob& job = p.job;
  if (job.folds == 0) return nullptr;
  json names = json::array();
  for (std::uint32_t i = 0; i < job.folds; ++i) names.push_back(fold_name(i));
  const std::string& group = job.columns.group.empty() ? job.columns.bag : job.columns.group;
  return {{"k", job.folds},
          {"splits", names},
          {"group_column", nullable(group)},
          {"stratify", detail::stratify_name(job.task)}};
}

json dataset_manifest(const Packing& p, const json& splits, const std::string& matrix_sha256,
                      const PackReport& report) {
  const PackJob& job = p.job;
  const bool classification = has_label_map(job.task);
  const io::FeatureStore& store = p.store;
  json group_split = json::object();
  for (std::size_t g = 0; g < p.assignment.groups.size(); ++g) {
    group_split[p.assignment.groups[g]] = p.splits[p.assignment.group_split[g]].name;
  }
  return {
      {"format", kDatasetFormat},
      {"format_version", kDatasetFormatVersion},
      {"created_by", job.created_by.empty() ? util::tool_version() : job.created_by},
      {"features",
       {{"path", util::absolute_path(store.dir())},
        {"matrix", io::kFeaturesMatrixFile},
        {"matrix_bytes", store.mapping()->size()},
        {"matrix_sha256", matrix_sha256},
        {"rows", store.rows()},
        {"dims", store.dims()},
        {"dtype", std::string(io::name(store.dtype()))}}},
      {"labels",
       {{"path", util::absolute_path(job.labels)},
        {"key_column", job.columns.key},
        {"label_column", classification ? json(job.columns.label) : json(nullptr)},
        {"group_column", nullable(job.columns.group)},
        {"bag_column", nullable(job.columns.bag)},
        {"names",
         detail::spec_of(job.task).names_columns ? job.columns.labels : p.plan.labels.names()}}},
      {"task", to_string(job.task)},
      {"outcome", outcome_columns(job)},
      {"folds", folds_doc(p)},
      {"unit", to_string(job.unit)},
      {"record_features", RecordCodec(job.unit, report.coordinates, job.task).features()},
      {"tile_store", p.plan.tile_store ? json(*p.plan.tile_store) : json(nullptr)},
      {"records", report.records},
      {"seed", job.seed},
      {"shards_per_split", job.shards},
      {"splits", splits},
      {"group_split", group_split},
      {"dedupe", {{"enabled", job.dedupe}, {"duplicate_rows", report.duplicate_rows}}},
      {"excluded",
       {{"missing_keys", report.missing_keys},
        {"invalid_rows", report.invalid_rows},
        {"duplicate_labels", report.duplicate_labels},
        {"empty_bags", report.empty_bags},
        {"incomplete_bags", report.incomplete_bags}}},
  };
}

// Publication: one rename; an old dataset is moved aside first and removed after.
void publish(PartialDir& partial, const std::string& output, bool overwrite) {
  if (util::exists(output)) {
    if (!overwrite) {
      throw UsageError(
          at_file(output, "appeared while packing; choose another output or overwrite it"));
    }
    const std::string old = output + ".old-" + std::to_string(::getpid());
    util::remove_tree(old);
    rename_or_throw(output, old);
    try {
      rename_or_throw(partial.path(), output);
    } catch (...) {
      ::rename(old.c_str(), output.c_str());  // put the old dataset back
      throw;
    }
    partial.release();
    util::remove_tree(old);
  } else {
    rename_or_throw(partial.path(), output);
    partial.release();
  }
}

}  // namespace

PackReport pack_dataset(const PackJob& job) {
  PhaseClock phase;  // -v shows where the time goes
  check_job(job);
  const util::OutputLock lock(job.output, "mltool pack");  // before anything looks at it
  if (util::exists(job.output) && !job.overwrite) {
    throw UsageError(at_file(job.output, "already exists; choose another output or overwrite it"));
  }

  PackReport report;
  const auto store = io::FeatureStore::open(job.features);
  // The checksum reads the whole matrix: on its own thread, beside planning and writing.
  std::future<std::string> matrix_sha256_future =
      std::async(std::launch::async, [&store] { return sha256_of(store); });
  const Labels labels = read_labels(job.labels, job.columns, job.task);
  phase("read labels");
  detail::PackPlan plan = detail::plan_records(store, labels, job, report);
  if (job.dedupe) report.duplicate_rows = detail::dedupe_rows(store, plan);
  if (job.unit != PackUnit::bag) detail::find_coordinates(store, plan);
  report.coordinates = plan.coordinates.has_value();
  phase("plan records");
  const std::vector<SplitSpec> split_specs = splits_of(job);
  const std::vector<std::uint32_t> strata = record_strata(plan, job.task);
  const SplitAssignment assignment = assign_record_splits(plan, strata, split_specs, job);
  phase("assign splits");

  remove_stale_partials(job.output);
  PartialDir partial(job.output + ".partial-" + std::to_string(::getpid()));
  const Packing packing{job, store, plan, split_specs, strata, assignment};
  json splits = json::object();
  for (std::uint32_t s = 0; s < split_specs.size(); ++s)
    splits[split_specs[s].name] = write_split(packing, partial.path(), s, report);
  phase("write shards");

  json doc = dataset_manifest(packing, splits, matrix_sha256_future.get(), report);
  io::write_manifest(util::join_path(partial.path(), kDatasetManifestFile), doc, "dataset");
  phase("checksum and manifest");
  publish(partial, job.output, job.overwrite);
  report.output = job.output;
  report.manifest = std::move(doc);
  return report;
}

std::vector<std::string> label_count_lines(const json& manifest) {
  std::vector<std::string> out;
  json total;
  const auto line = [](const std::string& name, const json& counts) {
    std::string text = name + ":";
    for (const auto& c : counts)
      text += " " + c.at("label").get<std::string>() + " " + c.at("positives").dump() + "+ " +
              c.at("negatives").dump() + "− " + c.at("missing").dump() + " missing" +
              (&c == &counts.back() ? "" : ",");
    return text;
  };
  for (const auto& [name, split] : manifest.at("splits").items()) {
    if (!split.contains("label_counts")) return {};
    const json& counts = split.at("label_counts");
    if (total.is_null())
      total = counts;
    else
      for (std::size_t l = 0; l < counts.size(); ++l)
        for (const char* k : {"positives", "negatives", "missing"})
          total[l][k] = total[l][k].get<std::uint64_t>() + counts[l][k].get<std::uint64_t>();
    out.push_back(line(name, counts));
  }
  if (!total.is_null()) out.push_back(line("all records", total));
  return out;
}

}  // namespace mltool::records
