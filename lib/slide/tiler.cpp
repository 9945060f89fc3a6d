#include "mltool/slide/tiler.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>

#include "mltool/slide/geometry.hpp"
#include "mltool/slide/image.hpp"
#include "mltool/slide/openslide.hpp"
#include "mltool/slide/qc.hpp"
#include "mltool/slide/region_reader.hpp"
#include "mltool/slide/tissue.hpp"
#include "mltool/util/bounded_queue.hpp"
#include "mltool/util/error.hpp"
#include "mltool/util/file.hpp"
#include "mltool/util/log.hpp"
#include "mltool/util/parallel.hpp"
#include "own_jpeg_tiles.hpp"
#include "slide_mpp.hpp"
#include "thumbnail.hpp"

namespace mltool::slide {
namespace {

using Clock = std::chrono::steady_clock;
using json = nlohmann::json;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

struct KeptTile {
  std::int64_t row, col, x, y;
  double tissue;
};

// Each tile covers about 8 × 8 thumbnail pixels, and no thumbnail side exceeds 4096.
Thumbnail make_thumbnail(const Slide& slide, double tile_level0) {
  const Level& l0 = slide.geometry().levels[0];
  return slide_thumbnail(
      slide,
      std::max(tile_level0 / 8.0, static_cast<double>(std::max(l0.width, l0.height)) / 4096.0));
}

json levels_json(const SlideGeometry& g) {
  json out = json::array();
  for (const auto& l : g.levels)
    out.push_back({{"width", l.width}, {"height", l.height}, {"downsample", l.downsample}});
  return out;
}

json kept_json(const std::vector<KeptTile>& kept) {
  json row = json::array(), col = json::array(), x = json::array(), y = json::array(),
       tissue = json::array();
  for (const auto& k : kept) {
    row.push_back(k.row), col.push_back(k.col), x.push_back(k.x), y.push_back(k.y);
    tissue.push_back(std::round(k.tissue * 1e4) / 1e4);
  }
  return {{"row", row}, {"col", col}, {"x", x}, {"y", y}, {"tissue", tissue}};
}

// Reads, resamples and encodes `kept` on worker threads (or, with `passthrough`, takes the
// tiles that are the slide's own JPEG tiles as they are stored); the calling thread commits
// them. The first error stops every thread.
class TileWriter {
 public:
  TileWriter(RegionReader& reader, const ReadPlan& plan, const TileJob& job,
             const std::vector<KeptTile>& kept, const OwnJpegTiles* passthrough)
      : reader_(reader),
        job_(job),
        kept_(kept),
        passthrough_(passthrough),
        read_(plan.read_size_level),
        codec_(io::encoding_info(job.settings.encoding)),
        workers_(worker_count(job, kept)),
        queue_(static_cast<std::size_t>(worker_count(job, kept)) * 4),
        active_(worker_count(job, kept)),
        ordered_(reader.in_order()) {}

  // Returns normally only when every tile is in a (committed or pending) batch, and then the
  // number of tiles that passed through.
  std::int64_t run(const std::string& id, io::TileStore::SlideWriter& batch) {
    std::vector<std::thread> pool;
    for (int t = 0; t < workers_; ++t) pool.emplace_back([this] { work(); });
    try {
      commit(id, batch);
    } catch (...) {
      fail(std::current_exception());
    }
    for (auto& t : pool) t.join();
    if (error_) std::rethrow_exception(error_);
    return passed_;
  }

 private:
  struct Encoded {
    std::size_t index;
    std::string bytes;
  };

  static int worker_count(const TileJob& job, const std::vector<KeptTile>& kept) {
    return std::max(1,
                    std::min<int>(util::thread_count(job.threads), static_cast<int>(kept.size())));
  }

  void fail(std::exception_ptr e) {
    {
      std::lock_guard lock(error_mutex_);
      if (!error_) error_ = e;
    }
    stop_ = true;
    queue_.close();
    { std::lock_guard lock(turn_mutex_); }
    turn_changed_.notify_all();
  }

