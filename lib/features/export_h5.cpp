// mltool export h5: a feature store → CLAM/TRIDENT files per slide (h5_interop.hpp), in the
// layout h5_layouts.cpp describes.
//
// Phases: open the store and group its rows by slide (store order); find where coordinates
// come from (the tile store, or x<X>_y<Y> keys); open the journal that makes the export
// resumable; write each of a slide's files aside and rename it into place, then note the
// slide in the journal.
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <optional>
#include <unordered_map>
#include <unordered_set>

#include "h5_interop_internal.hpp"
#include "h5_layouts.hpp"
#include "mltool/features/h5_interop.hpp"
#include "mltool/io/crc32c.hpp"
#include "mltool/io/feature_store.hpp"
#include "mltool/io/h5.hpp"
#include "mltool/io/half.hpp"
#include "mltool/io/slide_id.hpp"
#include "mltool/io/tile_store.hpp"
#include "mltool/util/error.hpp"
#include "mltool/util/file.hpp"
#include "mltool/util/log.hpp"
#include "mltool/util/output_lock.hpp"

namespace mltool::features {
namespace {

using json = nlohmann::json;
constexpr std::uint64_t kBlockRows = 4096;
constexpr const char* kJournal = ".mltool-export.journal";

struct Slide {
  std::string id;
  std::vector<std::uint64_t> rows;  // valid rows of the store, in store order
};

struct Plan {
  std::vector<Slide> slides;
  std::uint64_t invalid = 0;
};

Plan group_rows(const io::FeatureStore& store) {
  Plan plan;
  std::unordered_map<std::string, std::size_t> index;
  const auto& invalid = store.invalid_rows();
  std::size_t next_invalid = 0;
  for (std::uint64_t r = 0; r < store.rows(); ++r) {
    if (next_invalid < invalid.size() && invalid[next_invalid] == r) {
      ++next_invalid;
      ++plan.invalid;
      continue;
    }
    const std::string slide = detail::slide_of(store.key(r));
    auto [it, added] = index.emplace(slide, plan.slides.size());
    if (added) {
      io::check_slide_id(slide, store.dir(), store.key(r));  // it names the slide's files
      plan.slides.push_back({slide, {}});
    }
    plan.slides[it->second].rows.push_back(r);
  }
  return plan;
}

// Where coordinates and geometry come from: the tile store, or the keys themselves.
class Geometry {
 public:
  Geometry(const io::FeatureStore& store, const std::string& tiles_option) : store_(store) {
    const std::string path = tiles_option.empty() ? store.tile_store() : tiles_option;
    if (!path.empty()) {
      if (!io::TileStore::is_store(path))
        throw InputError(
            path + ": the tile store " +
            (tiles_option.empty() ? "named by " + store.dir() + "/features.json " : std::string()) +
            "is not there (give the moved store with --tiles STORE)");
      tiles_.emplace(io::TileStore::open(path, false));
      label_ = util::absolute_path(path);
    } else {
      label_ = "keys";
      const json& source = store.manifest().value("source", json::object());
      if (source.is_object() && source.value("slides", json()).is_object())
        imported_ = source["slides"];
    }
  }

  const std::string& label() const { return label_; }
  std::uint64_t no_mpp() const { return no_mpp_; }

  // coords (rows x 2) and the attributes of `coords` for one slide.
  std::pair<std::vector<std::int64_t>, json> slide(const Slide& s, const std::string& outdir) {
    return tiles_ ? from_tiles(s, outdir) : from_keys(s, outdir);
  }

 private:
  std::pair<std::vector<std::int64_t>, json> from_tiles(const Slide& s, const std::string& outdir) {
    auto [coords, info] = detail::tile_coords(*tiles_, store_, s.id, s.rows);
    if (!info.value("mpp", json()).is_number()) ++no_mpp_;
    return {std::move(coords), detail::coords_attributes(info, s.id, outdir)};
  }

