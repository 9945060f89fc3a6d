// The options of `mltool tile`, declared once: the tiling of one slide (tile_options, on
// TileJob: validate() checks a job against it) and the run over a list of slides
// (cohort_options, on CohortJob). apps/cmd_tile.cpp binds both; docs/tile.md's synopsis is
// checked against them (tests/cli/options_docs_test.py).
#include <cmath>

#include "mltool/io/dicomweb_options.hpp"
#include "mltool/slide/cohort.hpp"
#include "mltool/slide/slide_mpp_option.hpp"
#include "mltool/util/common_options.hpp"
#include "mltool/util/shard.hpp"

namespace mltool::slide {

const util::EnumNames<ReaderChoice> kReaderChoices = {{ReaderChoice::automatic, "auto"},
                                                      {ReaderChoice::openslide, "openslide"}};
const util::EnumNames<Passthrough> kPassthroughChoices = {{Passthrough::automatic, "auto"},
                                                          {Passthrough::never, "never"}};
const util::EnumNames<CheckMpp> kCheckMppChoices = {
    {CheckMpp::off, "off"}, {CheckMpp::warn, "warn"}, {CheckMpp::refuse, "refuse"}};

namespace {

using J = TileJob;

// --mpp and --level: one of them (--mpp kDefaultMpp unless --level).
util::Option<J> mpp_option() {
  return util::custom<J>(
             "--mpp", "NUMBER", "Target µm per pixel (default 0.5 unless --level)",
             [](J& j, const std::string& text) {
               j.settings.mpp = util::parse_real(text, "--mpp");
             },
             [](const J& j) {
               const auto& s = j.settings;
               return s.mpp     ? nlohmann::json(*s.mpp)
                      : s.level ? nlohmann::json()
                                : nlohmann::json(kDefaultMpp);
             })
      .check([](const J& j) { return !j.settings.mpp || *j.settings.mpp > 0; },
             "a positive number");
}

util::Option<J> level_option() {
  return util::custom<J>(
             "--level", "INT", "Read this pyramid level as is instead of --mpp",
             [](J& j, const std::string& text) {
               const auto v = util::parse_integer(text, "--level");
               if (v < 0 || v > 1000) throw UsageError("--level must be between 0 and 1000");
               j.settings.level = static_cast<int>(v);
             },
             [](const J& j) {
               return j.settings.level ? nlohmann::json(*j.settings.level) : nlohmann::json();
             })
      .check([](const J& j) { return !j.settings.level || *j.settings.level >= 0; }, ">= 0");
}

// --slide-mpp-table and --mag: the slides' µm/px given by a table, and the target as a
// magnification.
util::Option<J> slide_mpp_table_option() {
  return util::custom<J>(
      "--slide-mpp-table", "CSV",
      "µm per level-0 pixel per slide: a CSV file with the columns slide (a path as given "
      "or a slide id) and mpp; a listed slide takes it over --slide-mpp and its metadata",
      [](J& j, const std::string& text) { j.slide_mpp_table = load_mpp_table(text); },
      [](const J& j) {
        return j.slide_mpp_table.path.empty() ? nlohmann::json()
                                              : nlohmann::json(j.slide_mpp_table.path);
      });
}

util::Option<J> mag_option() {
  return util::custom<J>(
             "--mag", "M",
             "Target objective power instead of --mpp: 10 / M µm per pixel (20 → 0.5, 40 → "
             "0.25)",
             [](J& j, const std::string& text) { j.mag = util::parse_real(text, "--mag"); },
             [](const J& j) { return j.mag ? nlohmann::json(*j.mag) : nlohmann::json(); })
      .check([](const J& j) { return !j.mag || (*j.mag >= 0.5 && *j.mag <= 200); },
             "between 0.5 and 200");
}

// --tissue: otsu, none, or a segmenter's file (opened by tile_slides, before any slide).
void parse_tissue(J& j, const std::string& text) {
  j.tissue_model.clear();
  if (text == "otsu" || text == "none") {
    j.settings.tissue = util::parse_enum(io::kTissueDetections, text, "--tissue");
    return;
  }
  check_segmenter_file(text, "otsu, none");
  j.settings.tissue = io::TissueDetection::model;
  j.tissue_model = text;
}

// --tissue and --max-artifact.
util::Option<J> tissue_option() {
  return util::custom<J>(
      "--tissue", "otsu|none|MODEL.pt",
      "Tissue detection: otsu (saturation on a thumbnail), none (every tile), or a "
      "TorchScript segmenter that finds tissue and artifacts (docs/tile.md)",
      [](J& j, const std::string& text) { parse_tissue(j, text); },
      [](const J& j) {
        return nlohmann::json(j.settings.tissue == io::TissueDetection::model
                                  ? j.tissue_model
                                  : util::name_of(io::kTissueDetections, j.settings.tissue));
      });
}

util::Option<J> max_artifact_option() {
  return util::option_at<J>(
             "--max-artifact", [](J& j) -> double& { return j.settings.max_artifact; },
             "--tissue MODEL.pt: drop tiles with more than this share in the model's artifact "
             "classes")
      .at_least(0)
      .at_most(1);
}

// --roi, --roi-class, --min-roi, --roi-missing (roi.hpp).
util::Option<J> roi_path_option() {
  return util::option_at<J>(
      "--roi", [](J& j) -> std::string& { return j.roi.path; },
      "Tile only inside regions drawn in QuPath: a GeoJSON file as QuPath's Export objects "
      "as GeoJSON writes it (level-0 pixels), or a directory of <slide id>.geojson");
}

util::Option<J> roi_class_option() {
  return util::option_at<J>(
      "--roi-class", [](J& j) -> std::vector<std::string>& { return j.roi.classes; },
      "Keep the regions of this QuPath class only (repeatable); default: every region");
}

util::Option<J> min_roi_option() {
  return util::option_at<J>(
             "--min-roi", [](J& j) -> double& { return j.roi.min_roi; },
             "Keep tiles with at least this share of their area inside the regions")
      .at_least(0)
      .at_most(1);
}

util::Option<J> roi_missing_option() {
  return util::choice_at<J>(
      "--roi-missing", [](J& j) -> io::RoiMissing& { return j.roi.missing; }, io::kRoiMissing,
      "A slide without an ROI file in the --roi directory: refuse, skip it, or tile it whole "
      "(all)");
}

// "jpeg or png": io::kEncodings' names.
std::string encodings_text() {
  std::vector<std::string> names;
  for (const auto& [encoding, name] : io::encoding_names()) names.emplace_back(name);
  return util::one_of_text(names);
}

}  // namespace

const util::Options<TileJob>& tile_options() {
  using util::choice_at, util::option_at;
  static const util::Options<TileJob> table = util::joined<J>(
      {{
           option_at<J>(
               "--tile-size", [](J& j) -> int& { return j.settings.tile_size; },
               "Tile side in pixels"),
           mpp_option(),
           level_option(),
           slide_mpp_option(&J::slide_mpp,
                            "The slides' µm per level-0 pixel, instead of their metadata (for "
                            "slides without a usable one)"),
           slide_mpp_table_option(),
           mag_option(),
           util::flag(
               "--mpp-from-power", &J::mpp_from_power,
               "A slide without a usable µm/px is read at 10 / the objective power it declares"),
           util::flag(
               "--mpp-from-content", &J::mpp_from_content,
               "A slide without a usable µm/px is read at the µm/px estimated from its tissue "
               "(the size of its nuclei), unless the estimate is uncertain"),
           util::choice(
               "--check-mpp", &J::check_mpp, kCheckMppChoices,
               "Where a slide's µm/px metadata disagrees with the µm/px estimated from its "
               "tissue: off, warn, or refuse the slide"),
           option_at<J>(
               "--overlap", [](J& j) -> int& { return j.settings.overlap; },
               "Pixels shared by neighbouring tiles"),
           tissue_option(),
           choice_at<J>(
               "--artifacts", [](J& j) -> io::ArtifactFilter& { return j.settings.artifacts; },
               io::kArtifactFilters,
               "Pen ink (blue, green, black), black borders and out-of-slide areas: exclude (not "
               "tissue) or keep (judged by saturation like the rest)"),
           option_at<J>(
               "--min-tissue", [](J& j) -> double& { return j.settings.min_tissue; },
               "Keep tiles with at least this tissue fraction")
               .at_least(0)
               .at_most(1),
           max_artifact_option(),
           roi_path_option(),  // --roi: regions of interest drawn in QuPath (roi.hpp)
           roi_class_option(),
           min_roi_option(),
           roi_missing_option(),
           util::option(
               "--qc", &J::qc_dir,
               "Write a QC picture per slide and the run's index.html into this directory"),
           util::option("--qc-size", &J::qc_size,
                        "Long side of the slide in a QC picture, in pixels")
               .at_least(256)
               .at_most(8192),
           util::choice(
               "--reader", &J::reader, kReaderChoices,
               "Tile decoder: auto (libvips' TIFF decoder for plain TIFF pyramids, checked "
               "against OpenSlide; OpenSlide otherwise) or openslide"),
       },
       io::dicomweb_options(&J::dicomweb)});
  return table;
}

std::string given_tile_option(const TileJob& job) {
  // --mpp given as the default 0.5 reads as the default; its field says it was given.
  if (job.settings.mpp) return "--mpp";
  // The --dicomweb-* options read a coordinates store's slides too: not refused there.
  TileJob others = job;
  others.dicomweb = {};
  return util::first_changed(tile_options(), others);
}

const util::Options<TileJob>& tile_store_options() {
  using util::choice_at, util::option_at;
  static const util::Options<TileJob> table = {
      choice_at<J>(
          "--format", [](J& j) -> io::TileEncoding& { return j.settings.encoding; },
          io::encoding_names(), "Tile encoding: " + encodings_text()),
      option_at<J>(
          "--quality", [](J& j) -> int& { return j.settings.quality; }, "JPEG quality")
          .at_least(1)
          .at_most(100),
      util::option("--commit-every", &J::commit_every, "Tiles per LMDB transaction").at_least(1),
      util::choice("--passthrough", &J::passthrough, kPassthroughChoices,
                   "Store a tile that is exactly one of the slide's own JPEG TIFF tiles or DICOM "
                   "frames as its compressed bytes, not decoded and encoded again (auto; "
                   "--format jpeg only), or never"),
      util::device_option(&J::device),
  };
  return table;
}

const util::Options<CohortJob>& cohort_options() {
  using C = CohortJob;
  static const util::Options<CohortJob> table = {
      util::option("-o,--output", &C::store,
                   "The tile store (an LMDB directory; created or appended to)")
          .required(),
      util::option("--shard", &C::shard,
                   "Take slides I, I+N, I+2N, ... of the list (I/N, 0-based), or auto: I and N "
                   "from the job array (Slurm, Kubernetes)")
          .check([](const C& c) { return util::shard_syntax_ok(c.shard); },
                 "I/N with 0 <= I < N (e.g. 0/4), or auto"),
      util::shards_option(&C::shards),
      util::keep_going_option(&C::keep_going),
      util::flag("--allow-missing-tiles", &C::allow_missing_tiles,
                 "A slide whose tiles' DICOMweb frames failed after their retries counts as "
                 "done without them (they stay listed in its done marker; no exit 4)"),
      util::overwrite_option(&C::overwrite),
      util::flag("--allow-partial", &C::allow_partial,
                 "--merge: join the shard stores there are, naming the missing or unfinished"),
  };
  return table;
}

namespace {

// A slide's failed tiles: {"key", "url", "status"} each.
nlohmann::json failed_tiles(const SlideReport& r) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& f : r.failed_tiles)
    out.push_back(
        {{"key", io::tile_key(r.id, f.row, f.col)}, {"url", f.url}, {"status", f.status}});
  return out;
}

