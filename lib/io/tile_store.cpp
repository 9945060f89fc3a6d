#include "mltool/io/tile_store.hpp"

#include <algorithm>
#include <cstdio>
#include <limits>

#include "mltool/io/dicomweb.hpp"
#include "mltool/io/manifest.hpp"
#include "mltool/io/slide_id.hpp"
#include "mltool/io/table.hpp"
#include "mltool/util/error.hpp"
#include "mltool/util/file.hpp"

namespace mltool::io {
namespace {

constexpr const char* kStoreKey = "store";
constexpr const char* kSchema = "tile-store";
// The meta records of a slide besides its done marker; "mask" is optional.
constexpr const char* kSlideRecords[] = {"slides", "tiles", "mask"};

template <typename T>
nlohmann::json optional_json(const std::optional<T>& v) {
  return v ? nlohmann::json(*v) : nlohmann::json(nullptr);
}

std::string describe(const nlohmann::json& v) { return v.is_null() ? "none" : v.dump(); }

}  // namespace

const util::EnumNames<TissueDetection> kTissueDetections = {{TissueDetection::otsu, "otsu"},
                                                            {TissueDetection::none, "none"},
                                                            {TissueDetection::model, "model"}};
const util::EnumNames<ArtifactFilter> kArtifactFilters = {{ArtifactFilter::exclude, "exclude"},
                                                          {ArtifactFilter::keep, "keep"}};

const util::EnumNames<RoiMissing> kRoiMissing = {
    {RoiMissing::refuse, "refuse"}, {RoiMissing::skip, "skip"}, {RoiMissing::all, "all"}};

nlohmann::json TileSettings::to_json() const {
  nlohmann::json out = {{"format", "mltool.tile-store"},
                        {"format_version", 1},
                        {"tile_size", tile_size},
                        {"overlap", overlap},
                        {"mpp", optional_json(mpp)},
                        {"level", optional_json(level)},
                        {"encoding", encoding_info(encoding).name},
                        {"quality", quality},
                        {"tissue", util::name_of(kTissueDetections, tissue)},
                        {"min_tissue", min_tissue},
                        {"artifacts", util::name_of(kArtifactFilters, artifacts)},
                        {"pixels", pixels}};
  if (tissue == TissueDetection::model) {
    out["segmenter"] = segmenter;
    out["max_artifact"] = max_artifact;
  }
  if (roi)  // only with --roi: the records of stores without it are as before
    out["roi"] = {{"classes", roi->classes},
                  {"min_roi", roi->min_roi},
                  {"missing", util::name_of(kRoiMissing, roi->missing)}};
  return out;
}

TileSettings TileSettings::from_json(const nlohmann::json& doc, const std::string& where) {
  io::embedded_schema(kSchema).validate(doc, where);
  TileSettings s;
  s.tile_size = doc.at("tile_size").get<int>();
  s.overlap = doc.at("overlap").get<int>();
  if (!doc.at("mpp").is_null()) s.mpp = doc.at("mpp").get<double>();
  if (!doc.at("level").is_null()) s.level = doc.at("level").get<int>();
  s.encoding = *encoding_named(doc.at("encoding").get<std::string>());  // the schema's enum
  s.quality = doc.at("quality").get<int>();
  s.tissue = util::parse_enum(kTissueDetections, doc.at("tissue").get<std::string>(),
                              where + ": 'tissue'");  // the schema's enum
  s.min_tissue = doc.at("min_tissue").get<double>();
  // Stores made before --artifacts existed already called dark pixels background, and on
  // slides without ink the other rules change well under 1% of the tissue: they continue
  // as exclude, the default, so a default run still appends to them.
  if (doc.contains("artifacts"))
    s.artifacts = util::parse_enum(kArtifactFilters, doc.at("artifacts").get<std::string>(),
                                   where + ": 'artifacts'");  // the schema's enum
  s.pixels = doc.value("pixels", true);  // absent: a store written before coordinates stores
  if (s.tissue == TissueDetection::model) {
    if (!doc.contains("segmenter") || !doc.contains("max_artifact"))
      throw FormatError(where + ": tissue \"model\" needs 'segmenter' and 'max_artifact'");
    s.segmenter = doc.at("segmenter");
    s.max_artifact = doc.at("max_artifact").get<double>();
  }
  if (doc.contains("roi")) {  // absent: no --roi (the schema checks its fields)
    const auto& r = doc.at("roi");
    s.roi =
        RoiSettings{r.at("classes").get<std::vector<std::string>>(), r.at("min_roi").get<double>(),
                    util::parse_enum(kRoiMissing, r.at("missing").get<std::string>(),
                                     where + ": 'roi.missing'")};
  }
  if (s.mpp.has_value() == s.level.has_value())
    throw FormatError(where + ": exactly one of 'mpp' and 'level' must be set");
  if ((s.mpp && !(*s.mpp > 0)) || (s.level && *s.level < 0) || s.overlap >= s.tile_size)
    throw FormatError(where + ": needs mpp > 0, level >= 0 and overlap < tile_size");
  return s;
}

void TileSettings::require_same(const TileSettings& other, const std::string& store) const {
  const auto mine = to_json();
  const auto theirs = other.to_json();
  if (mine.contains("segmenter") && theirs.contains("segmenter") &&
      mine.at("segmenter").value("sha256", "") != theirs.at("segmenter").value("sha256", ""))
    throw UsageError(at_file(
        store, "the store's tissue was found by the segmenter " +
                   mine.at("segmenter").value("file", std::string("?")) + " (sha256 " +
                   mine.at("segmenter").value("sha256", std::string("?")) + "), not " +
                   theirs.at("segmenter").value("file", std::string("?")) + " (sha256 " +
                   theirs.at("segmenter").value("sha256", std::string("?")) +
                   "); give --tissue that file, use another store, or --overwrite to replace it"));
  auto keys = mine;
  keys.update(theirs);
  for (auto it = keys.begin(); it != keys.end(); ++it) {
    if (it.key() == "segmenter") continue;  // compared by its sha256 above
    const auto a = mine.value(it.key(), nlohmann::json());
    const auto b = theirs.value(it.key(), nlohmann::json());
    if (it.key() == "pixels" && a != b)
      throw UsageError(at_file(
          store, pixels ? "holds tile pixels (mltool tile), not a coordinates store"
                        : "is a coordinates store (mltool extract SLIDE...: no tile pixels), not a "
                          "tile store; use another store, or --overwrite to replace it"));
    if (a != b)
      throw UsageError(at_file(
          store, "the store was made with " + it.key() + " " + describe(a) + ", not " +
                     describe(b) +
                     "; use another store, the same settings, or --overwrite to replace it"));
  }
}

std::string tile_key(const std::string& slide_id, std::int64_t row, std::int64_t col) {
  char position[48];
  std::snprintf(position, sizeof position, "/%06lld_%06lld", static_cast<long long>(row),
                static_cast<long long>(col));
  return slide_id + position;
}

std::string_view slide_of_key(std::string_view key) {
  const auto slash = key.rfind('/');
  return slash == std::string_view::npos ? key : key.substr(0, slash);
}

bool before_in_key_order(const std::string& a, const std::string& b) { return a + "/" < b + "/"; }

namespace {

constexpr const char* kControlCharacter = "holds a control character";

// What makes `id` no slide id (slide_id_for's rules), or nullptr.
const char* slide_id_problem(std::string_view id) {
  if (id.empty()) return "is empty";
  if (id == "." || id == "..") return "is '.' or '..'";
  if (id.find('/') != std::string_view::npos) return "holds '/'";
  for (const unsigned char c : id)
    if (c < 0x20 || c == 0x7f) return kControlCharacter;
  return nullptr;
}

}  // namespace

std::string slide_id_for(const std::string& path) {
  std::string name = path;
  if (is_dicomweb_url(path)) {
    name = parse_dicomweb_url(path).series;  // stable across servers
  } else {
    while (name.size() > 1 && name.back() == '/') name.pop_back();
    if (const auto slash = name.rfind('/'); slash != std::string::npos)
      name = name.substr(slash + 1);
    if (const auto dot = name.rfind('.'); dot != std::string::npos && dot > 0)
      name = name.substr(0, dot);
  }
  if (const char* problem = slide_id_problem(name))
    throw InputError(at_file(path, problem == kControlCharacter
                                       ? "the file name holds a control character"
                                       : "cannot make a slide id from this path"));
  return name;
}

void check_slide_id(std::string_view id, const std::string& store, std::string_view key) {
  if (const char* problem = slide_id_problem(id))
    throw FormatError(at_file(store, "key " + json_quoted(key) + ": the slide id " +
                                         json_quoted(id) + " " + problem +
                                         " (a slide id is a file name); the store was not "
                                         "written by mltool, or was altered: make it again "
                                         "(mltool tile, mltool extract)"));
}

bool TileStore::is_store(const std::string& path) {
  return util::is_directory(path) && util::exists(util::join_path(path, "data.mdb"));
}

TileStore TileStore::open(const std::string& path, bool writable) {
  lmdb::EnvOptions options;
  options.read_only = !writable;
  options.create = writable;
  auto lock = writable ? std::make_shared<util::OutputLock>(path, "mltool tile") : nullptr;
  TileStore store(lmdb::Env::open(path, options));
  store.lock_ = std::move(lock);
  try {
    store.tiles_ = store.env_.db("tiles", writable);
    store.meta_ = store.env_.db("meta", writable);
  } catch (const InputError&) {
    throw InputError(
        at_file(path, "not a tile store: an LMDB without the 'tiles' and 'meta' databases"));
  }
  return store;
}

TileStore::Snapshot TileStore::snapshot() const { return Snapshot(env_.begin_read(), tiles_); }

std::optional<std::string_view> TileStore::Snapshot::find(const std::string& key) const {
  return txn_.get(tiles_, key);
}

void TileStore::decode_tile(const std::string& key, const std::optional<std::string_view>& encoded,
                            int tile_size, RgbImage& out) const {
  const std::string what = path() + ": tile '" + key + "'";
  if (!encoded) throw FormatError(what + ": missing from the tiles database");
  decode_image(encoded->data(), encoded->size(), out, what);
  if (out.width != tile_size || out.height != tile_size)
    throw FormatError(what + ": is " + std::to_string(out.width) + "x" +
                      std::to_string(out.height) + ", the store's tiles are " +
                      std::to_string(tile_size) + "x" + std::to_string(tile_size));
}

std::optional<TileSettings> TileStore::settings() const {
  auto txn = env_.begin_read();
  const auto value = txn.get(meta_, kStoreKey);
  if (!value) return std::nullopt;
  const std::string where = path() + ": meta 'store'";
  const auto doc = nlohmann::json::parse(*value, nullptr, false);
  if (doc.is_discarded()) throw FormatError(where + ": not valid JSON");
  return TileSettings::from_json(doc, where);
}

void TileStore::adopt_settings(const TileSettings& settings) {
  if (const auto existing = this->settings()) {
    existing->require_same(settings, path());
    return;
  }
  adopt_record(kStoreKey, settings.to_json().dump());
}

std::optional<nlohmann::json> TileStore::store_record(const std::string& key) const {
  auto txn = env_.begin_read();
  const auto value = txn.get(meta_, key);
  if (!value) return std::nullopt;
  auto doc = nlohmann::json::parse(*value, nullptr, false);
  if (doc.is_discarded()) throw FormatError(path() + ": meta '" + key + "': not valid JSON");
  return doc;
}

void TileStore::adopt_record(const std::string& key, std::string text) {
  for (auto& [k, t] : pending_)
    if (k == key) {
      t = std::move(text);
      return;
    }
  pending_.emplace_back(key, std::move(text));
}

void TileStore::put_store_record(const std::string& key, const std::string& text) {
  env_.write([&](lmdb::Txn& txn) { txn.put(meta_, key, text); });
}

void TileStore::put_pending_records(lmdb::Txn& txn) {
  // Kept after: writing the same records with every later slide is harmless, and a
  // transaction that failed leaves them to the next.
  for (const auto& [key, text] : pending_) txn.put(meta_, key, text);
}

std::vector<std::string> TileStore::completed_slides() const {
  std::vector<std::string> ids;
  auto txn = env_.begin_read();
  for (const auto& e : txn.prefix(meta_, "done/")) {
    check_slide_id(e.key.substr(5), path(), e.key);
    ids.emplace_back(e.key.substr(5));
  }
  return ids;
}

namespace {

// A coordinates store's keys of slide `id`, from its "tiles" record, in key order.
void recorded_keys(const TileStore& store, const std::string& id, std::vector<std::string>& keys) {
  const auto tiles = store.record("tiles", id);
  const std::string where = store.path() + ": meta 'tiles/" + id + "'";
  if (!tiles || !tiles->is_object() || !tiles->contains("row") || !tiles->contains("col") ||
      !tiles->at("row").is_array() || tiles->at("row").size() != tiles->at("col").size())
    throw FormatError(where + ": missing, or without row and col arrays of one length");
  const std::size_t first = keys.size();
  const auto& rows = tiles->at("row");
  const auto& cols = tiles->at("col");
  for (std::size_t i = 0; i < rows.size(); ++i) {
    if (!rows[i].is_number_integer() || !cols[i].is_number_integer())
      throw FormatError(where + ": entry " + std::to_string(i) + " is not a row and column");
    keys.push_back(tile_key(id, rows[i].get<std::int64_t>(), cols[i].get<std::int64_t>()));
  }
  std::sort(keys.begin() + static_cast<std::ptrdiff_t>(first), keys.end());
}

}  // namespace

std::vector<std::string> TileStore::complete_tile_keys() const {
  auto ids = completed_slides();
  std::sort(ids.begin(), ids.end(), before_in_key_order);
  std::vector<std::string> keys;
  const auto stored = settings();
  const bool pixels = !stored || stored->pixels;
  auto txn = env_.begin_read();
  for (const auto& id : ids) {
    const std::size_t before = keys.size();
    if (pixels)
      for (const auto& e : txn.prefix(tiles_, id + "/")) {
        // "S1/../x/000000_000000" is no tile of S1: its slide part holds another '/'.
        check_slide_id(slide_of_key(e.key), path(), e.key);
        keys.emplace_back(e.key);
      }
    else
      recorded_keys(*this, id, keys);
    const auto done = nlohmann::json::parse(txn.at(meta_, meta_key("done", id)), nullptr, false);
    const std::int64_t expected = done.is_object() ? done.value("tiles", std::int64_t{-1}) : -1;
    if (expected != static_cast<std::int64_t>(keys.size() - before))
      throw FormatError(path() + ": slide '" + id + "' has " +
                        std::to_string(keys.size() - before) + " tiles, its done marker says " +
                        std::to_string(expected));
  }
  return keys;
}

bool TileStore::is_complete(const std::string& id) const {
  auto txn = env_.begin_read();
  return txn.get(meta_, meta_key("done", id)).has_value();
}

std::vector<std::string> TileStore::incomplete_slides() const {
  std::vector<std::string> ids;
  auto txn = env_.begin_read();
  for (const auto& e : txn.prefix(meta_, "done/")) {
    const auto done = nlohmann::json::parse(e.value, nullptr, false);
    if (done.is_object() && done.contains("failed_tiles") && !done["failed_tiles"].empty()) {
      check_slide_id(e.key.substr(5), path(), e.key);
      ids.emplace_back(e.key.substr(5));
    }
  }
  return ids;
}

std::optional<nlohmann::json> TileStore::record(const std::string& kind,
                                                const std::string& id) const {
  auto txn = env_.begin_read();
  const std::string key = meta_key(kind, id);
  const auto value = txn.get(meta_, key);
  if (!value) return std::nullopt;
  auto doc = nlohmann::json::parse(*value, nullptr, false);
  if (doc.is_discarded()) throw FormatError(path() + ": meta '" + key + "': not valid JSON");
  return doc;
}

std::uint64_t TileStore::discard_incomplete(const std::string& id) {
  if (is_complete(id)) return 0;
  const std::string prefix = id + "/";
  std::uint64_t deleted = 0;
  // Delete in bounded transactions: a killed run may have left many committed batches.
  for (bool more = true; more;) {
    std::vector<std::string> keys;
    {
      auto txn = env_.begin_read();
      for (const auto& e : txn.prefix(tiles_, prefix)) {
        keys.emplace_back(e.key);
        if (keys.size() == 65536) break;
      }
    }
    more = keys.size() == 65536;
    env_.write([&](lmdb::Txn& txn) {
      for (const auto& k : keys) txn.del(tiles_, k);
      if (!more)
        for (const char* kind : kSlideRecords) txn.del(meta_, meta_key(kind, id));
    });
    deleted += keys.size();
  }
  return deleted;
}

void TileStore::clear() {
  pending_.clear();
  for (const lmdb::Dbi& dbi : {tiles_, meta_}) {
    // In bounded transactions, as discard_incomplete, for a store of any size.
    for (bool more = true; more;) {
      std::vector<std::string> keys;
      {
        auto txn = env_.begin_read();
        for (const auto& e : txn.prefix(dbi, "")) {
          keys.emplace_back(e.key);
          if (keys.size() == 65536) break;
        }
      }
      more = keys.size() == 65536;
      env_.write([&](lmdb::Txn& txn) {
        for (const auto& k : keys) txn.del(dbi, k);
      });
    }
  }
}

TileStore::SlideWriter::SlideWriter(TileStore& store, std::string id, lmdb::BatchOptions options)
    : store_(&store),
      id_(std::move(id)),
      options_(options),
      batch_(store.env_, store.tiles_, options) {}

void TileStore::SlideWriter::commit(const std::string& slide_record,
                                    const std::string& tiles_record,
                                    const std::string& done_record) {
  batch_.flush([&](lmdb::Txn& txn) {
    store_->put_pending_records(txn);
    txn.put(store_->meta_, meta_key("slides", id_), slide_record);
    txn.put(store_->meta_, meta_key("tiles", id_), tiles_record);
    for (const auto& [kind, text] : records_) txn.put(store_->meta_, meta_key(kind, id_), text);
    txn.put(store_->meta_, meta_key("done", id_), done_record);
  });
  records_.clear();
}

void TileStore::SlideWriter::drop() {
  batch_ = lmdb::BatchWriter(store_->env_, store_->tiles_, options_);
  records_.clear();
}

TileStore::SlideWriter TileStore::write_slide(const std::string& id,
                                              const std::string& slide_record,
                                              std::size_t commit_every) {
  env_.write([&](lmdb::Txn& txn) { txn.put(meta_, meta_key("slides", id), slide_record); });
  lmdb::BatchOptions options;
  options.max_puts = commit_every;
  return SlideWriter(*this, id, options);
}

TileStore::SlideWriter TileStore::add_to_slide(const std::string& id) {
  lmdb::BatchOptions options;
  options.max_puts = options.max_bytes = std::numeric_limits<std::size_t>::max();
  return SlideWriter(*this, id, options);
}

MergeReport merge_store(TileStore& out, const std::string& input, std::size_t commit_every) {
  if (util::absolute_path(input) == util::absolute_path(out.path()))
    throw UsageError(at_file(input, "cannot merge a store into itself"));
  MergeReport report;
  report.path = input;
  TileStore in = TileStore::open(input, false);
  const auto settings = in.settings();
  if (!settings) throw InputError(at_file(input, "not a tile store (no meta 'store' record)"));
  out.adopt_settings(*settings);
  lmdb::BatchOptions batch_options;
  batch_options.max_puts = commit_every;
  for (const std::string& id : in.completed_slides()) {
    const auto record = in.record("slides", id);
    if (!record)
      throw FormatError(at_file(input, "meta 'done/" + id + "' has no 'slides/" + id + "' record"));
    if (const auto existing = out.record("slides", id)) {
      if (existing->value("quickhash", "") != record->value("quickhash", ""))
        throw InputError(at_file(input, "slide id '" + id + "' is in " + out.path() +
                                            " for another slide, " + existing->value("path", "")));
      if (out.is_complete(id)) {
        ++report.skipped;
        continue;
      }
    }
    out.discard_incomplete(id);
    lmdb::BatchWriter batch(out.env(), out.tiles(), batch_options);
    auto txn = in.env().begin_read();
    std::int64_t tiles = 0;
    for (const auto& e : txn.prefix(in.tiles(), id + "/")) {
      batch.put(e.key, e.value);
      ++tiles;
    }
    batch.flush([&](lmdb::Txn& w) {
      out.put_pending_records(w);
      for (const char* kind : {"slides", "tiles", "done"}) {
        const std::string key = TileStore::meta_key(kind, id);
        w.put(out.meta(), key, txn.at(in.meta(), key));
      }
      const std::string mask_key = TileStore::meta_key("mask", id);
      if (const auto mask = txn.get(in.meta(), mask_key)) w.put(out.meta(), mask_key, *mask);
    });
    ++report.slides;
    report.tiles += tiles;
  }
  return report;
}

}  // namespace mltool::io