  std::pair<std::vector<std::int64_t>, json> from_keys(const Slide& s, const std::string& outdir) {
    std::vector<std::int64_t> coords;
    coords.reserve(2 * s.rows.size());
    for (const auto row : s.rows) {
      const auto xy = detail::parse_xy_key(store_.key(row));
      if (!xy)
        throw InputError(store_.dir() + "/keys.txt: line " + std::to_string(row + 1) + ": key '" +
                         std::string(store_.key(row)) +
                         "' has no coordinates and features.json names no tile store: give the "
                         "tile store the features came from with --tiles STORE");
      coords.push_back(xy->first);
      coords.push_back(xy->second);
    }
    json attrs = imported_.value(s.id, json::object()).value("coords_attrs", json::object());
    attrs["name"] = s.id;
    if (attrs.contains("savetodir")) attrs["savetodir"] = outdir;
    if (attrs.contains("save_path")) attrs["save_path"] = outdir;
    return {std::move(coords), attrs};
  }

  const io::FeatureStore& store_;
  std::optional<io::TileStore> tiles_;
  std::string label_;
  json imported_ = json::object();
  std::uint64_t no_mpp_ = 0;
};

// The journal of a resumable export: its first line the fingerprint, then one slide id per
// published file. A torn last line (a kill mid-write) is ignored.
class Journal {
 public:
  Journal(const std::string& dir, const json& fingerprint) : path_(util::join_path(dir, kJournal)) {
    const std::string first = fingerprint.dump();
    if (util::exists(path_)) {
      const std::string text = util::read_file(path_);
      const auto eol = text.find('\n');
      if (eol == std::string::npos || text.substr(0, eol) != first)
        throw UsageError(dir +
                         ": holds an export of another feature store, tile store, format or "
                         "dtype (" +
                         path_ +
                         "); export into another directory, or replace it with --overwrite");
      std::size_t at = eol + 1;
      for (auto next = text.find('\n', at); next != std::string::npos;
           at = next + 1, next = text.find('\n', at))
        done_.insert(text.substr(at, next - at));
    }
    fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd_ < 0) throw ResourceError(path_ + ": cannot open: " + std::strerror(errno));
    if (done_.empty() && ::lseek(fd_, 0, SEEK_END) == 0) append(first);
  }
  ~Journal() { ::close(fd_); }
  Journal(const Journal&) = delete;
  Journal& operator=(const Journal&) = delete;

  bool done(const std::string& slide) const { return done_.count(slide) > 0; }
  void append(const std::string& line) {
    const std::string text = line + "\n";
    if (::write(fd_, text.data(), text.size()) != static_cast<ssize_t>(text.size()) ||
        ::fdatasync(fd_) != 0)
      throw ResourceError(path_ + ": cannot write: " + std::strerror(errno));
  }

