#include "mltool/slide/tile_pixels.hpp"

#include <algorithm>
#include <cstring>
#include <exception>
#include <list>
#include <map>
#include <mutex>
#include <optional>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "mltool/io/jpeg_tiff.hpp"
#include "mltool/slide/image.hpp"
#include "mltool/slide/openslide.hpp"
#include "mltool/slide/region_reader.hpp"
#include "mltool/util/file.hpp"
#include "mltool/util/log.hpp"
#include "mltool/util/parallel.hpp"
#include "own_jpeg_tiles.hpp"

namespace mltool::slide {

// One slide of a coordinates store, open: how its tiles are read and where each one is.
struct OpenSlideTiles {
  explicit OpenSlideTiles(Slide opened) : slide(std::move(opened)) {}
  Slide slide;
  int level = 0;
  std::int64_t read_size = 0;
  std::unique_ptr<RegionReader> reader;  // null for a flat image: Slide::read_rgb reads it
  std::unordered_map<std::string, std::pair<std::int64_t, std::int64_t>> at;  // key → x, y
  // The level's own JPEG tiles, where a tile is exactly one of them (read_size == the tile
  // size): decoding one alone skips the reader's region machinery. Used once the first such
  // tile decodes to exactly what the reader gives (checked), so pixels never depend on it.
  std::unique_ptr<OwnJpegTiles> own;
  mutable std::once_flag own_checked;
  mutable bool own_agrees = false;

  void read(std::int64_t x, std::int64_t y, std::uint8_t* rgb) const {
    if (own && own_tile(x, y, rgb)) return;
    read_region(x, y, rgb);
  }

  // Tile (x, y)'s own JPEG stream, where tiles are read from them: what own_tile decodes.
  std::optional<std::string> own_jpeg(std::int64_t x, std::int64_t y) const {
    if (!own) return std::nullopt;
    auto jpeg = own->jpeg_at(x, y);
    if (!jpeg || !own_agree(x, y, *jpeg)) return std::nullopt;
    return jpeg;
  }

 private:
  void read_region(std::int64_t x, std::int64_t y, std::uint8_t* rgb) const {
    if (reader) return reader->read_rgb(x, y, read_size, read_size, rgb);
    slide.read_rgb(x, y, level, read_size, read_size, rgb);
  }
  // Whether the own tiles decode to exactly what the reader reads: found once, on the first
  // one asked for (tile (x, y), `jpeg`).
  bool own_agree(std::int64_t x, std::int64_t y, const std::string& jpeg) const {
    std::call_once(own_checked, [&] {
      io::RgbImage image;
      io::decode_image(jpeg.data(), jpeg.size(), image, slide.path() + ": its own JPEG tile");
      std::vector<std::uint8_t> theirs(static_cast<std::size_t>(read_size * read_size * 3));
      read_region(x, y, theirs.data());
      own_agrees = image.width == read_size && image.height == read_size &&
                   std::equal(theirs.begin(), theirs.end(), image.pixels.begin());
      log::debug(slide.path() + (own_agrees ? ": tiles decoded from its own JPEG tiles"
                                            : ": its own JPEG tiles decode otherwise than the "
                                              "reader reads them; tiles are read as regions"));
    });
    return own_agrees;
  }
  // Tile (x, y) decoded from the slide's own JPEG tile, if it is one and they agree.
  bool own_tile(std::int64_t x, std::int64_t y, std::uint8_t* rgb) const {
    const auto jpeg = own_jpeg(x, y);
    if (!jpeg) return false;
    thread_local io::RgbImage image;
    io::decode_image(jpeg->data(), jpeg->size(), image, slide.path() + ": its own JPEG tile");
    if (image.width != read_size || image.height != read_size) return false;
    std::memcpy(rgb, image.pixels.data(), static_cast<std::size_t>(read_size * read_size * 3));
    return true;
  }
};

// The slides of a coordinates store, opened when a tile of theirs is read; the last few stay
// open (tiles are read in key order, slide after slide).
class TilePixels::Slides {
 public:
  Slides(const io::TileStore& store, const io::DicomwebOptions& web) : store_(store), web_(web) {}