  // A reader that decodes top to bottom (a flat image) is read in the tiles' order: tile i
  // waits for tile i - 1's read; resampling and encoding still run side by side.
  void read_tile(std::size_t i, std::uint8_t* rgb) {
    const KeptTile& k = kept_[i];
    if (!ordered_) return reader_.read_rgb(k.x, k.y, read_, read_, rgb);
    {
      std::unique_lock lock(turn_mutex_);
      turn_changed_.wait(lock, [&] { return turn_ == i || stop_; });
      if (stop_) return;
    }
    reader_.read_rgb(k.x, k.y, read_, read_, rgb);
    {
      std::lock_guard lock(turn_mutex_);
      turn_ = i + 1;
    }
    turn_changed_.notify_all();
  }

  // Tile i read, resampled to the tile size and encoded; nothing when stopped meanwhile.
  std::optional<std::string> encode(std::size_t i, std::vector<std::uint8_t>& rgb) {
    const int tile = job_.settings.tile_size;
    read_tile(i, rgb.data());
    if (stop_) return std::nullopt;
    const std::uint8_t* pixels = rgb.data();
    io::RgbImage resized;
    if (read_ != tile) {
      resized = resize(pixels, static_cast<int>(read_), static_cast<int>(read_), tile, tile);
      pixels = resized.pixels.data();
    }
    return codec_.encode(pixels, tile, tile, job_.settings.quality);
  }

  void work() {
    try {
      std::vector<std::uint8_t> rgb(static_cast<std::size_t>(read_) * read_ * 3);
      for (std::size_t i; !stop_ && (i = next_++) < kept_.size();) {
        std::optional<std::string> bytes;
        if (passthrough_) bytes = passthrough_->jpeg_at(kept_[i].x, kept_[i].y);
        if (bytes) {
          ++passed_;
        } else {
          bytes = encode(i, rgb);
          if (!bytes) break;
        }
        if (!queue_.push({i, std::move(*bytes)})) break;
      }
    } catch (...) {
      fail(std::current_exception());
    }
    if (--active_ == 0) queue_.close();
  }

  // On the calling thread: each encoded tile into the slide's batch, with a progress line
  // every 10 s.
  void commit(const std::string& id, io::TileStore::SlideWriter& batch) {
    const auto start = Clock::now();
    auto last_report = start;
    std::size_t written = 0;
    while (auto item = queue_.pop()) {
      if (stop_) continue;  // a worker failed: drain, the slide is discarded
      const KeptTile& k = kept_[item->index];
      batch.put_tile(io::tile_key(id, k.row, k.col), item->bytes);
      if (++written % 256 == 0 && seconds_since(last_report) >= 10) {
        last_report = Clock::now();
        log::info(id + ": " + std::to_string(written) + "/" + std::to_string(kept_.size()) +
                  " tiles, " + std::to_string(static_cast<int>(written / seconds_since(start))) +
                  " tiles/s");
      }
    }
  }