 private:
  std::string path_;
  int fd_ = -1;
  std::unordered_set<std::string> done_;
};

// One block of a slide's rows in the output dtype, converted as numpy's astype would.
void gather_block(const io::FeatureStore& store, const std::uint64_t* rows, std::size_t n,
                  io::DType out, std::vector<float>& f32, std::vector<std::uint16_t>& f16) {
  const std::uint64_t dims = store.dims();
  if (out == io::DType::float16 && store.dtype() == io::DType::float16) {
    f16.resize(n * dims);  // copied, not widened and rounded again: the bits stay
    const auto* base = static_cast<const std::uint8_t*>(store.data());
    for (std::size_t i = 0; i < n; ++i)
      std::memcpy(&f16[i * dims], base + rows[i] * store.row_bytes(), store.row_bytes());
    return;
  }
  f32.resize(n * dims);
  store.gather_f32(rows, n, f32.data());
  if (out == io::DType::float16) {
    f16.resize(n * dims);
    io::floats_to_halves(f32.data(), f16.data(), f32.size());
  }
}

// CLAM's h5_files/ hold int32 coords: refused rather than wrapped beyond its range.
void check_coords_fit(const std::vector<std::int64_t>& coords, io::H5Element element,
                      const std::string& path) {
  if (element != io::H5Element::int32) return;
  for (const auto v : coords)
    if (v < INT32_MIN || v > INT32_MAX)
      throw InputError(path + ": a coordinate, " + std::to_string(v) +
                       ", does not fit the int32 'coords' CLAM writes; use --layout flat or "
                       "trident (int64)");
}

void write_h5(const std::string& path, const io::FeatureStore& store, const Slide& s,
              io::DType dtype, const std::vector<std::int64_t>& coords,
              const detail::LayoutFile& spec) {
  auto file = io::H5File::create(path);
  if (spec.features) {
    const bool half = dtype == io::DType::float16;
    const auto element = half ? io::H5Element::float16 : io::H5Element::float32;
    file.create_dataset("features", element, s.rows.size(), store.dims(), spec.chunk_rows);
    std::vector<float> f32;
    std::vector<std::uint16_t> f16;
    for (std::uint64_t at = 0; at < s.rows.size(); at += kBlockRows) {
      const std::size_t n = std::min<std::uint64_t>(kBlockRows, s.rows.size() - at);
      gather_block(store, &s.rows[at], n, dtype, f32, f16);
      file.write_rows("features", at, n, element,
                      half ? static_cast<const void*>(f16.data()) : f32.data());
    }
    file.set_attributes("features", spec.features_attrs);
  }
  if (spec.coords) {  // a slide embedding (extract --slide-encoder) has none
    check_coords_fit(coords, spec.coords_element, path);
    file.create_dataset("coords", spec.coords_element, s.rows.size(), 2, spec.chunk_rows);
    // In blocks too: HDF5 keeps two selections per chunk a write touches, and TRIDENT's
    // chunks are single rows.
    for (std::uint64_t at = 0; at < s.rows.size(); at += kBlockRows)
      file.write_rows("coords", at, std::min<std::uint64_t>(kBlockRows, s.rows.size() - at),
                      io::H5Element::int64, &coords[2 * at]);
    file.set_attributes("coords", spec.coords_attrs);
  }
  file.close();
}

std::string encode_pt(const io::FeatureStore& store, const Slide& s, io::DType dtype,
                      const ExportH5Job& job) {
  std::vector<float> f32;
  std::vector<std::uint16_t> f16;
  gather_block(store, s.rows.data(), s.rows.size(), dtype, f32, f16);
  const bool half = dtype == io::DType::float16;
  return job.encode_pt(half ? static_cast<const void*>(f16.data()) : f32.data(), s.rows.size(),
                       store.dims(), dtype);
}

void check_job(const ExportH5Job& job) {
  util::check_options(export_h5_options(), job);
  if (job.format == ExportFormat::pt && job.layout != ExportLayout::flat)
    throw UsageError(
        std::string("--format pt is for --layout flat (--layout ") +
        util::name_of(kExportLayouts, job.layout) +
        (job.layout == ExportLayout::clam ? " writes pt_files/ itself)" : " writes .h5 files)"));
  if ((job.format == ExportFormat::pt || job.layout == ExportLayout::clam) && !job.encode_pt)
    throw ResourceError(
        std::string(job.layout == ExportLayout::clam ? "--layout clam" : "--format pt") +
        " needs LibTorch, which this program could not load");
}

// The export's settings: what it writes, and the journal's first line.
struct Settings {
  io::DType dtype;
  std::string encoder;
  bool per_slide = false;  // a store of slide embeddings
  json fingerprint;
};

Settings settings_of(const ExportH5Job& job, const io::FeatureStore& store,
                     const Geometry& geometry) {
  Settings set;
  set.dtype = job.dtype                          ? *job.dtype
              : job.layout == ExportLayout::clam ? io::DType::float32
                                                 : store.dtype();
  if (job.layout == ExportLayout::clam && set.dtype == io::DType::float16)
    log::warn(
        "--layout clam --dtype f16: CLAM trains in float32 and cannot read these files "
        "as they are");
  set.encoder = detail::encoder_name(store);
  set.per_slide = detail::slide_level(store);
  if (set.per_slide && job.layout != ExportLayout::flat)
    throw UsageError(store.dir() +
                     ": a store of slide embeddings (extract --slide-encoder) "
                     "has no patches for --layout " +
                     std::string(util::name_of(kExportLayouts, job.layout)) +
                     "; export it with --layout flat");
  // The manifest by its CRC: an imported store's holds every slide's attributes.
  const std::string manifest = store.manifest().dump();
  set.fingerprint = {{"features", util::absolute_path(job.features)},
                     {"manifest_crc32c", io::crc32c(manifest.data(), manifest.size())},
                     {"manifest_bytes", manifest.size()},
                     {"coordinates", geometry.label()},
                     {"format", util::name_of(kExportFormats, job.format)},
                     {"dtype", util::name_of(kInteropDTypes, set.dtype)}};
  if (job.layout != ExportLayout::flat)  // flat journals of earlier versions stay valid
    set.fingerprint["layout"] = util::name_of(kExportLayouts, job.layout);
  return set;
}

// Writes every file of one slide, each aside and renamed into place; `dirs` are the
// directories made (and cleared of a killed run's partial files) so far.
void write_slide(const ExportH5Job& job, const io::FeatureStore& store, const Slide& s,
                 const Settings& set, const std::vector<std::int64_t>& coords,
                 const std::vector<detail::LayoutFile>& files,
                 std::unordered_set<std::string>& dirs) {
  for (const auto& spec : files) {
    const std::string path = util::join_path(job.output, spec.path);
    if (const std::string dir = util::parent_directory(path); dirs.insert(dir).second) {
      util::make_directories(dir);
      util::remove_stale_partials(dir);
    }
    if (spec.pt) {
      util::write_file_atomic(path, encode_pt(store, s, set.dtype, job));
      continue;
    }
    const std::string temp = path + ".partial-" + std::to_string(::getpid());
    try {
      write_h5(temp, store, s, set.dtype, coords, spec);
      detail::publish(temp, path);
    } catch (...) {
      ::unlink(temp.c_str());
      throw;
    }
  }
}

bool all_exist(const std::string& output, const std::vector<detail::LayoutFile>& files) {
  for (const auto& f : files)
    if (!util::exists(util::join_path(output, f.path))) return false;
  return true;
}

}  // namespace

