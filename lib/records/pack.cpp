#include "mltool/records/pack.hpp"

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <future>

#include "mltool/io/example.hpp"
#include "mltool/io/feature_store.hpp"
#include "mltool/io/manifest.hpp"
#include "mltool/io/tfrecord.hpp"
#include "mltool/records/sha256.hpp"
#include "mltool/records/shards.hpp"
#include "mltool/util/error.hpp"
#include "mltool/util/file.hpp"
#include "mltool/util/log.hpp"
#include "mltool/util/output_lock.hpp"
#include "mltool/util/parallel.hpp"
#include "mltool/util/version.hpp"
#include "pack_plan.hpp"

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
  Sha256 h;
  constexpr std::size_t kChunk = 64 << 20;  // streamed, so pages can be dropped behind us
  for (std::size_t at = 0; at < map->size(); at += kChunk) {
    h.update(map->data() + at, std::min(kChunk, map->size() - at));
  }
  return h.hex();
}

json record_features(PackUnit unit, bool coordinates) {
  json f = {{"label", "int64"}, {"slide", "bytes"}};
  if (unit == PackUnit::bag) {
    f["indices"] = "int64_list";
  } else {
    f["index"] = "int64";
    if (unit == PackUnit::image) f["key"] = "bytes";
    if (coordinates) {
      f["x"] = "int64";
      f["y"] = "int64";
    }
  }
  return f;
}

struct WrittenShard {
  std::uint64_t records = 0;
  std::uint64_t bytes = 0;
  std::vector<std::uint64_t> histogram;  // records per label id
};

// Writes the records plan.records[members[m]] for m in `order` as one committed shard.
WrittenShard write_shard(const std::string& path, const std::vector<std::uint64_t>& order,
                         const std::vector<std::uint64_t>& members, const detail::PackPlan& plan,
                         const io::FeatureStore& store, PackUnit unit, std::size_t labels_count) {
  io::TFRecordWriter writer(path);
  WrittenShard out;
  out.histogram.assign(labels_count, 0);
  io::ExampleBuilder example;
  std::string record;
  std::vector<std::int64_t> indices;
  for (std::size_t k = 0; k < order.size(); ++k) {
    // Shards list their records shuffled: fetch ahead of the random walk over the plan.
    if (k + 8 < order.size()) __builtin_prefetch(&plan.records[members[order[k + 8]]]);
    const auto& r = plan.records[members[order[k]]];
    example.clear();
    example.add_int64("label", r.label);
    example.add_bytes("slide", plan.slides[r.slide]);
    if (unit == PackUnit::bag) {
      indices.assign(plan.index.begin() + static_cast<std::ptrdiff_t>(r.first),
                     plan.index.begin() + static_cast<std::ptrdiff_t>(r.first + r.count));
      example.add_int64s("indices", indices);
    } else {
      example.add_int64("index", static_cast<std::int64_t>(plan.index[r.first]));
      if (unit == PackUnit::image) example.add_bytes("key", store.key(plan.rows[r.first]));
      if (plan.coordinates) {
        example.add_int64("x", (*plan.coordinates)[r.first].first);
        example.add_int64("y", (*plan.coordinates)[r.first].second);
      }
    }
    example.serialize(record);
    writer.write(record);
    ++out.histogram[r.label];
  }
  writer.commit();
  out.records = writer.records();
  out.bytes = writer.bytes();
  return out;
}

}  // namespace

