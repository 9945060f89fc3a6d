// What `mltool export h5` writes per slide in each layout, and the attributes of CLAM's and
// TRIDENT's files (not part of the public API; docs/export.md says where each name comes
// from in their code).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "mltool/features/h5_interop.hpp"
#include "mltool/io/h5.hpp"

namespace mltool::features::detail {

/// The attributes CLAM and TRIDENT put on `coords`, all of them, from a tile store's
/// slides/<id> record; `outdir` is the output directory (savetodir, save_path).
nlohmann::json coords_attributes(const nlohmann::json& slide, const std::string& id,
                                 const std::string& outdir);

/// The magnification TRIDENT gives a slide of `mpp` µm per level-0 pixel
/// (WSI._fetch_magnification: 0.25 → 40, 0.5 → 20; an integer), or 10 / mpp rounded as
/// rounded_magnification where TRIDENT has none (mpp ≥ 2.4).
nlohmann::json trident_magnification(double mpp);
/// `m` rounded to 2 decimals, an integer when whole (20.000000000000004 → 20).
nlohmann::json rounded_magnification(double m);
/// A magnification as TRIDENT names its directories (Processor._fmt_mag): 20, 2.5.
std::string magnification_text(const nlohmann::json& m);

/// One file of a slide's export.
struct LayoutFile {
  std::string path;              ///< relative to the output directory
  bool pt = false;               ///< torch.save of the features tensor; else HDF5:
  bool features = true;          ///< with dataset `features`
  bool coords = true;            ///< with dataset `coords`
  std::uint64_t chunk_rows = 0;  ///< rows per HDF5 chunk; 0: about 1 MiB
  io::H5Element coords_element = io::H5Element::int64;
  nlohmann::json features_attrs = nlohmann::json::object();
  nlohmann::json coords_attrs = nlohmann::json::object();
};

/// The files of slide `slide` in `layout` under `outdir` (absolute): `attrs` are its coords
/// attributes (coords_attributes', or those an imported file had), null for a slide
/// embedding, which has no coords. InputError naming the slide and the missing attributes
/// when `attrs` lack what the layout's reader needs (TRIDENT's magnifications).
std::vector<LayoutFile> layout_files(ExportLayout layout, ExportFormat format,
                                     const std::string& slide, const nlohmann::json& attrs,
                                     const std::string& encoder, const std::string& outdir);

}  // namespace mltool::features::detail