nlohmann::json slide_json(const SlideReport& r) {
  if (r.status == SlideStatus::failed)
    return {{"path", r.path}, {"id", r.id}, {"status", to_string(r.status)}, {"error", r.error}};
  nlohmann::json out = {
      {"path", r.path},
      {"id", r.id},
      {"status", to_string(r.status)},
      {"tiles", r.tiles},
      {"grid_tiles", r.grid_tiles},
      {"passthrough", r.passthrough},
      {"tissue_fraction",
       r.tissue_fraction ? nlohmann::json(*r.tissue_fraction) : nlohmann::json(nullptr)},
      {"seconds", r.seconds},
      {"reader", r.reader},
      {"reader_version", r.reader_version},
      {"mpp", r.mpp ? nlohmann::json(*r.mpp) : nlohmann::json(nullptr)},
      {"mpp_source", r.mpp_source},
      {"mpp_level0_as_target", r.mpp_level0_as_target},
      {"mpp_estimate", r.mpp_estimate ? to_json(*r.mpp_estimate) : nlohmann::json()},
      {"failed_tiles", failed_tiles(r)}};
  if (r.status == SlideStatus::incomplete) out["error"] = r.error;
  if (r.segment_seconds) {  // --tissue MODEL.pt
    out["segment_seconds"] = *r.segment_seconds;
    nlohmann::json classes = nlohmann::json::object();
    for (const auto& [name, share] : r.class_fractions) classes[name] = share;
    out["class_fractions"] = std::move(classes);
  }
  return out;
}

}  // namespace

nlohmann::json to_json(const CohortReport& r, const std::string& store) {
  nlohmann::json slides = nlohmann::json::array();
  for (const auto& s : r.slides) slides.push_back(slide_json(s));
  nlohmann::json out = {{"command", "tile"},          {"store", store},      {"slides", slides},
                        {"tiles", r.tiles},           {"failed", r.failed},  {"empty", r.empty},
                        {"incomplete", r.incomplete}, {"threads", r.threads}};
  if (!r.shard.empty()) out["shard"] = r.shard;
  return out;
}

nlohmann::json to_json(const std::vector<io::MergeReport>& merged, const std::string& store) {
  nlohmann::json inputs = nlohmann::json::array();
  std::int64_t tiles = 0;
  for (const auto& r : merged) {
    inputs.push_back(
        {{"path", r.path}, {"slides", r.slides}, {"skipped", r.skipped}, {"tiles", r.tiles}});
    tiles += r.tiles;
  }
  return {{"command", "tile"}, {"merge", inputs}, {"store", store}, {"tiles", tiles}};
}

}  // namespace mltool::slide
