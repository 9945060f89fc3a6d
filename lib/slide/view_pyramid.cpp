// A slide as DeepZoom tiles (slide/view.hpp): level L of a w × h slide is ceil(w / 2^(N-L))
// pixels wide (N the finest level), cut into tile_size squares named <col>_<row>.jpeg with no
// overlap, which Leaflet's CRS.Simple reads as its zoom levels. A level near one of the
// slide's own (at most 2 slide pixels per tile pixel) is read from it and resampled by
// libvips; a coarser one is made from the four tiles under each of its tiles, already written,
// so no read is larger than twice a tile's side whatever levels the slide has.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>

#include "mltool/io/image_codec.hpp"
#include "mltool/slide/image.hpp"
#include "mltool/util/error.hpp"
#include "mltool/util/file.hpp"
#include "mltool/util/parallel.hpp"
#include "own_jpeg_tiles.hpp"
#include "view_internal.hpp"

namespace mltool::slide::view {
namespace {

struct DzLevel {
  int index = 0;
  double scale = 1;  // level-0 pixels per pixel of this level
  std::int64_t width = 0, height = 0, cols = 0, rows = 0;
};

DzLevel dz_level(std::int64_t width, std::int64_t height, int levels, int index, int tile) {
  DzLevel l;
  l.index = index;
  l.scale = std::ldexp(1.0, levels - 1 - index);
  l.width = std::max<std::int64_t>(1, static_cast<std::int64_t>(std::ceil(width / l.scale)));
  l.height = std::max<std::int64_t>(1, static_cast<std::int64_t>(std::ceil(height / l.scale)));
  l.cols = (l.width + tile - 1) / tile;
  l.rows = (l.height + tile - 1) / tile;
  return l;
}

// The finest slide level with at most `scale` level-0 pixels per pixel (scanners' 4.0003).
int slide_level_for(const Slide& slide, double scale) {
  const auto& levels = slide.geometry().levels;
  int best = 0;
  for (std::size_t i = 0; i < levels.size(); ++i)
    if (levels[i].downsample <= scale * 1.001) best = static_cast<int>(i);
  return best;
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) throw ResourceError(path + ": cannot create the file");
  const bool ok = std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
  if (std::fclose(f) != 0 || !ok) throw ResourceError(path + ": cannot write the file");
}

std::string tile_path(const std::string& dir, int level, std::int64_t col, std::int64_t row) {
  return dir + "/" + std::to_string(level) + "/" + std::to_string(col) + "_" + std::to_string(row) +
         ".jpeg";
}

struct TileBox {
  std::int64_t col = 0, row = 0, x = 0, y = 0;  // x, y in this level's pixels
  int w = 0, h = 0;
};

TileBox box_of(const DzLevel& l, std::size_t i, int tile) {
  TileBox b;
  b.col = static_cast<std::int64_t>(i) % l.cols;
  b.row = static_cast<std::int64_t>(i) / l.cols;
  b.x = b.col * tile;
  b.y = b.row * tile;
  b.w = static_cast<int>(std::min<std::int64_t>(tile, l.width - b.x));
  b.h = static_cast<int>(std::min<std::int64_t>(tile, l.height - b.y));
  return b;
}

io::RgbImage fitted(io::RgbImage image, int w, int h) {
  if (image.width == w && image.height == h) return image;
  return resize(image.pixels.data(), image.width, image.height, w, h);
}

// A tile read from slide level `level` and resampled to the tile's size.
io::RgbImage tile_from_slide(const Slide& slide, int level, const DzLevel& l, const TileBox& b) {
  const auto& g = slide.geometry();
  const double ds = g.levels[level].downsample;
  const std::int64_t x0 = std::llround(b.x * l.scale), y0 = std::llround(b.y * l.scale);
  const double w0 = std::min<double>(b.w * l.scale, g.levels[0].width - x0);
  const double h0 = std::min<double>(b.h * l.scale, g.levels[0].height - y0);
  io::RgbImage read;
  read.width = std::max(1, static_cast<int>(std::lround(w0 / ds)));
  read.height = std::max(1, static_cast<int>(std::lround(h0 / ds)));
  read.pixels.resize(std::size_t(read.width) * read.height * 3);
  slide.read_rgb(x0, y0, level, read.width, read.height, read.pixels.data());
  return fitted(std::move(read), b.w, b.h);
}

// A tile made from the (up to) four tiles under it in the finer level `finer`.
io::RgbImage tile_from_children(const std::string& dir, const DzLevel& finer, const TileBox& b,
                                int tile) {
  io::RgbImage canvas;
  canvas.width = static_cast<int>(std::min<std::int64_t>(2 * tile, finer.width - 2 * b.x));
  canvas.height = static_cast<int>(std::min<std::int64_t>(2 * tile, finer.height - 2 * b.y));
  canvas.pixels.assign(std::size_t(canvas.width) * canvas.height * 3, 255);
  io::RgbImage child;
  for (int dy = 0; dy < 2; ++dy)
    for (int dx = 0; dx < 2; ++dx) {
      const std::int64_t c = 2 * b.col + dx, r = 2 * b.row + dy;
      if (c >= finer.cols || r >= finer.rows) continue;
      const auto path = tile_path(dir, finer.index, c, r);
      const auto bytes = util::read_file(path);
      io::decode_image(bytes.data(), bytes.size(), child, path);
      for (int y = 0; y < child.height && dy * tile + y < canvas.height; ++y) {
        const int w = std::min(child.width, canvas.width - dx * tile);
        std::copy_n(&child.pixels[std::size_t(y) * child.width * 3], std::size_t(w) * 3,
                    &canvas.pixels[(std::size_t(dy * tile + y) * canvas.width + dx * tile) * 3]);
      }
    }
  return fitted(std::move(canvas), b.w, b.h);
}

// The slide level's own JPEG tiles where DeepZoom level `scale` is that level exactly (the
// same level-0 pixels per pixel) and they are tiles of the pyramid's size; else null.
std::unique_ptr<OwnJpegTiles> own_tiles(const Slide& slide, int level, double scale,
                                        const ViewJob& job) {
  if (job.passthrough == Passthrough::never) return nullptr;
  if (slide.geometry().levels[level].downsample != scale) return nullptr;
  std::string why;
  return OwnJpegTiles::open(slide, level, job.tile_size, why);
}

}  // namespace

