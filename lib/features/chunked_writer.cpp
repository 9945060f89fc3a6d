#include "mltool/features/chunked_writer.hpp"

#include <cerrno>
#include <cstdio>
#include <cstring>

#include <unistd.h>

#include "mltool/io/feature_store.hpp"
#include "mltool/util/error.hpp"
#include "mltool/util/file.hpp"

namespace mltool::features {
namespace {

using json = nlohmann::json;
constexpr const char* kConfig = "config.json";

json read_json(const std::string& path) {
  auto doc = json::parse(util::read_file(path), nullptr, false);
  if (doc.is_discarded()) throw FormatError(at_file(path, "not valid JSON"));
  return doc;
}

// The splits with one entry a batch: a batch resumed in its middle was noted by both runs,
// the second time from the first row the resumed run wrote to the batch's end.
json joined_splits(const json& splits) {
  json out = json::array();
  for (const auto& s : splits) {
    if (!out.empty() && out.back().at("batch") == s.at("batch")) {
      const auto end = s.at("first_row").get<std::uint64_t>() + s.at("rows").get<std::uint64_t>();
      out.back()["rows"] = end - out.back().at("first_row").get<std::uint64_t>();
      continue;
    }
    out.push_back(s);
  }
  return out;
}

}  // namespace

json ChunkedFeatureWriter::partial_config(const std::string& dir) {
  const std::string config = util::join_path(util::join_path(dir, ".extract-partial"), kConfig);
  return util::exists(config) ? read_json(config) : json();
}

void ChunkedFeatureWriter::remove_all(const std::string& dir) {
  for (const char* name : {"features.json", ".extract-partial", "features.npy", "keys.txt"})
    util::remove_tree(util::join_path(dir, name));
}

ChunkedFeatureWriter::ChunkedFeatureWriter(std::string dir, std::uint64_t dims, json fingerprint,
                                           std::uint64_t chunk_rows, json note)
    : dir_(std::move(dir)),
      partial_(util::join_path(dir_, ".extract-partial")),
      dims_(dims),
      chunk_rows_(chunk_rows) {
  if (dims_ == 0 || chunk_rows_ == 0)
    throw UsageError(at_file(dir_, "dims and chunk rows must be at least 1"));
  util::make_directories(partial_);
  util::remove_stale_partials(dir_);  // the temporaries of a killed run
  util::remove_stale_partials(partial_);
  const std::string config = util::join_path(partial_, kConfig);
  const json wanted = {{"dims", dims_}, {"run", fingerprint}};
  if (util::exists(config)) {
    const json found = read_json(config);
    if (found.value("dims", json()) != wanted["dims"] ||
        found.value("run", json()) != wanted["run"])
      throw UsageError(at_file(
          dir_, "holds a partial extraction made with other settings (" + config +
                    "); repeat them, or start over with --overwrite (or remove " + partial_ + ")"));
  } else {
    json doc = wanted;
    doc["note"] = std::move(note);
    util::write_file_atomic(config, doc.dump(2) + "\n");
  }
  // The committed chunks: contiguous from 0, each ending with its manifest.
  while (util::exists(chunk_path(chunks_, ".json"))) {
    const json manifest = read_json(chunk_path(chunks_, ".json"));
    committed_ += manifest.at("rows").get<std::uint64_t>();
    for (const auto& split : manifest.value("splits", json::array())) splits_.push_back(split);
    ++chunks_;
  }
  // Files of a chunk that was being written when the run died are not committed: drop them.
  for (const char* ext : {".npy", ".keys"}) ::unlink(chunk_path(chunks_, ext).c_str());
}

std::string ChunkedFeatureWriter::chunk_path(std::uint64_t index, const char* ext) const {
  char name[64];
  std::snprintf(name, sizeof name, "chunk-%06llu%s", static_cast<unsigned long long>(index), ext);
  return util::join_path(partial_, name);
}

void ChunkedFeatureWriter::append(const std::string& key, const float* row, bool invalid) {
  io::check_feature_key(key, dir_);
  rows_.insert(rows_.end(), row, row + dims_);
  keys_ += key;
  keys_ += '\n';
  if (invalid) invalid_.push_back(pending_);
  if (++pending_ == chunk_rows_) commit_chunk();
}

void ChunkedFeatureWriter::commit_chunk() {
  if (pending_ == 0) return;
  {
    io::NpyWriter npy(chunk_path(chunks_, ".npy"), io::DType::float32, {dims_});
    npy.write_rows(rows_.data(), pending_);
    npy.commit();
  }
  util::write_file_atomic(chunk_path(chunks_, ".keys"), keys_);
  json manifest = {{"rows", pending_}, {"invalid", invalid_}};
  if (!pending_splits_.empty()) manifest["splits"] = pending_splits_;
  util::write_file_atomic(chunk_path(chunks_, ".json"), manifest.dump() + "\n");
  for (auto& split : pending_splits_) splits_.push_back(std::move(split));
  pending_splits_ = json::array();
  ++chunks_;
  committed_ += pending_;
  rows_.clear();
  keys_.clear();
  invalid_.clear();
  pending_ = 0;
}

void ChunkedFeatureWriter::note_split(json split, std::uint64_t rows) {
  split["first_row"] = committed_ + pending_;
  split["rows"] = rows;
  pending_splits_.push_back(std::move(split));
}

std::uint64_t ChunkedFeatureWriter::finish(io::DType dtype, const json& model, const json& source,
                                           const json& stain_fits) {
  std::uint64_t invalid = 0;
  commit_chunk();
  io::FeatureStoreWriter out(dir_, dims_, dtype, model, source);
  out.set_split_batches(joined_splits(splits_));
  out.set_stain_fits(stain_fits);
  std::uint64_t base = 0;
  for (std::uint64_t c = 0; c < chunks_; ++c) {
    const json manifest = read_json(chunk_path(c, ".json"));
    const auto rows = manifest.at("rows").get<std::uint64_t>();
    const io::MappedNpy npy = io::map_npy(chunk_path(c, ".npy"));
    if (npy.header.dtype != io::DType::float32 || npy.header.shape.size() != 2 ||
        npy.header.shape[0] != rows || npy.header.shape[1] != dims_)
      throw FormatError(at_file(chunk_path(c, ".npy"), "does not hold " + std::to_string(rows) +
                                                           " x " + std::to_string(dims_) +
                                                           " float32 rows"));
    const std::string keys = util::read_file(chunk_path(c, ".keys"));
    const auto* data = reinterpret_cast<const float*>(npy.data());
    std::size_t pos = 0;
    for (std::uint64_t r = 0; r < rows; ++r) {
      const std::size_t end = keys.find('\n', pos);
      if (end == std::string::npos)
        throw FormatError(
            at_file(chunk_path(c, ".keys"), "has fewer than " + std::to_string(rows) + " keys"));
      out.append(std::string_view(keys).substr(pos, end - pos), data + r * dims_);
      pos = end + 1;
    }
    for (const auto& i : manifest.at("invalid")) out.mark_invalid(base + i.get<std::uint64_t>());
    invalid += manifest.at("invalid").size();
    base += rows;
  }
  out.finish();
  util::remove_tree(partial_);
  return invalid;
}

}  // namespace mltool::features
