// The QC pictures of `mltool tile --qc DIR`, made for a person to look at:
//
//  - per slide, DIR/<id>.png: the whole slide at --qc-size pixels on its long side (a
//    thumbnail of its own, not the small one tissue detection works on), the tissue outline,
//    the kept tiles outlined, and a caption strip below the slide (id, µm/px and its source,
//    tiles kept / grid, tissue threshold, reader);
//  - per run, DIR/index.html: a contact sheet of every slide of the call with its counts and
//    status, slides with zero tiles and failed ones marked.
//
// qc_picture and caption_lines are pure (testable on synthetic images); read_qc_image reads
// the slide; the files are published atomically.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "mltool/io/image_codec.hpp"
#include "mltool/slide/openslide.hpp"
#include "mltool/slide/roi.hpp"
#include "mltool/slide/segmenter.hpp"
#include "mltool/slide/tiler.hpp"
#include "mltool/slide/tissue.hpp"

namespace mltool::slide {

/// A box in picture pixel coordinates, [x0, x1) × [y0, y1).
struct Box {
  double x0 = 0, y0 = 0, x1 = 0, y1 = 0;
};

/// What is drawn over the slide.
struct QcOverlay {
  /// The tissue mask over the whole slide, at any resolution (it is scaled onto the picture
  /// bilinearly and its boundary drawn); null for --tissue none.
  const Mask* tissue = nullptr;
  std::vector<Box> kept;             ///< the kept tiles, in picture pixels
  std::vector<Ring> roi;             ///< tile --roi: the regions' outlines, in picture pixels
  std::vector<std::string> caption;  ///< plain-text lines under the picture; the first is bold
  /// --tissue MODEL.pt: the class map, each tissue and artifact class tinted in its colour
  /// (io::class_colour) over the slide and named in a legend strip under the caption; null
  /// otherwise.
  const ClassMap* classes = nullptr;
  const SegmenterContract* contract = nullptr;
};

/// The colours of the overlay (documented in docs/tile.md).
inline constexpr std::uint8_t kTissueOutline[3] = {0, 200, 0};
inline constexpr std::uint8_t kKeptOutline[3] = {20, 60, 255};
inline constexpr std::uint8_t kRoiOutline[3] = {255, 140, 0};  ///< tile --roi's regions: orange
/// Kept tiles narrower than this many picture pixels are drawn as the outline of their union
/// (a box per tile would be a solid blue grid); wider ones as a box each.
inline constexpr double kMinBoxPx = 12;

/// `slide` (the picture of the whole slide) with the tissue outline (kTissueOutline, 2 px
/// wide per 1024 px of long side, half on each side of the boundary), the kept tiles
/// (kKeptOutline, 1 px per 2048 px of long side) and, when `overlay.caption` is not empty, a
/// caption strip below it: white, the lines in dark DejaVu Sans (libvips' vips_text, through
/// Pango and fontconfig) at 1/64 of the long side (at least 10 px), wrapped to the width.
/// The result is slide.width wide and slide.height + the strip's height high; the same input
/// gives the same pixels.
io::RgbImage qc_picture(const io::RgbImage& slide, const QcOverlay& overlay);

/// `left` and `right` side by side on white, a gap of 1/64 of their width between them
/// (`right` drawn at its own size from the top).
io::RgbImage side_by_side(const io::RgbImage& left, const io::RgbImage& right);
/// `picture` with qc_picture's caption strip below it (the first line bold).
io::RgbImage caption_picture(const io::RgbImage& picture, const std::vector<std::string>& lines);

/// The slide's own µm/px metadata as the caption and the contact sheet show it: "0.2500 µm/px",
/// "none" (missing), or why it is unusable: "unusable: placeholder 72 dpi".
std::string metadata_mpp_text(const std::optional<double>& mpp, const std::string& problem);

/// What a slide's caption says.
struct QcCaption {
  std::string id;
  std::int64_t width = 0, height = 0;  ///< level-0 pixels
  std::optional<double> mpp;           ///< µm per level-0 pixel
  std::string mpp_source;              ///< ReadPlan::mpp_source
  std::optional<double> metadata_mpp;  ///< the slide's own usable µm/px metadata
  std::string metadata_problem;        ///< why there is none (MetadataMpp::problem), or ""
  std::string estimate;                ///< estimate_text of the tissue's estimate, or ""
  std::optional<double> target_mpp;    ///< µm per tile pixel (--mpp), or none with --level
  int level = 0;                       ///< the level tiles were read from
  int tile_size = 0;
  std::int64_t tiles = 0, grid_tiles = 0;
  std::optional<int> tissue_threshold;  ///< Otsu's saturation threshold; none = --tissue none
  std::optional<double> tissue_fraction;
  double min_tissue = 0;
  std::string segmenter;    ///< --tissue MODEL.pt: its file name, else ""
  double max_artifact = 0;  ///< --max-artifact, with a segmenter
  std::string reader;
  std::string roi;  ///< tile --roi: the line saying what the regions kept ("": no --roi)
};

/// The caption's lines: the id, then µm/px and its source, the metadata's and the tissue's
/// µm/px (where estimated), tiles kept / grid, tissue, reader and the legend of the colours.
std::vector<std::string> caption_lines(const QcCaption& caption);

/// The whole slide at `long_side` pixels on its longer side (the other side in proportion,
/// at least 1), from the coarsest pyramid level at or finer than that, resampled with
/// Lanczos-3 (enlarged for a slide smaller than `long_side`).
io::RgbImage read_qc_image(const Slide& slide, int long_side);

/// The contact sheet of a run, written atomically to `path` (tile_slides: DIR/index.html,
/// or index-I-of-N.html with --shard I/N): a card per slide of `slides` in their order, with
/// its picture `<id>.png` (relative, when it exists in the same directory), status, tiles /
/// grid, tissue %, µm/px and its source; empty and failed slides marked, failures with their
/// error. Every text is HTML-escaped, every link percent-encoded.
void write_qc_index(const std::string& path, const std::vector<SlideReport>& slides);

}  // namespace mltool::slide