PackReport pack_dataset(const PackJob& job) {
  // -v shows where the time goes.
  auto phase_start = std::chrono::steady_clock::now();
  const auto phase = [&phase_start](const char* what) {
    const auto now = std::chrono::steady_clock::now();
    log::debug(std::string(what) + ": " +
               std::to_string(std::chrono::duration<double>(now - phase_start).count()) + " s");
    phase_start = now;
  };
  util::check_options(pack_options(), job);
  validate_splits(job.splits);
  if (job.output.empty()) throw UsageError("no output directory given");
  const util::OutputLock lock(job.output, "mltool pack");  // before anything looks at it
  if (util::exists(job.output) && !job.overwrite) {
    throw UsageError(at_file(job.output, "already exists; choose another output or overwrite it"));
  }

  PackReport report;
  const auto store = io::FeatureStore::open(job.features);
  // The checksum reads the whole matrix: on its own thread, beside planning and writing.
  std::future<std::string> matrix_sha256_future =
      std::async(std::launch::async, [&store] { return sha256_of(store); });
  const Labels labels = read_labels(job.labels, job.columns);
  phase("read labels");
  detail::PackPlan plan = detail::plan_records(store, labels, job, report);
  if (job.dedupe) report.duplicate_rows = detail::dedupe_rows(store, plan);
  if (job.unit != PackUnit::bag) detail::find_coordinates(store, plan);
  report.coordinates = plan.coordinates.has_value();
  phase("plan records");

  std::vector<SplitItem> items;
  items.reserve(plan.records.size());
  for (const auto& r : plan.records) items.push_back({plan.groups[r.group], r.label});
  const SplitAssignment assignment = assign_splits(items, job.splits, job.seed);
  phase("assign splits");

  {  // what killed packs to this output left beside it
    std::string name = util::absolute_path(job.output);
    while (name.size() > 1 && name.back() == '/') name.pop_back();
    util::remove_stale_partials(util::parent_directory(name),
                                name.substr(name.rfind('/') + 1) + ".partial-");
  }
  PartialDir partial(job.output + ".partial-" + std::to_string(::getpid()));
  const std::size_t labels_count = plan.labels.size();
  json splits = json::object();
  for (std::uint32_t s = 0; s < job.splits.size(); ++s) {
    const std::string& name = job.splits[s].name;
    std::vector<std::uint64_t> members;
    std::vector<std::uint32_t> member_labels;
    for (std::uint64_t i = 0; i < plan.records.size(); ++i) {
      if (assignment.record_split[i] != s) continue;
      members.push_back(i);
      member_labels.push_back(plan.records[i].label);
    }
    const auto shard_of = assign_shards(member_labels, job.shards, job.seed);
    const auto shards = shard_members(shard_of, job.shards, job.seed);
    std::vector<std::uint64_t> split_histogram(labels_count, 0);
    json shard_docs = json::array();
    // Shards are independent: written side by side, then recorded in order.
    std::vector<WrittenShard> written(job.shards);
    util::parallel_for(job.shards, job.threads, [&](std::size_t j) {
      written[j] = write_shard(
          util::join_path(partial.path(),
                          shard_file_name(name, static_cast<std::uint32_t>(j), job.shards)),
          shards[j], members, plan, store, job.unit, labels_count);
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
    for (const auto g : assignment.group_split) groups += g == s ? 1 : 0;
    splits[name] = {{"fraction", job.splits[s].fraction},
                    {"records", members.size()},
                    {"groups", groups},
                    {"label_histogram", split_histogram},
                    {"shards", shard_docs}};
  }

  phase("write shards");
  json group_split = json::object();
  for (std::size_t g = 0; g < assignment.groups.size(); ++g) {
    group_split[assignment.groups[g]] = job.splits[assignment.group_split[g]].name;
  }
  json doc = {
      {"format", kDatasetFormat},
      {"format_version", kDatasetFormatVersion},
      {"created_by", job.created_by.empty() ? util::tool_version() : job.created_by},
      {"features",
       {{"path", util::absolute_path(store.dir())},
        {"matrix", io::kFeaturesMatrixFile},
        {"matrix_bytes", store.mapping()->size()},
        {"matrix_sha256", matrix_sha256_future.get()},
        {"rows", store.rows()},
        {"dims", store.dims()},
        {"dtype", std::string(io::name(store.dtype()))}}},
      {"labels",
       {{"path", util::absolute_path(job.labels)},
        {"key_column", job.columns.key},
        {"label_column", job.columns.label},
        {"group_column", job.columns.group.empty() ? json(nullptr) : json(job.columns.group)},
        {"names", plan.labels.names()}}},
      {"unit", to_string(job.unit)},
      {"record_features", record_features(job.unit, report.coordinates)},
      {"tile_store", plan.tile_store ? json(*plan.tile_store) : json(nullptr)},
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
        {"empty_bags", report.empty_bags}}},
  };
  io::write_manifest(util::join_path(partial.path(), kDatasetManifestFile), doc, "dataset");

  phase("checksum and manifest");
  // Publication: one rename; an old dataset is moved aside first and removed after.
  if (util::exists(job.output)) {
    if (!job.overwrite) {
      throw UsageError(
          at_file(job.output, "appeared while packing; choose another output or overwrite it"));
    }
    const std::string old = job.output + ".old-" + std::to_string(::getpid());
    util::remove_tree(old);
    rename_or_throw(job.output, old);
    try {
      rename_or_throw(partial.path(), job.output);
    } catch (...) {
      ::rename(old.c_str(), job.output.c_str());  // put the old dataset back
      throw;
    }
    partial.release();
    util::remove_tree(old);
  } else {
    rename_or_throw(partial.path(), job.output);
    partial.release();
  }
  report.output = job.output;
  report.manifest = std::move(doc);
  return report;
}

}  // namespace mltool::records