ExportH5Report export_h5(const ExportH5Job& job) {
  const auto start = std::chrono::steady_clock::now();
  check_job(job);
  const auto store = io::FeatureStore::open(job.features);
  util::make_directories(job.output);
  util::OutputLock lock(job.output, "mltool export");
  util::remove_stale_partials(job.output);
  const Plan plan = group_rows(store);
  Geometry geometry(store, job.tiles);
  const std::string outdir = util::absolute_path(job.output);
  const Settings set = settings_of(job, store, geometry);
  if (job.overwrite) util::remove_tree(util::join_path(job.output, kJournal));
  Journal journal(job.output, set.fingerprint);
  std::unordered_set<std::string> dirs;
  ExportH5Report r;
  r.output = outdir;
  r.format = util::name_of(kExportFormats, job.format);
  r.layout = util::name_of(kExportLayouts, job.layout);
  r.dtype = util::name_of(kInteropDTypes, set.dtype);
  r.encoder = set.encoder;
  r.slides = plan.slides.size();
  r.invalid_rows = plan.invalid;
  r.dims = store.dims();
  r.coordinates = set.per_slide ? "none" : geometry.label();
  for (const auto& s : plan.slides) {
    r.rows += s.rows.size();
    auto [coords, attrs] = set.per_slide ? std::make_pair(std::vector<std::int64_t>(), json())
                                         : geometry.slide(s, outdir);
    const auto files =
        detail::layout_files(job.layout, job.format, s.id, attrs, set.encoder, outdir);
    if (journal.done(s.id) && all_exist(job.output, files)) {
      ++r.resumed;
    } else {
      write_slide(job, store, s, set, coords, files, dirs);
      journal.append(s.id);
      ++r.written;
    }
    if (job.on_slide) job.on_slide(s.id, r.written + r.resumed, r.slides);
  }
  r.no_mpp = geometry.no_mpp();
  if (r.no_mpp)
    log::warn(std::to_string(r.no_mpp) +
              " slides have no µm/px: their magnification attributes take level 0 for 40x "
              "(docs/export.md); give their µm/px to mltool tile (--slide-mpp, "
              "--slide-mpp-table, --mpp-from-power) for true ones");
  r.status = r.written == 0 && r.slides > 0 ? "skipped" : "exported";
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return r;
}

}  // namespace mltool::features
