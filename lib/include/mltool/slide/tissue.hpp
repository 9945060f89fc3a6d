// Tissue detection for `mltool tile`, on a low-resolution RGB thumbnail (never
// level 0): Otsu's threshold on HSV saturation, then small objects removed and
// small holes filled, then a tissue fraction per tile from an integral image.
// Stained tissue is coloured (pink/purple) while glass, white background and pen-free
// margins are grey, so saturation separates them better than brightness does.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace mltool::slide {

/// HSV saturation of interleaved 8-bit RGB pixels, scaled to 0..255:
/// round((max - min) * 255 / max), and 0 where max is 0 (black).
std::vector<std::uint8_t> saturation(const std::uint8_t* rgb, int width, int height);

/// Otsu's threshold of `values`: the t in 0..255 that maximises the between-class
/// variance of {v <= t} and {v > t} over a 256-bin histogram. Callers treat v > t as
/// foreground. Ties (a plateau, e.g. every t in the empty gap between two modes)
/// resolve to the smallest t, i.e. the top of the lower mode, as scikit-image does.
/// When there is only one distinct value v (or no values: v = 0), returns v, so
/// nothing is foreground: a blank thumbnail yields no tissue rather than all tissue.
int otsu_threshold(const std::vector<std::uint8_t>& values);

/// Per-pixel rules for what looks coloured but is not tissue: pen ink, black scanner
/// borders and dark out-of-slide areas. H&E tissue is eosin pink and hematoxylin purple;
/// both stains absorb green more than red (Ruifrok & Johnston's stain vectors), so stained
/// tissue has red >= green practically always, and its darkest parts (dense nuclei, folds)
/// stay clearly purple. Ink and borders break that: blue, green and cyan inks have
/// green > red or a blue hue short of purple; black ink and borders are dark and grey.
/// Values are 8-bit RGB; hi = max(r, g, b), lo = min(r, g, b). docs/tile.md (--tissue)
/// states the same rules for users.
struct ArtifactRules {
  /// Dark: hi < dark_below (black borders, out-of-slide areas, the core of black ink).
  int dark_below = 40;
  /// Grey: hi < grey_below and hi - lo < grey_chroma (black/grey ink, a noisy black
  /// border); the darkest nuclei keep hi >= 100 or a chroma of 40 and more at thumbnail scale.
  int grey_below = 100;
  int grey_chroma = 25;
  /// Green/cyan ink: g - r > green_over_red.
  int green_over_red = 10;
  /// Blue ink: g >= r and b - max(r, g) >= blue_over (hue 180°..240°; purple is past 240°).
  int blue_over = 30;
};

/// Whether the pixel (r, g, b) is an artifact under `rules`: dark, grey, green or blue.
bool is_artifact(int r, int g, int b, const ArtifactRules& rules);

/// Settings of tissue_mask. Pixel counts are in thumbnail pixels; the caller scales
/// them from level-0 areas with the thumbnail's downsample.
struct TissueOptions {
  /// Foreground components (8-connected) with fewer pixels are removed: dust, debris.
  std::int64_t min_object_px = 64;
  /// Background components (4-connected) not touching the border with fewer pixels
  /// are filled: nuclei-free lumens and tears inside tissue.
  std::int64_t max_hole_px = 64;
  /// Lower bound of the saturation threshold. On a thumbnail without tissue Otsu
  /// still splits the noise of the glass in two; the floor keeps that from being
  /// called tissue. Stained tissue is well above it.
  int min_saturation = 20;
  /// Pixels that are artifacts under these rules are background whatever their
  /// saturation (black borders and ink have saturation from noise alone: (10, 4, 4) is
  /// 60% saturated), and stay out of Otsu's histogram. Nothing: every pixel is judged by
  /// saturation alone (`--artifacts keep`).
  std::optional<ArtifactRules> artifacts = ArtifactRules{};
};

/// A binary image: data[y * width + x] is 1 for tissue and 0 for background.
struct Mask {
  int width = 0;
  int height = 0;
  std::vector<std::uint8_t> data;
  /// The saturation threshold tissue_mask used (pixels above it are tissue); -1 otherwise.
  int threshold = -1;
};

/// The tissue mask of an interleaved 8-bit RGB image of width × height pixels:
/// saturation > max(otsu_threshold over non-artifact pixels, min_saturation), artifact
/// pixels excluded; if the pixels at or below that threshold are on average more
/// saturated than min_saturation, there is no glass in view (Otsu split the tissue
/// itself) and the threshold is min_saturation; then remove_small_objects and fill_small_holes, in
/// that order (a speck inside a hole first goes, so the hole can be filled whole).
Mask tissue_mask(const std::uint8_t* rgb, int width, int height, const TissueOptions& options);

/// Clears 8-connected foreground components of fewer than `min_px` pixels.
void remove_small_objects(Mask& mask, std::int64_t min_px);

/// Sets 4-connected background components of fewer than `max_px` pixels that do
/// not touch the border. 4-connectivity for background pairs with 8 for foreground,
/// so a diagonal line of tissue closes a hole as it does to the eye.
void fill_small_holes(Mask& mask, std::int64_t max_px);

/// Summed-area table of a mask, for the tissue fraction of any box in O(1).
class IntegralMask {
 public:
  /// Builds the table; (width + 1) × (height + 1) 32-bit counts. Throws
  /// ResourceError if the mask has 2^32 pixels or more.
  explicit IntegralMask(const Mask& mask);
  /// The table of a map whose pixel i counts `counts[i]` of `unit` sub-pixels as tissue (a
  /// class map's cells, segmenter.hpp): areas are in whole pixels, counts[i] / unit each.
  /// ResourceError if the counts can add up to 2^32 or more.
  IntegralMask(int width, int height, const std::vector<std::uint16_t>& counts, int unit);

  int width() const { return width_; }
  int height() const { return height_; }

  /// Area of tissue inside [x0, x1) × [y0, y1), in mask pixel coordinates where
  /// pixel (i, j) covers [i, i+1) × [j, j+1). Non-integer bounds count partial pixels
  /// by their covered area (exact: the integral is bilinear inside each pixel).
  /// The box is clipped to the mask.
  double tissue_area(double x0, double y0, double x1, double y1) const;

  /// tissue_area divided by the box's full area; parts of the box outside the mask
  /// count as background. 0 for an empty box.
  double fraction(double x0, double y0, double x1, double y1) const;

 private:
  // The integral F(x, y) of the mask over [0, x) × [0, y), interpolated bilinearly
  // between table entries, clipped to the mask.
  double integral(double x, double y) const;

  int width_ = 0;
  int height_ = 0;
  double unit_ = 1;
  std::vector<std::uint32_t> table_;  // (width_ + 1) * (height_ + 1), row-major
};

/// IntegralMask(mask).fraction(...): for a single box. Tiling many boxes should
/// build one IntegralMask instead; this costs a pass over the whole mask.
double tissue_fraction(const Mask& mask, double x0, double y0, double x1, double y1);

}  // namespace mltool::slide