  std::shared_ptr<const OpenSlideTiles> get(const std::string& id) {
    std::lock_guard lock(mutex_);
    for (auto it = open_.begin(); it != open_.end(); ++it)
      if (it->first == id) {
        open_.splice(open_.begin(), open_, it);
        return open_.front().second;
      }
    // A slide that failed to open fails each of its tiles with that error, not a new try.
    if (const auto failed = failed_.find(id); failed != failed_.end())
      std::rethrow_exception(failed->second);
    std::shared_ptr<const OpenSlideTiles> opened;
    try {
      opened = open(id);
    } catch (const Error&) {
      failed_.emplace(id, std::current_exception());
      throw;
    }
    open_.emplace_front(id, opened);
    if (open_.size() > kKeepOpen) open_.pop_back();
    return opened;
  }

 private:
  static constexpr std::size_t kKeepOpen = 16;

  std::shared_ptr<const OpenSlideTiles> open(const std::string& id) const {
    const std::string where = store_.path() + ": slide '" + id + "'";
    const auto record = store_.record("slides", id);
    const auto tiles = store_.record("tiles", id);
    if (!record || !tiles) throw FormatError(where + ": no slides or tiles record");
    const std::string path = record->value("path", "");
    if (!io::is_dicomweb_url(path) && !util::exists(path))
      throw InputError(where + ": its slide file " + path +
                       " is not there; a coordinates store (no pixels) reads its tiles from the "
                       "slide files it was made from: put the file back at that path");
    Slide slide = [&] {
      try {
        return Slide::open(path, web_);
      } catch (const io::DicomwebAuthError& e) {  // the store and the slide it came from
        throw io::DicomwebAuthError(where + ": " + e.what());
      }
    }();
    const std::string hash = slide.property("openslide.quickhash-1").value_or("");
    if (hash != record->value("quickhash", ""))
      throw InputError(where + ": " + path +
                       " is not the slide the coordinates were made from (OpenSlide quickhash "
                       "differs): restore that file");
    auto out = std::make_shared<OpenSlideTiles>(std::move(slide));
    out->level = record->at("level").get<int>();
    out->read_size = record->at("read_size").get<std::int64_t>();
    if (!out->slide.flat_info()) {
      out->reader =
          make_region_reader(out->slide, out->level,
                             record->value("reader", "") == "openslide" ? ReaderChoice::openslide
                                                                        : ReaderChoice::automatic);
      std::string why_not;  // no own tiles: every tile is read as a region
      if (out->read_size == record->value("tile_size", std::int64_t{0}) &&
          record->value("overlap", 0) == 0)
        out->own =
            OwnJpegTiles::open(out->slide, out->level, static_cast<int>(out->read_size), why_not);
    }
    const auto& rows = tiles->at("row");
    const auto& cols = tiles->at("col");
    const auto& xs = tiles->at("x");
    const auto& ys = tiles->at("y");
    for (std::size_t i = 0; i < rows.size(); ++i)
      out->at.emplace(io::tile_key(id, rows[i].get<std::int64_t>(), cols[i].get<std::int64_t>()),
                      std::make_pair(xs[i].get<std::int64_t>(), ys[i].get<std::int64_t>()));
    return out;
  }

