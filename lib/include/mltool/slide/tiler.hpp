// `mltool tile` as a library call: one slide → its tiles in a tile store, and the merge of
// stores tiled on several machines.
//
// Per slide: open with OpenSlide, choose the level (geometry.hpp), make a thumbnail with
// libvips and a tissue mask on it (tissue.hpp), keep the grid tiles with enough tissue,
// then read, resample and encode them on worker threads (OpenSlide reads are thread-safe)
// while the calling thread commits them to LMDB in large transactions. A bounded queue
// between the two keeps memory independent of the slide's size.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "mltool/io/dicomweb.hpp"
#include "mltool/io/image_codec.hpp"
#include "mltool/io/tile_store.hpp"
#include "mltool/slide/mpp_estimate.hpp"
#include "mltool/slide/region_reader.hpp"
#include "mltool/slide/roi.hpp"
#include "mltool/slide/segmenter.hpp"

namespace mltool::slide {

/// Slides' µm per level-0 pixel from a CSV file (--slide-mpp-table).
struct MppTable {
  std::string path;                   ///< the file, as given ("" = none)
  std::map<std::string, double> mpp;  ///< slide path as written in the file, or slide id
};

/// Reads a table (io::read_table: CSV, TSV or JSONL by extension) with the columns `slide`
/// and `mpp` (others are ignored; blanks around a value too): slide = a path as given to tile
/// or a slide id. InputError naming the file and line for a missing column, a malformed file,
/// a bad or implausible number (outside kMinPlausibleMpp..kMaxPlausibleMpp) and a slide
/// listed twice.
MppTable load_mpp_table(const std::string& path);

/// Whether a tile that is exactly one of the slide's own JPEG-compressed TIFF tiles is stored
/// as those compressed bytes (made a standalone JPEG) instead of decoded and encoded again.
enum class Passthrough {
  automatic,  ///< where the tile is one whole TIFF tile (tiff_jpeg_tiles.hpp) and --format jpeg
  never,      ///< always decode and encode
};
/// --passthrough's names: auto, never.
extern const util::EnumNames<Passthrough> kPassthroughChoices;

/// What to do where a slide's µm/px metadata disagrees with the µm/px estimated from its tissue
/// (--check-mpp).
enum class CheckMpp {
  off,     ///< no check (no estimate is made for it)
  warn,    ///< log a warning naming both values and tile at the metadata's
  refuse,  ///< fail the slide (InputError) before anything of it is written
};
/// --check-mpp's names: off, warn, refuse.
extern const util::EnumNames<CheckMpp> kCheckMppChoices;

/// How to tile, beyond the store's settings.
struct TileJob {
  io::TileSettings settings;
  int threads = 0;     ///< read/encode workers; 0 = one per core
  std::string qc_dir;  ///< where to write <id>.png QC pictures ("" = none)
  int qc_size = 1024;  ///< long side of the slide in a QC picture, in pixels
  /// `extract --stain-norm`: the slide's QC picture recoloured (nothing where it cannot be:
  /// too little stain), drawn beside the original with qc_recolour_caption under both; unset:
  /// the original alone.
  std::function<std::optional<io::RgbImage>(const io::RgbImage&)> qc_recolour;
  std::string qc_recolour_caption;
  std::size_t commit_every = 2048;  ///< tiles per LMDB transaction
  ReaderChoice reader = ReaderChoice::automatic;
  Passthrough passthrough = Passthrough::automatic;
  /// µm per level-0 pixel of every slide, instead of their metadata (--slide-mpp).
  std::optional<double> slide_mpp;
  /// µm per level-0 pixel per slide (--slide-mpp-table CSV, read by load_mpp_table): keys are
  /// slide paths as given or slide ids. A slide listed here takes this over --slide-mpp and
  /// its metadata.
  MppTable slide_mpp_table;
  /// Objective power M for the target resolution, 10 / M µm per pixel (--mag; tile_slides
  /// turns it into settings.mpp). 20 → 0.5, 40 → 0.25.
  std::optional<double> mag;
  /// A slide without a usable µm/px is read at 10 / the objective power it declares
  /// (--mpp-from-power; OpenSlide's openslide.objective-power).
  bool mpp_from_power = false;
  /// A slide without a usable µm/px is read at the µm/px estimated from its tissue
  /// (--mpp-from-content; mpp_estimate.hpp), unless the estimate is uncertain.
  bool mpp_from_content = false;
  /// Metadata against the tissue's estimate (--check-mpp).
  CheckMpp check_mpp = CheckMpp::off;
  /// How slides given as DICOMweb series URLs are fetched (--dicomweb-*).
  io::DicomwebOptions dicomweb;
  /// --tissue MODEL.pt: the segmenter's file (settings.tissue is then model), else "".
  std::string tissue_model;
  /// Where the segmenter runs (--device).
  std::string device = "auto";
  /// Opens tissue_model: features::open_segmenter, handed down by the caller (slide/ has no
  /// LibTorch). Unset: --tissue MODEL.pt is refused.
  SegmenterOpener open_segmenter;
  /// The segmenter, opened once by tile_slides (open_tissue_model) before any slide is read.
  std::shared_ptr<Segmenter> segmenter;
  /// Regions of interest drawn in QuPath (--roi, --roi-class, --min-roi, --roi-missing).
  RoiJob roi;
};

/// What happened to one slide: tiled; empty (complete with zero tiles); skipped (already
/// complete in the store); incomplete (published without the tiles whose DICOMweb frames
/// failed: SlideReport::failed_tiles); failed (only in tile_slides' reports under
/// keep_going; see SlideReport::error); no_roi (not tiled: no ROI file, --roi-missing skip).
enum class SlideStatus { tiled, empty, skipped, incomplete, failed, no_roi };

/// The status's name in reports, the --json summary and qc/index.html.
const char* to_string(SlideStatus status);

/// A kept tile whose source failed for good (a DICOMweb frame's request, after its retries):
/// left out of the slide, listed in its done marker until a later run fills it in
/// (docs/formats.md#tile-store).
struct TileFailure {
  std::int64_t row = 0, col = 0;  ///< its grid position
  std::int64_t x = 0, y = 0;      ///< its level-0 corner
  std::string url;                ///< the request that failed
  long status = 0;                ///< its HTTP status; 0: no answer
  std::string error;              ///< the message

