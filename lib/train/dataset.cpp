#include "dataset.hpp"

#include "mltool/io/example.hpp"
#include "mltool/io/manifest.hpp"
#include "mltool/io/tfrecord.hpp"
#include "mltool/records/pack.hpp"
#include "mltool/records/sha256.hpp"
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
  d.manifest_sha256 = records::sha256_hex(util::read_file(d.manifest_path));
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
  const auto classes = static_cast<std::int64_t>(d.labels.size());
  if (bag) s.offsets.push_back(0);
  for (const auto& shard : info.at("shards")) {
    const std::string path = util::join_path(d.dir, shard.at("file").get<std::string>());
    io::TFRecordReader reader(path);
    std::string_view bytes;
    std::uint64_t count = 0;
    while (reader.next(bytes)) {
      ++count;
      const auto ex = io::parse_example(bytes, reader.where());
      const auto label = ex.int64("label");
      if (label < 0 || label >= classes)
        throw FormatError(reader.where() + ": label " + std::to_string(label) +
                          " is not in the label map of " + d.manifest_path + " (" +
                          std::to_string(classes) + " labels)");
      auto check_row = [&](std::int64_t row) {
        if (row < 0 || row >= d.rows)
          throw FormatError(reader.where() + ": row " + std::to_string(row) +
                            " is outside the feature matrix (" + std::to_string(d.rows) + " rows)");
      };
      s.labels.push_back(label);
      if (bag) {
        const auto& rows = ex.int64s("indices");
        if (rows.empty()) throw FormatError(reader.where() + ": an empty bag (no indices)");
        for (const auto r : rows) check_row(r);
        s.rows.insert(s.rows.end(), rows.begin(), rows.end());
        s.offsets.push_back(static_cast<std::int64_t>(s.rows.size()));
        s.ids.push_back(ex.bytes("slide").at(0));
      } else {
        const auto row = ex.int64("index");
        check_row(row);
        s.rows.push_back(row);
        if (image) {
          const auto& key = ex.bytes("key");
          if (key.size() != 1)
            throw FormatError(reader.where() + ": feature 'key' must hold one tile key");
          s.ids.push_back(key[0]);
        }
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

}  // namespace mltool::train
