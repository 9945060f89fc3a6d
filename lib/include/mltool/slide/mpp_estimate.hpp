// A slide's µm per pixel estimated from the tissue itself, for slides whose metadata is
// missing or wrong (`mltool info`, `tile --mpp-from-content`, `--check-mpp`).
//
// The ruler is the cell nucleus. In H&E, hematoxylin absorbs red light far more than eosin
// does, so a nucleus is where the red channel is darkest. In a few tissue regions of the
// finest level, nuclear cores are the pixels whose red optical density is above Otsu's
// threshold twice over (once tissue vs. the rest, once among the darker class), cut into
// 8-connected components; components that are roundish (second-moment axis ratio at most
// 2) and at least 3 px are nuclei. Their area-weighted median equivalent diameter, in
// pixels, less the blur the measurement adds (kCoreBlurPx, more where colour is stored at
// half resolution: kSubsampledBlurPx), against kNucleusCoreUm (what it measures in µm on a
// scanner-calibrated slide), is the cores' estimate. Its interval is the spread between regions
// plus the ruler's own uncertainty (kRulerSpread); too few nuclei, nuclei too few pixels across to
// measure, or regions that disagree make the estimate `uncertain`.
//
// The estimate given is from a second ruler, whole nuclei, which depends less on how chromatin
// looks than the cores (calibrated on one slide) do: hematoxylin's optical density (colour
// deconvolution with Ruifrok and Johnston's H&E vectors) above Otsu's threshold, cut into
// 8-connected components; the round ones (axis ratio at most 1.5) at least as wide as the
// typical deblurred core and at most 4 times it (the cores' scale filters out specks and
// merged nuclei) are nuclei, and their area-weighted median equivalent diameter is taken as
// kNucleusUm (a lymphocyte's nucleus, the literature's size, not fitted). Its interval is
// kNucleusSpread plus the spread between regions, or what the number of whole nuclei allows
// (kNucleusMixSpread), whichever is wider; fewer than kMinCertainNuclei make it uncertain. The
// cores' estimate stands alone, uncertain, where fewer than kMinNuclei whole nuclei are found.
// docs/info.md has the measured error, and where the accuracy goal is not met.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "mltool/slide/openslide.hpp"

