#include "mltool/io/feature_store.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <mutex>

#include "mltool/io/half.hpp"
#include "mltool/io/manifest.hpp"
#include "mltool/util/error.hpp"
#include "mltool/util/version.hpp"

namespace mltool::io {
namespace {

using nlohmann::json;

constexpr const char* kSchema = "features";

std::string join(const std::string& dir, const char* name) { return util::join_path(dir, name); }

// Creates the directory before the writer's members open files inside it.
std::string prepared_dir(std::string dir) {
  util::make_directories(dir);
  return dir;
}

std::string quoted(std::string_view s) {
  return json(std::string(s)).dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace

void check_feature_key(std::string_view key, const std::string& where) {
  if (key.empty()) throw InputError(at_file(where, "empty tile key"));
  if (key.find_first_of("\r\n") != std::string_view::npos)
    throw InputError(at_file(where, "tile key " + quoted(key) + " contains a line break"));
}

// ---------------------------------------------------------------- writer

FeatureStoreWriter::FeatureStoreWriter(std::string dir, std::uint64_t dims, DType dtype, json model,
                                       json source, std::string created_by)
    : dir_(prepared_dir(std::move(dir))),
      dims_(dims),
      dtype_(dtype),
      model_(std::move(model)),
      source_(std::move(source)),
      created_by_(created_by.empty() ? util::tool_version() : std::move(created_by)),
      matrix_(join(dir_, kFeaturesMatrixFile), dtype, {dims}),
      keys_(join(dir_, kFeaturesKeysFile)) {
  if (dims_ == 0) throw UsageError(at_file(dir_, "a feature store needs dims >= 1"));
  if (dtype_ != DType::float32 && dtype_ != DType::float16)
    throw UsageError(
        at_file(dir_, "feature stores hold float32 or float16, not " + std::string(name(dtype_))));
  if (!model_.is_object())
    throw UsageError(at_file(dir_, "the model description must be a JSON object"));
  if (!source_.is_null() && !source_.is_object())
    throw UsageError(at_file(dir_, "the source description must be a JSON object or null"));
  if (dtype_ == DType::float16) half_row_.resize(dims_);
}

void FeatureStoreWriter::write_row(const float* row) {
  if (dtype_ == DType::float16) {
    floats_to_halves(row, half_row_.data(), dims_);
    matrix_.write_rows(half_row_.data(), 1);
  } else {
    matrix_.write_rows(row, 1);
  }
}

void FeatureStoreWriter::append(std::string_view key, const float* row) {
  if (finished_) throw UsageError(at_file(dir_, "append after finish()"));
  check_feature_key(key, join(dir_, kFeaturesKeysFile) + ": row " + std::to_string(rows_));
  // A write that throws half way leaves the two files out of step; remember it
  // so finish() cannot publish them.
  failed_ = true;
  write_row(row);
  keys_.write(key);
  keys_.write("\n", 1);
  failed_ = false;
  ++rows_;
}

void FeatureStoreWriter::append_stored(std::string_view key, const void* row) {
  if (finished_) throw UsageError(at_file(dir_, "append after finish()"));
  check_feature_key(key, join(dir_, kFeaturesKeysFile) + ": row " + std::to_string(rows_));
  failed_ = true;  // as in append()
  matrix_.write_rows(row, 1);
  keys_.write(key);
  keys_.write("\n", 1);
  failed_ = false;
  ++rows_;
}

void FeatureStoreWriter::append_rows(const std::string* keys, std::size_t count,
                                     const float* rows) {
  // Check every key first so a bad key rejects the batch as a whole.
  for (std::size_t i = 0; i < count; ++i)
    check_feature_key(keys[i],
                      join(dir_, kFeaturesKeysFile) + ": row " + std::to_string(rows_ + i));
  for (std::size_t i = 0; i < count; ++i) append(keys[i], rows + i * dims_);
}

void FeatureStoreWriter::mark_invalid(std::uint64_t row) {
  if (row >= rows_)
    throw UsageError(at_file(dir_, "cannot mark row " + std::to_string(row) + " invalid: only " +
                                       std::to_string(rows_) + " rows written"));
  invalid_rows_.push_back(row);
}

void FeatureStoreWriter::finish() {
  if (finished_) throw UsageError(at_file(dir_, "feature store already finished"));
  if (failed_)
    throw UsageError(at_file(dir_, "cannot finish a feature store after a failed write"));
  std::sort(invalid_rows_.begin(), invalid_rows_.end());
  invalid_rows_.erase(std::unique(invalid_rows_.begin(), invalid_rows_.end()), invalid_rows_.end());

  json doc = {{"format", kFeaturesFormat},
              {"format_version", kFeaturesFormatVersion},
              {"rows", rows_},
              {"dims", dims_},
              {"dtype", std::string(name(dtype_))},
              {"files", {{"matrix", kFeaturesMatrixFile}, {"keys", kFeaturesKeysFile}}},
              {"model", model_},
              {"created_by", created_by_}};
  if (!source_.is_null()) doc["source"] = source_;
  if (!invalid_rows_.empty()) doc["invalid_rows"] = invalid_rows_;
  if (split_batches_.is_array() && !split_batches_.empty()) doc["split_batches"] = split_batches_;
  if (stain_fits_.is_object() && !stain_fits_.empty()) doc["stain_fits"] = stain_fits_;
  const std::string manifest_path = join(dir_, kFeaturesManifestFile);
  // Validate and serialize before publishing anything: a manifest that cannot be
  // written must not leave new data files behind either.
  const std::string manifest_text = format_manifest(manifest_path, doc, kSchema);

  if (::unlink(manifest_path.c_str()) != 0 && errno != ENOENT)
    throw ResourceError(sys_message(manifest_path, "cannot remove the old manifest", errno));
  matrix_.commit();
  keys_.commit();
  util::write_file_atomic(manifest_path, manifest_text);
  finished_ = true;
}

// ---------------------------------------------------------------- reader

struct FeatureStore::Keys {
  std::string path;
  // Mapped rather than read: the page cache holds the text, the heap only offsets.
  std::unique_ptr<const util::MappedFile> file;
  // Line i is text()[starts[i], starts[i+1] - 1): every line is followed by a
  // '\n', real or (for a missing final newline) virtual.
  std::vector<std::uint64_t> starts;
  std::once_flag index_once;
  // key -> row, open addressing with linear probing: each slot holds row + 1 (0 = empty)
  // in its low 40 bits and the top 24 bits of the key's hash above them, so most probes
  // that miss never touch the key text. Two slots per key at most.
  std::vector<std::uint64_t> slots;
  std::uint64_t mask = 0;

  std::string_view text() const {
    return {reinterpret_cast<const char*>(file->data()), file->size()};
  }
  std::string_view line(std::uint64_t i) const {
    return text().substr(starts[i], starts[i + 1] - 1 - starts[i]);
  }
};

FeatureStore::FeatureStore() = default;
FeatureStore::FeatureStore(FeatureStore&&) noexcept = default;
FeatureStore& FeatureStore::operator=(FeatureStore&&) noexcept = default;
FeatureStore::~FeatureStore() = default;

std::string FeatureStore::tile_store() const {
  const auto source = manifest_.find("source");
  if (source == manifest_.end() || !source->is_object()) return "";
  const auto path = source->find("tile_store");
  return path != source->end() && path->is_string() ? path->get<std::string>() : "";
}

FeatureStore FeatureStore::open(const std::string& dir) {
  const std::string manifest_path = join(dir, kFeaturesManifestFile);
  const std::string matrix_path = join(dir, kFeaturesMatrixFile);
  if (!util::is_directory(dir)) throw InputError(at_file(dir, "not a directory"));
  if (!util::exists(manifest_path))
    throw InputError(at_file(dir,
                             "not a feature store: features.json is missing "
                             "(it is written last, so the store may be unfinished)"));
  FeatureStore s;
  s.dir_ = dir;
  s.manifest_ = read_manifest(manifest_path, kSchema);
  s.rows_ = s.manifest_["rows"].get<std::uint64_t>();
  s.dims_ = s.manifest_["dims"].get<std::uint64_t>();
  s.dtype_ = *dtype_from_name(s.manifest_["dtype"].get<std::string>());  // schema: float32|float16
  if (s.manifest_.contains("invalid_rows")) {
    s.invalid_rows_ = s.manifest_["invalid_rows"].get<std::vector<std::uint64_t>>();
    for (std::size_t i = 0; i < s.invalid_rows_.size(); ++i)
      if (s.invalid_rows_[i] >= s.rows_)
        throw FormatError(at_file(manifest_path,
                                  "/invalid_rows/" + std::to_string(i) + ": row " +
                                      std::to_string(s.invalid_rows_[i]) +
                                      " is out of range (rows = " + std::to_string(s.rows_) + ")"));
    std::sort(s.invalid_rows_.begin(), s.invalid_rows_.end());
  }

  MappedNpy npy = map_npy(matrix_path);
  const NpyHeader& h = npy.header;
  if (h.dtype != s.dtype_)
    throw FormatError(at_file(matrix_path, "dtype is " + std::string(name(h.dtype)) + " ('" +
                                               std::string(npy_descr(h.dtype)) + "'), but " +
                                               manifest_path + " says /dtype = \"" +
                                               std::string(name(s.dtype_)) + "\""));
  if (h.shape.size() != 2 || h.shape[0] != s.rows_ || h.shape[1] != s.dims_) {
    std::string shape;
    for (std::uint64_t d : h.shape) shape += (shape.empty() ? "" : ", ") + std::to_string(d);
    const char* field = h.shape.size() == 2 && h.shape[0] == s.rows_ ? "/dims" : "/rows";
    throw FormatError(at_file(matrix_path, "shape is (" + shape + "), but " + manifest_path +
                                               " says (rows, dims) = (" + std::to_string(s.rows_) +
                                               ", " + std::to_string(s.dims_) + ") [" + field +
                                               "]"));
  }
  s.mapping_ = std::move(npy.file);
  s.data_offset_ = h.data_offset;

  s.keys_ = std::make_unique<Keys>();
  Keys& k = *s.keys_;
  k.path = join(dir, kFeaturesKeysFile);
  k.file = std::make_unique<const util::MappedFile>(k.path);
  const std::string_view text = k.text();
  k.starts.reserve(std::min<std::uint64_t>(s.rows_, text.size()) + 1);
  k.starts.push_back(0);
  for (std::size_t pos = 0; pos < text.size();) {
    const std::size_t newline = text.find('\n', pos);
    const std::size_t end = newline == std::string_view::npos ? text.size() : newline;
    const std::uint64_t line = k.starts.size();
    if (end == pos)
      throw FormatError(at_file(k.path, "line " + std::to_string(line) + ": empty key"));
    if (text.substr(pos, end - pos).find('\r') != std::string_view::npos)
      throw FormatError(at_file(k.path, "line " + std::to_string(line) +
                                            ": carriage return in key (CRLF line endings?)"));
    k.starts.push_back(end + 1);
    pos = end + 1;
  }
  const std::uint64_t count = k.starts.size() - 1;
  if (count != s.rows_)
    throw FormatError(at_file(k.path, "has " + std::to_string(count) + " keys, but " +
                                          manifest_path +
                                          " says /rows = " + std::to_string(s.rows_)));
  return s;
}

void FeatureStore::check_row(std::uint64_t row) const {
  if (row >= rows_)
    throw InputError(at_file(join(dir_, kFeaturesMatrixFile),
                             "row " + std::to_string(row) + " is out of range (the store has " +
                                 std::to_string(rows_) + " rows)"));
}

void FeatureStore::row_f32(std::uint64_t row, float* out) const {
  check_row(row);
  const std::uint8_t* p = static_cast<const std::uint8_t*>(data()) + row * row_bytes();
  if (dtype_ == DType::float32) {
    std::memcpy(out, p, dims_ * sizeof(float));
    return;
  }
  // memcpy per element: a foreign file's data need not be 2-byte aligned.
  for (std::uint64_t j = 0; j < dims_; ++j) {
    std::uint16_t h;
    std::memcpy(&h, p + 2 * j, 2);
    out[j] = half_to_float(h);
  }
}

void FeatureStore::gather_f32(const std::uint64_t* rows, std::size_t count, float* out) const {
  for (std::size_t i = 0; i < count; ++i) row_f32(rows[i], out + i * dims_);
}

std::string_view FeatureStore::key(std::uint64_t row) const {
  check_row(row);
  return keys_->line(row);
}

namespace {

constexpr int kRowBits = 40;
constexpr std::uint64_t kRowMask = (std::uint64_t{1} << kRowBits) - 1;

std::uint64_t tag_of(std::size_t hash) {
  return static_cast<std::uint64_t>(hash) >> kRowBits << kRowBits;
}

}  // namespace

std::optional<std::uint64_t> FeatureStore::find(std::string_view key) const {
  Keys& k = *keys_;
  const std::hash<std::string_view> hasher;
  std::call_once(k.index_once, [&k, &hasher, this] {
    // If this throws, call_once stays unset and the next find() reports it again.
    if (rows_ >= kRowMask) throw FormatError(at_file(k.path, "too many keys to index"));
    std::uint64_t capacity = 16;
    while (capacity < 2 * rows_) capacity *= 2;
    std::vector<std::uint64_t> slots(capacity, 0);
    const std::uint64_t mask = capacity - 1;
    for (std::uint64_t i = 0; i < rows_; ++i) {
      const std::string_view key_i = k.line(i);
      const std::size_t hash = hasher(key_i);
      for (std::uint64_t s = hash & mask;; s = (s + 1) & mask) {
        const std::uint64_t slot = slots[s];
        if (slot == 0) {
          slots[s] = tag_of(hash) | (i + 1);
          break;
        }
        const std::uint64_t other = (slot & kRowMask) - 1;
        if ((slot & ~kRowMask) == tag_of(hash) && k.line(other) == key_i) {
          throw FormatError(at_file(k.path, "line " + std::to_string(i + 1) + ": duplicate key " +
                                                quoted(key_i) + " (first on line " +
                                                std::to_string(other + 1) + ")"));
        }
      }
    }
    k.slots = std::move(slots);
    k.mask = mask;
  });
  const std::size_t hash = hasher(key);
  for (std::uint64_t s = hash & k.mask;; s = (s + 1) & k.mask) {
    const std::uint64_t slot = k.slots[s];
    if (slot == 0) return std::nullopt;
    const std::uint64_t row = (slot & kRowMask) - 1;
    if ((slot & ~kRowMask) == tag_of(hash) && k.line(row) == key) return row;
  }
}

}  // namespace mltool::io
