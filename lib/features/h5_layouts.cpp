// The files and attributes of each `export h5` layout (h5_layouts.hpp). The names, dtypes,
// chunk shapes and attributes are those of CLAM's and TRIDENT's own writers, read at the
// commits docs/export.md names:
//   TRIDENT trident/IO.py save_h5 (chunks (1, ...), maxshape (None, ...)), coords_to_h5 (the
//     coords attributes), trident/wsi_objects/WSI.py extract_tissue_coords
//     (patches/<slide>_patches.h5), extract_patch_features (features attributes name,
//     savetodir, encoder), _fetch_magnification; trident/Processor.py run_patching_job
//     (<mag>x_<ps>px_<ov>px_overlap, _fmt_mag), run_patch_feature_extraction_job
//     (features_<encoder>/).
//   CLAM wsi_core/WholeSlideImage.py process_contour (the coords attributes of patching),
//     extract_features_fp.py (h5_files/: float32 features, int32 coords, no attributes;
//     pt_files/: torch.save of the features), utils/file_utils.py save_hdf5 (chunks of 32
//     rows, maxshape (None, ...)).
#include "h5_layouts.hpp"

#include <cmath>
#include <cstdio>

#include "mltool/util/error.hpp"
#include "mltool/util/file.hpp"

namespace mltool::features::detail {
namespace {

using json = nlohmann::json;

// The coords attributes each tool writes, and those its reader cannot do without.
const std::vector<std::string> kTridentCoords = {
    "patch_size", "patch_size_level0", "level0_magnification", "target_magnification", "overlap",
    "name",       "savetodir",         "level0_width",         "level0_height"};
const std::vector<std::string> kTridentNeeds = {
    "patch_size", "patch_size_level0", "level0_magnification", "target_magnification", "overlap"};
constexpr std::uint64_t kTridentChunkRows = 1;  // save_h5: chunk_shape = (1,) + shape[1:]
constexpr std::uint64_t kClamChunkRows = 32;    // save_hdf5(chunk_size=32)

json pick(const json& attrs, const std::vector<std::string>& names) {
  json out = json::object();
  for (const auto& n : names)
    if (attrs.contains(n)) out[n] = attrs[n];
  return out;
}

// "<mag>x_<ps>px_<ov>px_overlap", TRIDENT's patching directory of a slide's attributes.
std::string trident_patch_dir(const std::string& slide, const json& attrs) {
  std::string missing;
  for (const auto& n : kTridentNeeds)
    if (!attrs.contains(n) || !attrs[n].is_number()) missing += (missing.empty() ? "" : ", ") + n;
  if (!missing.empty())
    throw InputError("slide '" + slide + "': --layout trident needs the coords attributes " +
                     missing +
                     ", which its source lacks (a store imported from CLAM's files has none); "
                     "export it from the tile store's features, or use --layout flat or clam");
  return magnification_text(attrs["target_magnification"]) + "x_" +
         std::to_string(attrs["patch_size"].get<std::int64_t>()) + "px_" +
         std::to_string(attrs["overlap"].get<std::int64_t>()) + "px_overlap";
}

// A directory name of an encoder's name: '/' cannot be in one.
std::string dir_safe(std::string name) {
  for (char& c : name)
    if (c == '/') c = '_';
  return name;
}

std::vector<LayoutFile> trident_files(const std::string& slide, const json& attrs,
                                      const std::string& encoder, const std::string& outdir) {
  const std::string coords_dir = trident_patch_dir(slide, attrs);
  const std::string features_dir = util::join_path(coords_dir, "features_" + dir_safe(encoder));
  json coords_attrs = pick(attrs, kTridentCoords);
  coords_attrs["name"] = slide;
  coords_attrs["savetodir"] = util::join_path(outdir, coords_dir);
  LayoutFile patches;  // extract_tissue_coords: coords only
  patches.path = util::join_path(coords_dir, "patches/" + slide + "_patches.h5");
  patches.features = false;
  patches.chunk_rows = kTridentChunkRows;
  patches.coords_attrs = coords_attrs;
  LayoutFile features;  // extract_patch_features: the patches file's coords and attributes
  features.path = util::join_path(features_dir, slide + ".h5");
  features.chunk_rows = kTridentChunkRows;
  features.coords_attrs = coords_attrs;
  features.features_attrs = {
      {"name", slide}, {"savetodir", util::join_path(outdir, features_dir)}, {"encoder", encoder}};
  return {patches, features};
}

std::vector<LayoutFile> clam_files(const std::string& slide) {
  LayoutFile h5;  // compute_w_loader: features float32, coords int32, no attributes
  h5.path = "h5_files/" + slide + ".h5";
  h5.chunk_rows = kClamChunkRows;
  h5.coords_element = io::H5Element::int32;
  LayoutFile pt;
  pt.path = "pt_files/" + slide + ".pt";
  pt.pt = true;
  return {h5, pt};
}

}  // namespace

json trident_magnification(double mpp) {
  // WSI._fetch_magnification's table: the first bound above mpp.
  static const std::pair<double, int> kTable[] = {{0.16, 80}, {0.2, 60}, {0.3, 40},
                                                  {0.6, 20},  {1.2, 10}, {2.4, 5}};
  for (const auto& [bound, mag] : kTable)
    if (mpp < bound) return mag;
  return rounded_magnification(10.0 / mpp);
}

json rounded_magnification(double m) {
  const double r = std::round(m * 100.0) / 100.0;
  if (r == std::round(r)) return static_cast<std::int64_t>(std::llround(r));
  return r;
}

std::string magnification_text(const json& m) {
  if (m.is_number_integer()) return std::to_string(m.get<std::int64_t>());
  const double v = m.get<double>();
  if (std::abs(v - std::round(v)) < 1e-9) return std::to_string(std::llround(v));
  char text[32];
  std::snprintf(text, sizeof text, "%g", v);  // _fmt_mag: f"{m:g}"
  return text;
}

json coords_attributes(const json& slide, const std::string& id, const std::string& outdir) {
  try {
    const int level = slide.at("level").get<int>();
    const json& dims = slide.at("levels").at(level);
    const double downsample = slide.at("level_downsample").get<double>();
    const double target_downsample = slide.at("target_downsample").get<double>();
    const std::int64_t level_dim[2] = {dims.at("width").get<std::int64_t>(),
                                       dims.at("height").get<std::int64_t>()};
    json a = {
        {"patch_size", slide.at("tile_size").get<std::int64_t>()},
        {"patch_level", level},
        {"patch_size_level0", std::llround(slide.at("size_level0").get<double>())},
        {"overlap", slide.at("overlap").get<std::int64_t>()},
        {"downsample", {downsample, downsample}},
        {"level_dim", {level_dim[0], level_dim[1]}},
        {"downsampled_level_dim", {level_dim[0], level_dim[1]}},
        {"level0_width", slide.at("width").get<std::int64_t>()},
        {"level0_height", slide.at("height").get<std::int64_t>()},
        {"name", id},
        {"savetodir", outdir},
        {"save_path", outdir},
    };
    // Level 0 as TRIDENT rates it; the tiles at 10 / (their µm per pixel). Without µm/px,
    // level 0 is taken for 40x, so that the ratio, which is what readers use, stays exact.
    const json mpp = slide.value("mpp", json());
    a["level0_magnification"] =
        mpp.is_number() ? trident_magnification(mpp.get<double>()) : json(40);
    a["target_magnification"] =
        rounded_magnification(mpp.is_number() ? 10.0 / (mpp.get<double>() * target_downsample)
                                              : 40.0 / target_downsample);
    return a;
  } catch (const json::exception& e) {
    throw FormatError("tile store meta 'slides/" + id + "': " + e.what());
  }
}

std::vector<LayoutFile> layout_files(ExportLayout layout, ExportFormat format,
                                     const std::string& slide, const json& attrs,
                                     const std::string& encoder, const std::string& outdir) {
  if (layout == ExportLayout::trident) return trident_files(slide, attrs, encoder, outdir);
  if (layout == ExportLayout::clam) return clam_files(slide);
  LayoutFile f;
  f.path = slide + (format == ExportFormat::pt ? ".pt" : ".h5");
  f.pt = format == ExportFormat::pt;
  f.coords = !attrs.is_null();
  f.features_attrs = {{"name", slide}, {"savetodir", outdir}, {"encoder", encoder}};
  if (f.coords) f.coords_attrs = attrs;
  return {f};
}

}  // namespace mltool::features::detail
