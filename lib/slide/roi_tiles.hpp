// tile --roi in a slide's tiling (not a public header; tiler.cpp's): the kept tiles filtered by
// their share inside the regions, the slide's record, the resume check and the QC overlay.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "mltool/io/tile_store.hpp"
#include "mltool/slide/qc.hpp"
#include "mltool/slide/roi.hpp"
#include "tile_records.hpp"

namespace mltool::slide {

/// With --roi: keeps the tiles of selection.kept (those that passed the tissue test) whose share
/// inside `roi`'s regions is at least `min_roi`, each with its share (KeptTile::roi), records
/// `roi` in selection.roi and as record["roi"] (roi_json). Nothing without --roi.
void apply_roi(Selection& selection, nlohmann::json& record, const SlideRoi& roi,
               double size_level0, double min_roi);

/// InputError where slide `id`, in the store already (complete, or incomplete and to be
/// filled), was tiled with other regions than `roi` (another file content, or a file where it
/// had none or the other way round): its tiles were chosen by them. Nothing without --roi.
void require_same_roi(const io::TileStore& store, const std::string& id, const SlideRoi& roi,
                      const std::string& path);

/// The regions' outlines in the QC picture (scaled by sx, sy from level 0) and the caption's
/// line saying what they kept. Nothing without --roi.
void roi_overlay(const Selection& selection, double sx, double sy, double min_roi,
                 QcOverlay& overlay, QcCaption& caption);

}  // namespace mltool::slide
