// `mltool info` as a library call: what is in a slide, before it is tiled — its format and
// vendor, levels, the µm/px its metadata gives and where from (or why it is unusable), the
// objective power, associated images, the tissue fraction, and the µm/px estimated from the
// tissue (mpp_estimate.hpp) with the verdict of the two side by side.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "mltool/io/dicomweb.hpp"
#include "mltool/slide/geometry.hpp"
#include "mltool/slide/mpp_estimate.hpp"
#include "mltool/slide/openslide.hpp"
#include "mltool/slide/segmenter.hpp"
#include "mltool/util/options.hpp"

namespace mltool::slide {

/// What `mltool info` does with each slide.
struct InfoJob {
  int regions = EstimateOptions{}.regions;  ///< tissue regions the estimate reads
  io::DicomwebOptions dicomweb;             ///< slides given as DICOMweb series URLs
  /// --tissue MODEL.pt: the tissue share found by this segmenter, not the thumbnail's ("" = otsu)
  std::string tissue_model;
  std::string device = "auto";           ///< where the segmenter runs (--device)
  SegmenterOpener open_segmenter;        ///< opens it (the caller's: slide/ has no LibTorch)
  std::shared_ptr<Segmenter> segmenter;  ///< opened once by describe_slides
};

/// The options of `mltool info`, declared once (lib/slide/info.cpp).
const util::Options<InfoJob>& info_options();

/// The µm per level-0 pixel a slide's metadata gives, and where it came from.
struct MetadataMpp {
  std::optional<double> mpp;  ///< the usable value, or nothing
  std::string source;  ///< "openslide.mpp-x/-y", "TIFF resolution", "flat image resolution", ""
  /// Why the metadata is not usable, "" when it is: "missing", "placeholder 72 dpi",
  /// "resolution unit none", "implausible 1000 µm/px".
  std::string problem;
};

/// Reads a slide's resolution metadata as `tile` does (openslide.mpp-x/-y, else the TIFF
/// resolution tags, else a flat image's resolution), saying why it is unusable.
MetadataMpp metadata_mpp(const Slide& slide);

/// How the metadata and the estimate compare: "agrees" (the metadata lies in the estimate's
/// interval), "disagrees" (outside it), "no metadata", or "no estimate" (no nuclei found).
std::string mpp_verdict(const MetadataMpp& metadata, const MppEstimate& estimate);

/// One slide, described.
struct SlideInfo {
  std::string path;
  std::string id;
  std::string error;  ///< a slide that cannot be read: its error (the rest is empty)
  std::string format;
  std::string vendor;
  std::string file;  ///< the file opened (a DICOM directory's .dcm file)
  std::vector<Level> levels;
  MetadataMpp metadata;
  std::optional<double> objective_power;
  std::vector<AssociatedImage> associated;
  std::optional<double> tissue_fraction;  ///< share of the slide that is tissue (thumbnail)
  /// "otsu", or the segmenter's file name (--tissue MODEL.pt)
  std::string tissue_by = "otsu";
  /// --tissue MODEL.pt: each class's share of the slide, in the model's class order; empty
  /// (and tissue_fraction none) for a slide without µm/px metadata, which it cannot read
  std::vector<std::pair<std::string, double>> class_fractions;
  MppEstimate estimate;
  std::string verdict;  ///< mpp_verdict
};

/// Describes the slide at `path`. Throws (InputError) for a slide that cannot be read.
SlideInfo describe_slide(const std::string& path, const InfoJob& job);

/// Describes every slide, in order, handing each to `each` as it is done; a slide that cannot
/// be read carries its `error` and the rest go on.
std::vector<SlideInfo> describe_slides(const std::vector<std::string>& paths, const InfoJob& job,
                                       const std::function<void(const SlideInfo&)>& each = {});

/// One JSON object (what `--json` prints, one a line).
nlohmann::json to_json(const SlideInfo& info);
/// A block of text lines for a person.
std::string to_text(const SlideInfo& info);

}  // namespace mltool::slide