  nlohmann::json to_json() const;
};

/// What happened to one slide.
struct SlideReport {
  std::string path;
  std::string id;
  SlideStatus status = SlideStatus::tiled;
  std::int64_t tiles = 0;                 ///< tiles kept and written
  std::int64_t grid_tiles = 0;            ///< tiles of the full grid
  std::int64_t passthrough = 0;           ///< tiles stored as the slide's own JPEG bytes
  std::optional<double> tissue_fraction;  ///< share of the slide that is tissue (otsu, model)
  /// --tissue MODEL.pt: each class's share of the slide, in the model's class order
  std::vector<std::pair<std::string, double>> class_fractions;
  /// --tissue MODEL.pt: seconds spent segmenting (reading the windows and the model)
  std::optional<double> segment_seconds;
  double seconds = 0;
  std::string reader;  ///< what decoded the tiles: "openslide", "libvips-tiff", "libvips-flat"
  std::string reader_version;  ///< "OpenSlide 4.0.1" or "libvips 8.14.1"
  std::string
      mpp_source;  ///< ReadPlan::mpp_source: metadata, override, table, content, power, none
  std::optional<double> mpp;  ///< µm per level-0 pixel (ReadPlan::mpp), if known
  /// µm per level-0 pixel estimated from the tissue, where it was estimated
  /// (--mpp-from-content, --check-mpp, --qc)
  std::optional<MppEstimate> mpp_estimate;
  std::optional<double> metadata_mpp;  ///< the slide's own usable µm/px metadata, if any
  std::string metadata_problem;        ///< why it has none (MetadataMpp::problem), or ""
  /// --mpp-from-content: the target lay inside the estimate's interval, finer than the
  /// estimate, and level 0 was read as it is (its µm/px recorded as the target)
  bool mpp_level0_as_target = false;
  std::string error;  ///< status "failed" (tile_slides with keep_going): the message
  /// the tiles left out, in key order (also in the done marker): status "incomplete", or
  /// "tiled"/"skipped" where allow_missing_tiles counts the slide as done without them
  std::vector<TileFailure> failed_tiles;
};

/// The target µm/px when neither --mpp nor --level is given (tile_slides applies it).
inline constexpr double kDefaultMpp = 0.5;

/// The options of one slide's tiling, declared once (lib/slide/tile_options.cpp): how slides
/// are cut into tiles (geometry, µm/px, tissue, QC, reader), shared by `mltool tile` and
/// `mltool extract SLIDE...`.
const util::Options<TileJob>& tile_options();
/// The flag of the first option of tile_options() `job` was given, or "": an option that
/// tiles slides, given where no slide is tiled (to refuse, not ignore).
std::string given_tile_option(const TileJob& job);
/// The options of the tiles' storage, `mltool tile`'s alone: --format, --quality,
/// --commit-every, --passthrough.
const util::Options<TileJob>& tile_store_options();

/// --tissue MODEL.pt: opens job.tissue_model with job.open_segmenter on job.device (once: a job
/// whose segmenter is open is left as it is) and records it in job.settings.segmenter (file
/// name, SHA-256, contract). UsageError where there is no opener or the file breaks the
/// contract. Nothing to do for otsu and none.
void open_tissue_model(TileJob& job);

/// Checks a job before any slide is opened (its options against tile_options(), then
/// exactly one of mpp and level): UsageError for a bad setting.
void validate(const TileJob& job);

/// Tiles one slide into `store` (whose settings must already be adopted). A slide that is
/// complete in the store is skipped if it is the same slide (OpenSlide's quickhash), and
/// refused with InputError if another slide has its id. Leftovers of an interrupted run
/// are replaced. On failure the slide's partial tiles are removed and the error rethrown;
/// other slides of the store are untouched. A tile whose DICOMweb frame fails for good is left
/// out and the slide published "incomplete", listing it; a slide published so (by any run) has
/// those tiles fetched again and added, its records rewritten with each --commit-every tiles.
/// With `allow_missing_tiles` (--allow-missing-tiles) such a slide counts as done: "tiled"
/// when its failures are new, "skipped" when the store holds it so, and not fetched again.
SlideReport tile_slide(io::TileStore& store, const std::string& path, const TileJob& job,
                       bool allow_missing_tiles = false);

}  // namespace mltool::slide