  const io::TileStore& store_;
  io::DicomwebOptions web_;
  std::mutex mutex_;
  std::list<std::pair<std::string, std::shared_ptr<const OpenSlideTiles>>> open_;
  std::map<std::string, std::exception_ptr> failed_;
};

TilePixels::TilePixels(const io::TileStore& store, const io::DicomwebOptions& web) : store_(store) {
  const auto settings = store.settings();
  if (!settings)
    throw InputError(at_file(store.path(),
                             "not a tile store, or no slide is complete in it (no "
                             "meta 'store' record)"));
  tile_ = settings->tile_size;
  jpeg_tiles_ = settings->pixels && settings->encoding == io::TileEncoding::jpeg;
  if (!settings->pixels) slides_ = std::make_unique<Slides>(store, web);
}

TilePixels::~TilePixels() = default;

void TilePixels::read(std::size_t n, const std::function<const std::string&(std::size_t)>& key,
                      int threads, std::uint8_t* out,
                      const std::function<void(std::size_t, const Error&)>& failed) const {
  const std::size_t tile_bytes = static_cast<std::size_t>(tile_) * tile_ * 3;
  // A store's tiles are found on this thread (one read transaction is used by one thread at
  // a time); the values point into the map and decode in parallel.
  std::optional<io::TileStore::Snapshot> snapshot;
  std::vector<std::optional<std::string_view>> values;
  if (!slides_) {
    snapshot.emplace(store_.snapshot());
    values.resize(n);
    for (std::size_t i = 0; i < n; ++i) values[i] = snapshot->find(key(i));
  }
  util::parallel_for(n, threads, [&](std::size_t i) {
    std::uint8_t* slot = out + i * tile_bytes;
    try {
      if (!slides_) {
        thread_local io::RgbImage image;
        store_.decode_tile(key(i), values[i], tile_, image);
        std::memcpy(slot, image.pixels.data(), tile_bytes);
        return;
      }
      const std::string& k = key(i);
      const auto slide = slides_->get(std::string(io::slide_of_key(k)));
      const auto at = slide->at.find(k);
      if (at == slide->at.end())
        throw FormatError(store_.path() + ": tile '" + k + "': not in its slide's tiles record");
      const auto [x, y] = at->second;
      if (slide->read_size == tile_) return slide->read(x, y, slot);
      thread_local std::vector<std::uint8_t> region;
      region.resize(static_cast<std::size_t>(slide->read_size * slide->read_size * 3));
      slide->read(x, y, region.data());
      const auto size = static_cast<int>(slide->read_size);
      const io::RgbImage resized = resize(region.data(), size, size, tile_, tile_);
      std::memcpy(slot, resized.pixels.data(), tile_bytes);
    } catch (const Error& e) {
      std::memset(slot, 0, tile_bytes);
      failed(i, e);
    }
  });
}

bool TilePixels::may_be_jpeg() const { return slides_ || jpeg_tiles_; }

namespace {

// `jpeg` when it is a JPEG stream whose colour every decoder reads alike (YCbCr), else empty:
// no JPEG, or a broken one, is left to read(), which says what is wrong with it.
std::string if_ycbcr_jpeg(std::string_view jpeg) {
  static const std::string what = "a tile";  // unused: the error is read()'s to report
  try {
    if (io::implied_colour(jpeg, what) != io::JpegColour::ycbcr) return {};
  } catch (const Error&) {
    return {};
  }
  return std::string(jpeg);
}

}  // namespace

void TilePixels::read_jpeg(std::size_t n, const std::function<const std::string&(std::size_t)>& key,
                           int threads, std::vector<std::string>& out) const {
  out.assign(n, std::string());
  if (!may_be_jpeg()) return;
  if (!slides_) {
    const io::TileStore::Snapshot snapshot = store_.snapshot();
    for (std::size_t i = 0; i < n; ++i)
      if (const auto value = snapshot.find(key(i))) out[i] = if_ycbcr_jpeg(*value);
    return;
  }
  util::parallel_for(n, threads, [&](std::size_t i) {
    try {
      const std::string& k = key(i);
      const auto slide = slides_->get(std::string(io::slide_of_key(k)));
      const auto at = slide->at.find(k);
      if (at == slide->at.end() || slide->read_size != tile_) return;
      if (const auto jpeg = slide->own_jpeg(at->second.first, at->second.second))
        out[i] = if_ycbcr_jpeg(*jpeg);
    } catch (const Error&) {
      // read() reads this tile again and reports the error
    }
  });
}

io::TilePixelOpener open_tile_pixels(const io::DicomwebOptions& web) {
  return [web](const io::TileStore& store) -> std::unique_ptr<io::TilePixelReader> {
    return std::make_unique<TilePixels>(store, web);
  };
}

}  // namespace mltool::slide