  RegionReader& reader_;
  const TileJob& job_;
  const std::vector<KeptTile>& kept_;
  const OwnJpegTiles* passthrough_;
  const std::int64_t read_;
  const io::EncodingInfo& codec_;
  const int workers_;
  util::BoundedQueue<Encoded> queue_;
  std::atomic<std::size_t> next_{0};
  std::atomic<bool> stop_{false};
  std::atomic<int> active_;
  std::atomic<std::int64_t> passed_{0};
  std::mutex error_mutex_;
  std::exception_ptr error_;
  std::mutex turn_mutex_;  // the next tile to read, for an in-order reader
  std::condition_variable turn_changed_;
  std::size_t turn_ = 0;
  const bool ordered_;
};

std::int64_t write_tiles(RegionReader& reader, const ReadPlan& plan, const TileJob& job,
                         const std::string& id, const std::vector<KeptTile>& kept,
                         const OwnJpegTiles* passthrough, io::TileStore::SlideWriter& batch) {
  return TileWriter(reader, plan, job, kept, passthrough).run(id, batch);
}

// What identifies a slide in the store.
struct Identity {
  std::string id;
  std::string quickhash;  // OpenSlide's; "" when the format has none
  std::string abs_path;
};

// Whether the store already holds this slide complete (then `report` says so, but for its
// seconds). Another slide under the same id is refused.
bool already_tiled(const io::TileStore& store, const std::string& path, const Identity& who,
                   SlideReport& report) {
  const auto existing = store.record("slides", who.id);
  if (!existing) return false;
  const std::string other_hash = existing->value("quickhash", "");
  const std::string other_path = existing->value("path", "");
  const bool web = io::is_dicomweb_url(who.abs_path) && io::is_dicomweb_url(other_path);
  if (other_hash != who.quickhash || (who.quickhash.empty() && other_path != who.abs_path && !web))
    throw InputError(at_file(path, "slide id '" + who.id + "' is already used in " + store.path() +
                                       " by " + other_path +
                                       ", a different slide (OpenSlide quickhash differs); "
                                       "rename one of the files"));
  const auto done = store.record("done", who.id);
  if (!done) return false;
  report.status = SlideStatus::skipped;
  report.tiles = done->value("tiles", std::int64_t{0});
  report.grid_tiles = existing->at("grid").value("cols", std::int64_t{0}) *
                      existing->at("grid").value("rows", std::int64_t{0});
  if (done->contains("tissue_fraction") && done->at("tissue_fraction").is_number())
    report.tissue_fraction = done->at("tissue_fraction").get<double>();
  report.mpp_source = existing->value("mpp_source", "");  // "" in stores of earlier versions
  report.reader = existing->value("reader", done->value("reader", ""));
  report.reader_version = existing->value("reader_version", "");
  if (existing->contains("passthrough") && existing->at("passthrough").is_object())
    report.passthrough = existing->at("passthrough").value("tiles", std::int64_t{0});
  if (existing->contains("mpp") && existing->at("mpp").is_number())
    report.mpp = existing->at("mpp").get<double>();
  return true;
}

// The tiles to keep, and what chose them: the thumbnail (for tissue or QC) and tissue mask.
struct Selection {
  std::optional<Thumbnail> thumb;
  std::optional<Mask> mask;
  std::optional<double> tissue_fraction;  // otsu only
  std::vector<KeptTile> kept;
};

// Tissue on a thumbnail; tiles kept by their tissue fraction.
Selection select_tiles(const Slide& slide, const ReadPlan& plan, const TileGrid& grid,
                       const TileJob& job) {
  const auto& s = job.settings;
  const Level& level0 = slide.geometry().levels[0];
  Selection out;
  if (s.tissue == io::TissueDetection::otsu || !job.qc_dir.empty())
    out.thumb = make_thumbnail(slide, grid.size_level0);
  if (s.tissue != io::TissueDetection::otsu) {
    for (const TileRect& t : tile_grid(level0, plan, s.tile_size, s.overlap))
      out.kept.push_back({t.row, t.col, t.x, t.y, 1.0});
    return out;
  }
  const Thumbnail& thumb = *out.thumb;
  TissueOptions options;
  const double tile_area = (grid.size_level0 / thumb.dx) * (grid.size_level0 / thumb.dy);
  options.min_object_px = std::max<std::int64_t>(4, std::llround(tile_area / 4));
  options.max_hole_px = options.min_object_px;
  if (s.artifacts == io::ArtifactFilter::keep) options.artifacts.reset();
  out.mask = tissue_mask(thumb.image.pixels.data(), thumb.image.width, thumb.image.height, options);
  std::int64_t tissue_px = 0;
  for (auto v : out.mask->data) tissue_px += v != 0;
  out.tissue_fraction =
      out.mask->data.empty() ? 0.0 : static_cast<double>(tissue_px) / out.mask->data.size();
  const IntegralMask integral(*out.mask);
  for (const TileRect& t : tile_grid(level0, plan, s.tile_size, s.overlap)) {
    const double f =
        integral.fraction(t.x / thumb.dx, t.y / thumb.dy, (t.x + grid.size_level0) / thumb.dx,
                          (t.y + grid.size_level0) / thumb.dy);
    if (f >= s.min_tissue - 1e-9) out.kept.push_back({t.row, t.col, t.x, t.y, f});
  }
  return out;
}

// The level-0 positions of `kept`, in order (OwnJpegTiles::will_read).
std::vector<std::pair<std::int64_t, std::int64_t>> positions(const std::vector<KeptTile>& kept) {
  std::vector<std::pair<std::int64_t, std::int64_t>> out;
  out.reserve(kept.size());
  for (const auto& k : kept) out.emplace_back(k.x, k.y);
  return out;
}

// The store's "slides" record: the slide, how it is read and tiled, and the thumbnail.
json slide_json(const Slide& slide, const Identity& who, const ReadPlan& plan, const TileGrid& grid,
                const io::TileSettings& s, const Selection& selection) {
  const SlideGeometry& geometry = slide.geometry();
  const auto& thumb = selection.thumb;
  const auto& mask = selection.mask;
  return {
      {"id", who.id},
      {"path", who.abs_path},
      {"vendor", slide.vendor()},
      {"quickhash", who.quickhash},
      {"width", geometry.levels[0].width},
      {"height", geometry.levels[0].height},
      {"levels", levels_json(geometry)},
      {"mpp", plan.mpp ? json(*plan.mpp) : json(nullptr)},
      {"mpp_source", plan.mpp_source},
      {"level", plan.level},
      {"level_downsample", plan.level_downsample},
      {"target_downsample", plan.target_downsample},
      {"read_size", plan.read_size_level},
      {"tile_size", s.tile_size},
      {"overlap", s.overlap},
      {"stride_level0", grid.stride_level0},
      {"size_level0", grid.size_level0},
      {"grid", {{"cols", grid.cols}, {"rows", grid.rows}}},
      {"thumbnail", thumb ? json{{"width", thumb->image.width},
                                 {"height", thumb->image.height},
                                 {"level", thumb->level},
                                 {"downsample", (thumb->dx + thumb->dy) / 2}}
                          : json(nullptr)},
      {"tissue_threshold", mask ? json(mask->threshold) : json(nullptr)},
  };
}

// The slide's own JPEG tiles that may pass through, or null (`why` says why not). The first
// kept tile that would pass through is decoded (libjpeg-turbo) and compared with OpenSlide's
// read of it: any difference sends the slide the usual way, with a warning.
std::unique_ptr<OwnJpegTiles> passthrough_source(const Slide& slide, const ReadPlan& plan,
                                                 const TileJob& job,
                                                 const std::vector<KeptTile>& kept,
                                                 std::string& why) {
  const auto& s = job.settings;
  if (job.passthrough == Passthrough::never)
    why = "--passthrough never";
  else if (s.encoding != io::TileEncoding::jpeg)
    why = "tiles are encoded as --format png";
  else if (s.overlap != 0)
    why = "tiles overlap (--overlap)";
  else if (plan.read_size_level != s.tile_size)
    why = "tiles are resampled from the level";
  else if (slide.flat_info())
    why = "a flat image";
  if (!why.empty()) return nullptr;
  auto tiles = OwnJpegTiles::open(slide, plan.level, s.tile_size, why);
  if (!tiles) return nullptr;
  const int n = s.tile_size;
  for (const KeptTile& k : kept) {
    const auto jpeg = tiles->jpeg_at(k.x, k.y);
    if (!jpeg) continue;
    io::RgbImage ours;
    std::vector<std::uint8_t> theirs(static_cast<std::size_t>(n) * n * 3);
    try {
      io::decode_image(jpeg->data(), jpeg->size(), ours, slide.path() + ": a passed-through tile");
    } catch (const Error& e) {
      why = e.what();
    }
    slide.read_rgb(k.x, k.y, plan.level, n, n, theirs.data());
    if (why.empty() && ours.pixels == theirs) return tiles;
    if (why.empty()) why = "the slide's JPEG tile decodes otherwise than OpenSlide reads it";
    log::warn(slide.path() + ": tile at (" + std::to_string(k.x) + ", " + std::to_string(k.y) +
              ") not passed through: " + why + "; tiles are decoded and encoded again");
    return nullptr;
  }
  why = "no kept tile is one whole tile of the level (TIFF tile or DICOM frame)";
  return nullptr;
}

// The store's "mask" record: the tissue mask tiles were kept by, for outlines (export).
std::string mask_record(const Mask& mask, const Thumbnail& thumb) {
  io::TissueMask record;
  record.mask.width = mask.width, record.mask.height = mask.height;
  record.mask.pixels.resize(mask.data.size());
  for (std::size_t i = 0; i < mask.data.size(); ++i) record.mask.pixels[i] = mask.data[i] ? 255 : 0;
  record.downsample_x = thumb.dx, record.downsample_y = thumb.dy;
  return record.to_record();
}

// The store's "done" record, written with the last tiles.
json done_json(const SlideReport& report) {
  return {
      {"tiles", report.tiles},
      {"tissue_fraction", report.tissue_fraction ? json(*report.tissue_fraction) : json(nullptr)},
      {"seconds", std::round(report.seconds * 1000) / 1000},
      {"reader", report.reader},
      {"passthrough", report.passthrough}};
}

// The QC picture <dir>/<id>.png (qc.hpp): the slide at --qc-size, its tissue outline, the
// kept tiles and a caption saying what chose them.
void write_qc(const Slide& slide, const TileJob& job, const ReadPlan& plan, const TileGrid& grid,
              const Selection& selection, const SlideReport& report) {
  const Level& l0 = slide.geometry().levels[0];
  const io::RgbImage image = read_qc_image(slide, job.qc_size);
  const double sx = static_cast<double>(image.width) / l0.width;
  const double sy = static_cast<double>(image.height) / l0.height;
  QcOverlay overlay;
  overlay.tissue = selection.mask ? &*selection.mask : nullptr;
  for (const auto& k : selection.kept)
    overlay.kept.push_back(
        {k.x * sx, k.y * sy, (k.x + grid.size_level0) * sx, (k.y + grid.size_level0) * sy});
  QcCaption c;
  c.id = report.id, c.width = l0.width, c.height = l0.height;
  c.mpp = plan.mpp, c.mpp_source = plan.mpp_source, c.target_mpp = job.settings.mpp;
  c.metadata_mpp = report.metadata_mpp;
  if (report.mpp_estimate) c.estimate = estimate_text(*report.mpp_estimate);
  c.level = plan.level, c.tile_size = job.settings.tile_size;
  c.tiles = static_cast<std::int64_t>(selection.kept.size()), c.grid_tiles = grid.count();
  if (selection.mask) c.tissue_threshold = selection.mask->threshold;
  c.tissue_fraction = selection.tissue_fraction, c.min_tissue = job.settings.min_tissue;
  c.reader = report.reader;
  overlay.caption = caption_lines(c);
  util::make_directories(job.qc_dir);
  io::write_png(util::join_path(job.qc_dir, report.id + ".png"), qc_picture(image, overlay));
}

}  // namespace

const char* to_string(SlideStatus status) {
  switch (status) {
    case SlideStatus::tiled: return "tiled";
    case SlideStatus::empty: return "empty";
    case SlideStatus::skipped: return "skipped";
    case SlideStatus::failed: return "failed";
  }
  return "?";
}

void validate(const TileJob& job) {
  util::check_options(tile_options(), job);
  util::check_options(tile_store_options(), job);
  const auto& s = job.settings;
  check_tile_size(s.tile_size, s.overlap);
  if (s.mpp.has_value() == s.level.has_value())
    throw UsageError("give exactly one of --mpp and --level");
}

SlideReport tile_slide(io::TileStore& store, const std::string& path, const TileJob& job) {
  const auto start = Clock::now();
  SlideReport report;
  report.path = path;
  report.id = io::slide_id_for(path);
  const std::string& id = report.id;
  const Slide slide = Slide::open(path, job.dicomweb);
  // A DICOMweb series is its URL (recorded) and its series UID (the id, the same on any server).
  const Identity who{id, slide.property("openslide.quickhash-1").value_or(""),
                     slide.dicomweb() ? path : util::absolute_path(path)};
  if (already_tiled(store, path, who, report)) {
    report.seconds = seconds_since(start);
    return report;
  }
  if (const auto removed = store.discard_incomplete(id))
    log::info(id + ": removed " + std::to_string(removed) + " tiles of an interrupted run");

  const auto& s = job.settings;
  SlideGeometry geometry = slide.geometry();
  const SlideMpp mpp = resolve_slide_mpp(slide, id, job, !job.qc_dir.empty());
  geometry.mpp_x = geometry.mpp_y = mpp.mpp;
  if (mpp.source == MppSource::power)
    log::warn(id + ": no usable µm/px metadata; " + util::number_text(*mpp.mpp) +
              " µm/px from its objective power (--mpp-from-power)");
  if (mpp.source == MppSource::content)
    log::warn(id + ": no usable µm/px metadata; " + estimate_text(*mpp.estimate) +
              " estimated from its tissue (--mpp-from-content)");
  report.mpp_estimate = mpp.estimate;
  report.metadata_mpp = slide_mpp(slide.geometry());
  ReadPlan plan = plan_read(geometry, s.mpp, s.level, s.tile_size, path);
  plan.mpp_source = to_string(mpp.source);
  report.mpp_source = plan.mpp_source;
  report.mpp = plan.mpp;
  const TileGrid grid = make_grid(geometry.levels[0], plan, s.tile_size, s.overlap);
  report.grid_tiles = grid.count();
  const Selection selection = select_tiles(slide, plan, grid, job);
  report.tissue_fraction = selection.tissue_fraction;

  json slide_record = slide_json(slide, who, plan, grid, s, selection);
  // The estimate is the store's only where the µm/px came from it (--mpp-from-content); one
  // made for the QC pictures or --check-mpp is not, so a slide's record is the same whatever
  // else was asked, and without its timing, which no two runs share.
  if (mpp.source == MppSource::content) {
    slide_record["mpp_estimate"] = to_json(*mpp.estimate);
    slide_record["mpp_estimate"].erase("seconds");
  }
  auto batch = store.write_slide(id, slide_record.dump(), job.commit_every);
  try {
    const auto reader = make_region_reader(slide, plan.level, job.reader);
    std::string why_not = "a coordinates store (no pixels)";
    std::unique_ptr<OwnJpegTiles> own;
    if (s.pixels) {  // a coordinates store keeps the records only (TilePixels reads the slide)
      why_not.clear();
      own = passthrough_source(slide, plan, job, selection.kept, why_not);
      if (own) own->will_read(positions(selection.kept));
      if (!selection.kept.empty())
        report.passthrough = write_tiles(*reader, plan, job, id, selection.kept, own.get(), batch);
    }
    slide_record["passthrough"] =
        own ? own->record(report.passthrough) : json{{"tiles", 0}, {"reason", why_not}};
    report.reader = reader->name();
    report.reader_version = reader->version();
    slide_record["reader"] = report.reader;
    slide_record["reader_version"] = report.reader_version;
    if (!job.qc_dir.empty()) write_qc(slide, job, plan, grid, selection, report);
    report.tiles = static_cast<std::int64_t>(selection.kept.size());
    report.seconds = seconds_since(start);
    const std::string tiles_text = kept_json(selection.kept).dump();
    const std::string done_text = done_json(report).dump();
    if (selection.mask) batch.put_record("mask", mask_record(*selection.mask, *selection.thumb));
    batch.commit(slide_record.dump(), tiles_text, done_text);
  } catch (...) {
    batch.drop();
    try {
      store.discard_incomplete(id);
    } catch (const std::exception& e) {
      log::warn(id + ": could not remove partial tiles: " + e.what());
    }
    throw;
  }
  report.status = selection.kept.empty() ? SlideStatus::empty : SlideStatus::tiled;
  return report;
}

}  // namespace mltool::slide