int deepzoom_levels(std::int64_t width, std::int64_t height) {
  const std::int64_t side = std::max<std::int64_t>({width, height, 1});
  int levels = 1;
  while ((std::int64_t{1} << (levels - 1)) < side) ++levels;
  return levels;
}

PyramidCount write_pyramid(const Slide& slide, const std::string& dir, const ViewJob& job) {
  const auto& l0 = slide.geometry().levels.at(0);
  const int levels = deepzoom_levels(l0.width, l0.height);
  const int tile = job.tile_size;
  init_vips();
  std::atomic<std::int64_t> tiles{0}, passed{0};
  for (int index = levels - 1; index >= 0; --index) {
    const DzLevel l = dz_level(l0.width, l0.height, levels, index, tile);
    util::make_directories(dir + "/" + std::to_string(index));
    const int level = slide_level_for(slide, l.scale);
    const double ds = slide.geometry().levels[level].downsample;
    const bool from_slide = index == levels - 1 || l.scale / ds <= 2.0;
    const auto own = own_tiles(slide, level, l.scale, job);
    const DzLevel finer =
        dz_level(l0.width, l0.height, levels, std::min(index + 1, levels - 1), tile);
    util::parallel_for(std::size_t(l.cols * l.rows), job.threads, [&](std::size_t i) {
      const TileBox b = box_of(l, i, tile);
      const auto path = tile_path(dir, index, b.col, b.row);
      ++tiles;
      if (own) {
        if (auto jpeg = own->jpeg_at(std::llround(b.x * l.scale), std::llround(b.y * l.scale));
            jpeg && b.w == tile && b.h == tile) {
          write_bytes(path, *jpeg);
          ++passed;
          return;
        }
      }
      const auto image = from_slide ? tile_from_slide(slide, level, l, b)
                                    : tile_from_children(dir, finer, b, tile);
      write_bytes(path,
                  io::encode_jpeg(image.pixels.data(), image.width, image.height, job.quality));
    });
  }
  return {tiles.load(), passed.load()};
}

}  // namespace mltool::slide::view
