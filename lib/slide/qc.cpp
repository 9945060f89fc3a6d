// The per-slide QC picture (qc.hpp): outlines drawn on the slide's picture, and a caption
// strip rendered with libvips' vips_text below it.
#include "mltool/slide/qc.hpp"

#include <vips/vips.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <tuple>

#include "mltool/slide/image.hpp"
#include "mltool/util/error.hpp"
#include "thumbnail.hpp"
#include "vips_internal.hpp"

namespace mltool::slide {
namespace {

using detail::ImagePtr;
using detail::vips_message;

using Bits = std::vector<std::uint8_t>;  // one byte per picture pixel, row-major

// The mask scaled onto a width × height picture: bilinear between mask pixel centres,
// tissue where the interpolated value is at least one half (smoother than nearest, whose
// steps would be a mask pixel wide when the mask is coarser than the picture).
Bits scale_mask(const Mask& mask, int width, int height) {
  Bits out(static_cast<std::size_t>(width) * height, 0);
  if (mask.width <= 0 || mask.height <= 0) return out;
  auto at = [&](int x, int y) {
    x = std::clamp(x, 0, mask.width - 1), y = std::clamp(y, 0, mask.height - 1);
    return mask.data[static_cast<std::size_t>(y) * mask.width + x] != 0 ? 1.0 : 0.0;
  };
  const double sx = static_cast<double>(mask.width) / width;
  const double sy = static_cast<double>(mask.height) / height;
  for (int y = 0; y < height; ++y) {
    const double v = (y + 0.5) * sy - 0.5;
    const int y0 = static_cast<int>(std::floor(v));
    const double fy = v - y0;
    for (int x = 0; x < width; ++x) {
      const double u = (x + 0.5) * sx - 0.5;
      const int x0 = static_cast<int>(std::floor(u));
      const double fx = u - x0;
      const double top = at(x0, y0) * (1 - fx) + at(x0 + 1, y0) * fx;
      const double bottom = at(x0, y0 + 1) * (1 - fx) + at(x0 + 1, y0 + 1) * fx;
      out[static_cast<std::size_t>(y) * width + x] = top * (1 - fy) + bottom * fy >= 0.5;
    }
  }
  return out;
}

// The pixels next to a change of `inside` (4-neighbours; beyond the picture is outside):
// those on both sides of it, or only the inside ones.
Bits edges(const Bits& inside, int width, int height, bool both_sides) {
  Bits out(inside.size(), 0);
  auto in = [&](int x, int y) {
    return x >= 0 && y >= 0 && x < width && y < height &&
           inside[static_cast<std::size_t>(y) * width + x];
  };
  for (int y = 0; y < height; ++y)
    for (int x = 0; x < width; ++x) {
      const bool here = in(x, y);
      if (!here && !both_sides) continue;
      const bool differs = in(x - 1, y) != here || in(x + 1, y) != here || in(x, y - 1) != here ||
                           in(x, y + 1) != here;
      out[static_cast<std::size_t>(y) * width + x] = differs;
    }
  return out;
}

// `bits` grown by `radius` pixels in every direction (a square), in two separable passes.
Bits dilate(const Bits& bits, int width, int height, int radius) {
  if (radius <= 0) return bits;
  Bits rows(bits.size(), 0), out(bits.size(), 0);
  for (int y = 0; y < height; ++y)
    for (int x = 0; x < width; ++x)
      for (int d = -radius; d <= radius && !rows[static_cast<std::size_t>(y) * width + x]; ++d)
        if (x + d >= 0 && x + d < width && bits[static_cast<std::size_t>(y) * width + x + d])
          rows[static_cast<std::size_t>(y) * width + x] = 1;
  for (int y = 0; y < height; ++y)
    for (int x = 0; x < width; ++x)
      for (int d = -radius; d <= radius && !out[static_cast<std::size_t>(y) * width + x]; ++d)
        if (y + d >= 0 && y + d < height && rows[static_cast<std::size_t>(y + d) * width + x])
          out[static_cast<std::size_t>(y) * width + x] = 1;
  return out;
}

void paint(io::RgbImage& image, const Bits& where, const std::uint8_t (&colour)[3]) {
  for (std::size_t i = 0; i < where.size(); ++i)
    if (where[i]) std::copy(colour, colour + 3, image.pixels.begin() + i * 3);
}

// The pixel range a box touches, clipped to the picture. Touching, not centre inside: tile
// positions are whole level-0 pixels while their size is not, so neighbouring tiles may
// leave a sliver of a picture pixel between them, which must not show as a line.
struct PixelRange {
  int x0, y0, x1, y1;  // inclusive; empty when x1 < x0 or y1 < y0
};

PixelRange covered(const Box& b, int width, int height) {
  return {std::max(0, static_cast<int>(std::floor(b.x0))),
          std::max(0, static_cast<int>(std::floor(b.y0))),
          std::min(width - 1, static_cast<int>(std::ceil(b.x1)) - 1),
          std::min(height - 1, static_cast<int>(std::ceil(b.y1)) - 1)};
}

// Kept tiles: a box each when they are wide enough to read, else their union's outline.
void draw_kept(io::RgbImage& image, const std::vector<Box>& kept, int line) {
  const int w = image.width, h = image.height;
  double narrowest = kMinBoxPx;
  for (const Box& b : kept) narrowest = std::min({narrowest, b.x1 - b.x0, b.y1 - b.y0});
  Bits cover(static_cast<std::size_t>(w) * h, 0), boxes(cover.size(), 0);
  for (const Box& b : kept) {
    const PixelRange r = covered(b, w, h);
    for (int y = r.y0; y <= r.y1; ++y)
      for (int x = r.x0; x <= r.x1; ++x) {
        cover[static_cast<std::size_t>(y) * w + x] = 1;
        if (x < r.x0 + line || x > r.x1 - line || y < r.y0 + line || y > r.y1 - line)
          boxes[static_cast<std::size_t>(y) * w + x] = 1;
      }
  }
  if (narrowest >= kMinBoxPx)
    paint(image, boxes, kKeptOutline);
  else
    paint(image, dilate(edges(cover, w, h, false), w, h, line - 1), kKeptOutline);
}

// The outlines of the regions of interest: each ring's edges sampled every half pixel, the
// line `width` pixels wide (dilated), painted over the tissue outline and under the tiles.
void draw_rings(io::RgbImage& image, const std::vector<Ring>& rings, int width) {
  const int w = image.width, h = image.height;
  Bits on(static_cast<std::size_t>(w) * h, 0);
  for (const Ring& ring : rings)
    for (std::size_t i = 0; i + 1 < ring.size(); ++i) {
      const auto [ax, ay] = ring[i];
      const auto [bx, by] = ring[i + 1];
      const double steps = std::ceil(2 * std::max(std::abs(bx - ax), std::abs(by - ay))) + 1;
      for (double s = 0; s <= steps; ++s) {
        const int x = static_cast<int>(std::floor(ax + (bx - ax) * s / steps));
        const int y = static_cast<int>(std::floor(ay + (by - ay) * s / steps));
        if (x >= 0 && y >= 0 && x < w && y < h) on[static_cast<std::size_t>(y) * w + x] = 1;
      }
    }
  paint(image, dilate(on, w, h, width - 1), kRoiOutline);
}

std::string markup_escape(const std::string& text) {
  gchar* escaped = g_markup_escape_text(text.c_str(), static_cast<gssize>(text.size()));
  std::string out = escaped;
  g_free(escaped);
  return out;
}

// The caption lines as one 8-bit image of ink (0 = none, 255 = full), wrapped to `width`.
ImagePtr render_text(const std::vector<std::string>& lines, int width, int font_px) {
  init_vips();
  std::string markup;
  for (std::size_t i = 0; i < lines.size(); ++i)
    markup += i == 0 ? "<b>" + markup_escape(lines[i]) + "</b>" : "\n" + markup_escape(lines[i]);
  const std::string font = "DejaVu Sans " + std::to_string(font_px) + "px";
  VipsImage* raw = nullptr;
  if (vips_text(&raw, markup.c_str(), "font", font.c_str(), "width", width, "dpi", 72, nullptr) !=
      0)
    throw ResourceError("libvips: rendering the QC caption: " + vips_message());
  return ImagePtr(raw);
}

// The ink of `text` (render_text's) drawn dark onto `out` from (x0, y0), clipped to it.
void draw_ink(io::RgbImage& out, VipsImage& text, int x0, int y0, const char* what) {
  std::size_t size = 0;
  void* raw = vips_image_write_to_memory(&text, &size);
  if (!raw) throw ResourceError(std::string("libvips: ") + what + ": " + vips_message());
  const std::unique_ptr<void, decltype(&g_free)> ink(raw, g_free);
  constexpr int kInk = 25;
  const auto* a = static_cast<const std::uint8_t*>(raw);
  for (int y = 0; y < text.Ysize && y0 + y < out.height; ++y)
    for (int x = 0; x < text.Xsize && x0 + x < out.width; ++x) {
      const int v =
          255 - (a[static_cast<std::size_t>(y) * text.Xsize + x] * (255 - kInk) + 127) / 255;
      std::fill_n(out.pixels.data() + (static_cast<std::size_t>(y0 + y) * out.width + x0 + x) * 3,
                  3, static_cast<std::uint8_t>(v));
    }
}

// `picture` with a white strip below it holding the caption in dark text.
io::RgbImage with_caption(const io::RgbImage& picture, const std::vector<std::string>& lines) {
  const int long_side = std::max(picture.width, picture.height);
  const int font_px = std::max(10, long_side / 64), pad = std::max(4, font_px / 2);
  const int text_width = std::max(1, picture.width - 2 * pad);
  const ImagePtr text = render_text(lines, text_width, font_px);
  io::RgbImage out{picture.width, picture.height + text->Ysize + 2 * pad + 1, {}};
  out.pixels.assign(static_cast<std::size_t>(out.width) * out.height * 3, 255);
  std::copy(picture.pixels.begin(), picture.pixels.end(), out.pixels.begin());
  const std::size_t rule = static_cast<std::size_t>(picture.height) * out.width * 3;
  std::fill_n(out.pixels.begin() + rule, out.width * 3, 160);  // a grey rule above the strip
  draw_ink(out, *text, pad, picture.height + 1 + pad, "the QC caption");
  return out;
}

// Each pixel of `image` whose cell (nearest) is in a tissue or artifact class, tinted 40% toward
// its class's colour.
void tint_classes(io::RgbImage& image, const ClassMap& map, const SegmenterContract& contract) {
  const int w = image.width, h = image.height;
  if (map.width <= 0 || map.height <= 0) return;
  for (int y = 0; y < h; ++y) {
    const int cy = std::min(map.height - 1, static_cast<int>((y + 0.5) * map.height / h));
    for (int x = 0; x < w; ++x) {
      const int cx = std::min(map.width - 1, static_cast<int>((x + 0.5) * map.width / w));
      const int k = map.classes[static_cast<std::size_t>(cy) * map.width + cx];
      if (!contract.is_tissue(k) && !contract.is_artifact(k)) continue;
      const std::uint8_t* c =
          io::class_colour(contract.classes[k], contract.tissue, contract.artifacts);
      std::uint8_t* px = image.pixels.data() + (static_cast<std::size_t>(y) * w + x) * 3;
      for (int i = 0; i < 3; ++i) px[i] = static_cast<std::uint8_t>((px[i] * 3 + c[i] * 2 + 2) / 5);
    }
  }
}

// A white strip `width` wide: a swatch of each tinted class's colour and its name (with
// "tissue" or "artifact"), left to right, wrapped.
io::RgbImage legend_strip(const SegmenterContract& contract, int width, int font_px) {
  const int pad = std::max(4, font_px / 2), swatch = font_px;
  io::RgbImage out{width, 0, {}};
  int x = pad, y = pad, line_h = swatch;
  std::vector<std::pair<Box, int>> swatches;  // where each swatch goes, and its class
  std::vector<std::tuple<int, int, ImagePtr>> labels;
  for (int k = 0; k < static_cast<int>(contract.classes.size()); ++k) {
    if (!contract.is_tissue(k) && !contract.is_artifact(k)) continue;
    const std::string label =
        contract.classes[k] + (contract.is_tissue(k) ? " (tissue)" : " (artifact)");
    ImagePtr text = render_text({label}, std::max(1, width - 2 * pad - swatch - pad), font_px);
    const int need = swatch + pad / 2 + text->Xsize + 2 * pad;
    if (x > pad && x + need > width) x = pad, y += line_h + pad, line_h = swatch;
    swatches.push_back({Box{double(x), double(y), double(x + swatch), double(y + swatch)}, k});
    line_h = std::max(line_h, text->Ysize);
    labels.emplace_back(x + swatch + pad / 2, y, std::move(text));
    x += need;
  }
  out.height = y + line_h + pad;
  out.pixels.assign(static_cast<std::size_t>(out.width) * out.height * 3, 255);
  for (const auto& [b, k] : swatches)
    for (int yy = static_cast<int>(b.y0); yy < static_cast<int>(b.y1) && yy < out.height; ++yy)
      for (int xx = static_cast<int>(b.x0); xx < static_cast<int>(b.x1) && xx < width; ++xx)
        std::copy_n(io::class_colour(contract.classes[k], contract.tissue, contract.artifacts), 3,
                    out.pixels.data() + (static_cast<std::size_t>(yy) * width + xx) * 3);
  for (const auto& [lx, ly, text] : labels) draw_ink(out, *text, lx, ly, "the QC legend");
  return out;
}

// `top` with `bottom` (as wide) below it.
io::RgbImage stacked(const io::RgbImage& top, const io::RgbImage& bottom) {
  io::RgbImage out{top.width, top.height + bottom.height, top.pixels};
  out.pixels.insert(out.pixels.end(), bottom.pixels.begin(), bottom.pixels.end());
  return out;
}

std::string number(double v, int digits) {
  char text[64];
  std::snprintf(text, sizeof text, "%.*f", digits, v);
  return text;
}

}  // namespace

io::RgbImage side_by_side(const io::RgbImage& left, const io::RgbImage& right) {
  const int gap = std::max(4, left.width / 64);
  io::RgbImage out;
  out.width = left.width + gap + right.width;
  out.height = std::max(left.height, right.height);
  out.pixels.assign(static_cast<std::size_t>(out.width) * out.height * 3, 255);
  const auto put = [&](const io::RgbImage& im, int x0) {
    for (int y = 0; y < im.height; ++y)
      std::copy_n(im.pixels.data() + static_cast<std::size_t>(y) * im.width * 3,
                  static_cast<std::size_t>(im.width) * 3,
                  out.pixels.data() + (static_cast<std::size_t>(y) * out.width + x0) * 3);
  };
  put(left, 0);
  put(right, left.width + gap);
  return out;
}

io::RgbImage caption_picture(const io::RgbImage& picture, const std::vector<std::string>& lines) {
  return with_caption(picture, lines);
}

io::RgbImage qc_picture(const io::RgbImage& slide, const QcOverlay& overlay) {
  io::RgbImage out = slide;
  const int w = out.width, h = out.height, long_side = std::max(w, h);
  if (overlay.classes && overlay.contract && w > 0 && h > 0)
    tint_classes(out, *overlay.classes, *overlay.contract);
  if (overlay.tissue && w > 0 && h > 0) {
    const int radius = std::max(1, static_cast<int>(std::lround(long_side / 1024.0)));
    const Bits outline = edges(scale_mask(*overlay.tissue, w, h), w, h, true);
    paint(out, dilate(outline, w, h, radius - 1), kTissueOutline);
  }
  if (!overlay.roi.empty() && w > 0 && h > 0)
    draw_rings(out, overlay.roi, std::max(1, static_cast<int>(std::lround(long_side / 1024.0))));
  draw_kept(out, overlay.kept, std::max(1, static_cast<int>(std::lround(long_side / 2048.0))));
  if (!overlay.caption.empty()) out = with_caption(out, overlay.caption);
  if (overlay.classes && overlay.contract && w > 0)
    out = stacked(out, legend_strip(*overlay.contract, w, std::max(10, long_side / 64)));
  return out;
}

std::string metadata_mpp_text(const std::optional<double>& mpp, const std::string& problem) {
  if (mpp) return number(*mpp, 4) + " µm/px";
  return problem.empty() || problem == "missing" ? "none" : "unusable: " + problem;
}

std::vector<std::string> caption_lines(const QcCaption& c) {
  const std::string size = std::to_string(c.width) + " × " + std::to_string(c.height) + " px";
  const std::string mpp = c.mpp ? number(*c.mpp, 4) + " µm/px (" + c.mpp_source + ")"
                                : "µm/px unknown (" + c.mpp_source + ")";
  const std::string at = c.target_mpp ? " at " + number(*c.target_mpp, 3) + " µm/px" : "";
  const std::string tissue =
      !c.segmenter.empty()
          ? "tissue: segmenter " + c.segmenter +
                (c.tissue_fraction ? ", " + number(*c.tissue_fraction * 100, 1) + "% of the slide"
                                   : "") +
                "; tiles kept with ≥ " + number(c.min_tissue * 100, 0) + "% tissue and ≤ " +
                number(c.max_artifact * 100, 0) + "% artifacts"
      : c.tissue_threshold
          ? "tissue: saturation > " + std::to_string(*c.tissue_threshold) + " (Otsu)" +
                (c.tissue_fraction ? ", " + number(*c.tissue_fraction * 100, 1) + "% of the slide"
                                   : "") +
                "; tiles kept with ≥ " + number(c.min_tissue * 100, 0) + "% tissue"
          : std::string("tissue: none (every tile of the grid kept)");
  std::vector<std::string> lines = {c.id, "level 0: " + size + ", " + mpp};
  if (!c.estimate.empty())
    lines.push_back("µm/px metadata: " + metadata_mpp_text(c.metadata_mpp, c.metadata_problem) +
                    "; estimated from the tissue: " + c.estimate);
  for (auto& line : std::vector<std::string>{
           "tiles kept: " + std::to_string(c.tiles) + " / " + std::to_string(c.grid_tiles) +
               " grid (" + std::to_string(c.tile_size) + " px" + at + ", read from level " +
               std::to_string(c.level) + ")",
           tissue,
           "reader: " + (c.reader.empty() ? std::string("-") : c.reader) +
               "    green: tissue outline, blue: kept tiles" +
               (c.roi.empty() ? "" : ", orange: regions of interest")})
    lines.push_back(std::move(line));
  if (!c.roi.empty()) lines.insert(lines.end() - 1, c.roi);  // after the tissue line
  return lines;
}

io::RgbImage read_qc_image(const Slide& slide, int long_side) {
  const Level& l0 = slide.geometry().levels[0];
  const double longest = static_cast<double>(std::max(l0.width, l0.height));
  const int width = std::max(1, static_cast<int>(std::lround(l0.width * long_side / longest)));
  const int height = std::max(1, static_cast<int>(std::lround(l0.height * long_side / longest)));
  Thumbnail t = slide_thumbnail(slide, longest / long_side);
  if (t.image.width == width && t.image.height == height) return std::move(t.image);
  return resize(t.image.pixels.data(), t.image.width, t.image.height, width, height);
}

}  // namespace mltool::slide