namespace mltool::slide {

/// The area-weighted median equivalent diameter of a nuclear core on H&E, in µm, as
/// measure_nuclei measures it (calibrated on the Aperio scan CMU-1-Small-Region at its
/// 0.499 µm/px; the core is smaller than the nucleus a pathologist outlines).
inline constexpr double kNucleusCoreUm = 3.1;
/// The ruler's own relative uncertainty (tissue to tissue), in natural-log units: the
/// interval is at least exp(±kRulerSpread) around the estimate.
inline constexpr double kRulerSpread = 0.15;
/// What thresholding and pixels add to a measured core, in pixels, in quadrature: a core of
/// d px measures sqrt(d² + kCoreBlurPx²) (fitted on the same slide resampled from 0.2 to 2
/// µm/px); the estimate takes it out.
inline constexpr double kCoreBlurPx = 2.25;
/// The same where colour is stored at half the resolution (4:2:0 JPEG, found by
/// kMaxSubsampledChromaDetail): red, the ruler's channel, is blurred by the chroma
/// upsampling too (fitted on the same slide stored as 4:2:0 JPEG at 0.2-2 µm/px).
inline constexpr double kSubsampledBlurPx = 3.45;
/// The area-weighted median equivalent diameter of a whole round nucleus in H&E, in µm: a
/// lymphocyte's nucleus (about 7 µm), the size the literature gives, not fitted to a slide.
inline constexpr double kNucleusUm = 7.0;
/// The whole-nucleus ruler's relative uncertainty, in natural-log units: lymphocyte nuclei
/// are 6-8 µm (±15%), and tissues mix other nuclei in.
inline constexpr double kNucleusSpread = 0.2;
/// Regions whose median chroma_detail is below this hold 4:2:0-coded colour.
inline constexpr double kMaxSubsampledChromaDetail = 0.06;
/// Fewer nuclei than this over all regions: uncertain; fewer whole nuclei, the cores' estimate
/// stands alone (uncertain too).
inline constexpr int kMinNuclei = 60;
/// How far a sample of n whole nuclei may be from the slide's mix of cells, in natural-log
/// units × sqrt(n): the interval is at least exp(±sqrt(kNucleusSpread² + 4 · this² / n)).
/// A small image is one neighbourhood of the tissue. On 24 crops of 512-2048 px of the real
/// slide the widest error of an estimate from whole nuclei needed 0.96 (docs/info.md); 1.5
/// leaves room for tissues other than that one skin slide.
inline constexpr double kNucleusMixSpread = 1.5;
/// An uncertain estimate's interval is at least exp(±this).
inline constexpr double kUncertainHalfWidth = 0.4;
/// Fewer whole nuclei than this: uncertain ("too few whole nuclei"). It is where their
/// interval alone grows past an uncertain one's: 4 · kNucleusMixSpread² / (0.4² − 0.2²) = 75.
inline constexpr int kMinCertainNuclei = 75;
/// The interval of the cores standing alone is at least what this many whole nuclei allow.
inline constexpr int kMinMixNuclei = 10;

/// Nuclear cores found in one RGB region.
struct NucleusSample {
  std::vector<double> diameters_px;  ///< equivalent diameter 2 * sqrt(area / pi) of each
  std::vector<double> areas_px;      ///< area of each, in pixels
  /// Whole round nuclei (hematoxylin above Otsu's threshold): equivalent diameters and areas.
  std::vector<double> nucleus_diameters_px;
  std::vector<double> nucleus_areas_px;
  /// Pixel-scale detail of chroma (red - luminance) over that of luminance: see
  /// kMaxSubsampledChromaDetail.
  double chroma_detail = 0;
  double tissue_fraction = 0;  ///< share of the region's pixels that are stained
};

/// Nuclear cores in `rgb` (interleaved 8-bit, width × height): see the file comment.
NucleusSample measure_nuclei(const std::uint8_t* rgb, int width, int height);

/// What the tissue says a slide's µm per level-0 pixel is.
struct MppEstimate {
  std::optional<double> mpp;  ///< µm per level-0 pixel; none when no nucleus was found
  std::optional<double> low;  ///< the interval's ends
  std::optional<double> high;
  bool uncertain = true;          ///< the estimate is a guess: `why` says why
  std::string why;                ///< for an uncertain estimate: too few nuclei, ...
  int regions = 0;                ///< tissue regions read
  std::int64_t nuclei = 0;        ///< nuclear cores measured
  double core_px = 0;             ///< their area-weighted median diameter at level 0, in pixels
  std::int64_t whole_nuclei = 0;  ///< whole round nuclei measured
  int nucleus_regions = 0;  ///< regions with kMinRegionNuclei whole nuclei or more (the spread's)
  double nucleus_px = 0;    ///< their area-weighted median diameter at level 0, in pixels
  std::optional<double> from_cores;       ///< the cores' estimate, where whole nuclei gave `mpp`
  std::optional<double> from_nuclei;      ///< the whole nuclei's estimate (then `mpp`)
  bool chroma_subsampled = false;         ///< colour at half resolution: kSubsampledBlurPx applies
  std::optional<double> tissue_fraction;  ///< share of the slide that is tissue (thumbnail)
  double seconds = 0;
};

/// The estimate from the nuclei of several regions read at `downsample` level-0 pixels per
/// pixel (1 for level 0): pure arithmetic, so it is tested without a slide.
MppEstimate estimate_from_samples(const std::vector<NucleusSample>& regions, double downsample);

/// How many regions, and how large, estimate_mpp reads.
struct EstimateOptions {
  int regions = 8;      ///< tissue regions at most
  int region_px = 768;  ///< their side, in pixels of the level read
  /// Where the tissue map comes from level 0 and Slide::held_level holds it: read level 0
  /// whole once and take the patches and regions from it, for a caller that reads the level
  /// anyway (tile's tissue thumbnail and QC picture). Off, only those are read (`mltool info`).
  bool share_level0 = false;
};

/// A tile of the finest level's grid: its box (x, y, width, height) and its tissue fraction.
struct RegionCandidate {
  std::array<std::int64_t, 4> box;
  double tissue = 0;
};

/// A tile is a region when at least kMinRegionTissue of it is tissue; tiles with at least
/// kFullRegion (mostly tissue: more nuclei per pixel read) are taken first.
inline constexpr double kMinRegionTissue = 0.25;
inline constexpr double kFullRegion = 0.75;

/// Which of `tiles` (a grid over the slide, in reading order) the estimate reads, at most
/// `count`: the tiles mostly of tissue, all of them when they are at most `count`, else
/// `count` of them evenly spaced in reading order (systematic sampling, as stereology samples
/// a section); then, while fewer than `count`, the fullest of the tiles with some tissue. So
/// the regions cover the tissue whole, or a sample spread over it, whatever the pixel size.
std::vector<std::array<std::int64_t, 4>> pick_regions(const std::vector<RegionCandidate>& tiles,
                                                      int count);

/// Reads up to options.regions regions of the finest level where the tissue is (tissue
/// detection on a thumbnail, as tile's; the level cut into options.region_px tiles, picked by
/// pick_regions), and estimates from them.
/// A slide without tissue gives an estimate without mpp (`why`: no tissue).
MppEstimate estimate_mpp(const Slide& slide, const EstimateOptions& options = {});

/// {"mpp", "low", "high", "uncertain", "why", "regions", "nuclei", "core_px", "seconds",
/// "chroma_subsampled", "whole_nuclei", "nucleus_regions", "nucleus_px", "from_cores",
/// "from_nuclei"}: in `mltool info --json`, tile's summary and the tile store's slide record.
nlohmann::json to_json(const MppEstimate& estimate);

/// `v` with at most `decimals` decimals, trailing zeros dropped: 20, 0.499, 352.7778.
std::string decimal_text(double v, int decimals);

/// What the estimate was made from, for a person: "299 whole nuclei in 7 regions (1754
/// nuclear cores)", or where the cores' estimate stands alone "41 nuclear cores in 1 region
/// (12 whole nuclei, fewer than 60)".
std::string estimate_basis(const MppEstimate& estimate);

/// "0.498 µm/px (0.43–0.58)", "0.9 µm/px (0.6–1.4, uncertain: ...)" or "none (why)".
std::string estimate_text(const MppEstimate& estimate);

}  // namespace mltool::slide
