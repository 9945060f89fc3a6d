#include "dataset.hpp"

#include "mltool/io/example.hpp"
#include "mltool/io/manifest.hpp"
#include "mltool/io/sha256.hpp"
#include "mltool/io/tfrecord.hpp"
#include "mltool/records/pack.hpp"
#include "mltool/records/record.hpp"
#include "mltool/util/error.hpp"
#include "mltool/util/file.hpp"

namespace mltool::train {

DatasetInfo read_dataset_info(const std::string& dir) {
  if (!util::is_directory(dir))
    throw InputError(at_file(dir, "not a directory (expected a dataset from mltool pack)"));
  DatasetInfo d;
  d.dir = dir;
  d.manifest_path = util::join_path(dir, records::kDatasetManifestFile);
  if (!util::exists(d.manifest_path))
    throw InputError(
        at_file(dir, "not a dataset: dataset.json is missing (mltool pack writes it last)"));
  d.manifest_sha256 = io::sha256_hex(util::read_file(d.manifest_path));
  d.manifest = io::read_manifest(d.manifest_path, "dataset");
  const auto& f = d.manifest.at("features");
  d.unit = records::parse_unit(d.manifest.at("unit").get<std::string>());
  d.features = f.at("path").get<std::string>();
  d.rows = f.at("rows").get<std::int64_t>();
  d.dims = f.at("dims").get<std::int64_t>();
  d.dtype = f.at("dtype").get<std::string>() == "float16" ? io::DType::float16 : io::DType::float32;
  d.matrix_bytes = f.at("matrix_bytes").get<std::uint64_t>();
  d.matrix_sha256 = f.at("matrix_sha256").get<std::string>();
  d.labels = d.manifest.at("labels").at("names").get<std::vector<std::string>>();
  d.task = records::manifest_task(d.manifest);
  const auto folds = d.manifest.value("folds", nlohmann::json());
  if (folds.is_object()) d.fold_splits = folds.at("splits").get<std::vector<std::string>>();
  const auto& store = d.manifest.at("tile_store");
  if (store.is_string()) d.tile_store = store.get<std::string>();
  return d;
}

SplitSamples read_split(const DatasetInfo& d, const std::string& split) {
  const auto& splits = d.manifest.at("splits");
  if (!splits.contains(split)) {
    std::string names;
    for (const auto& [name, value] : splits.items()) {
      (void)value;
      names += (names.empty() ? "" : ", ") + name;
    }
    throw InputError(
        at_file(d.manifest_path, "no split '" + split + "' (the dataset has " + names + ")"));
  }
  const auto& info = splits[split];
  SplitSamples s;
  s.name = split;
  const bool bag = d.unit == records::PackUnit::bag;
  const bool image = d.unit == records::PackUnit::image;
  const records::RecordCodec codec(d.unit, false, d.task);
  const records::RecordLimits limits{static_cast<std::int64_t>(d.labels.size()), d.rows,
                                     d.manifest_path};
  records::Record record;  // reused: its buffers keep their capacity
  if (bag) s.offsets.push_back(0);
  for (const auto& shard : info.at("shards")) {
    const std::string path = util::join_path(d.dir, shard.at("file").get<std::string>());
    io::TFRecordReader reader(path);
    std::string_view bytes;
    std::uint64_t count = 0;
    while (reader.next(bytes)) {
      ++count;
      codec.decode(io::parse_example(bytes, reader.where()), limits, record);
      s.labels.push_back(record.label);  // 0 unless the task's outcome is a label
      codec.append_targets(record, s.targets);
      s.rows.insert(s.rows.end(), record.rows.begin(), record.rows.end());
      if (bag) {
        s.offsets.push_back(static_cast<std::int64_t>(s.rows.size()));
        s.ids.push_back(record.slide);
      } else if (image) {
        s.ids.push_back(record.key);
      }
    }
    if (count != shard.at("records").get<std::uint64_t>())
      throw FormatError(
          at_file(path, "holds " + std::to_string(count) + " records, but " + d.manifest_path +
                            " says " + std::to_string(shard.at("records").get<std::uint64_t>())));
  }
  if (s.size() == 0)
    throw InputError(at_file(
        d.manifest_path, "split '" + split +
                             "' is empty (0 records); pack with larger fractions or more groups, "
                             "or choose another with --train-split / --val-split"));
  return s;
}

SplitSamples read_splits(const DatasetInfo& d, const std::vector<std::string>& splits) {
  SplitSamples all;
  for (const auto& name : splits) {
    SplitSamples s = read_split(d, name);
    all.name += (all.name.empty() ? "" : "+") + name;
    const auto base = static_cast<std::int64_t>(all.rows.size());
    all.labels.insert(all.labels.end(), s.labels.begin(), s.labels.end());
    all.targets.insert(all.targets.end(), s.targets.begin(), s.targets.end());
    all.rows.insert(all.rows.end(), s.rows.begin(), s.rows.end());
    all.ids.insert(all.ids.end(), s.ids.begin(), s.ids.end());
    if (!s.offsets.empty()) {
      if (all.offsets.empty()) all.offsets.push_back(0);
      for (std::size_t i = 1; i < s.offsets.size(); ++i) all.offsets.push_back(base + s.offsets[i]);
    }
  }
  return all;
}

}  // namespace mltool::train
