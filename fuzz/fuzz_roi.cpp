// libFuzzer target: arbitrary bytes as a QuPath GeoJSON file (tile --roi, lib/slide/roi.cpp):
// parsed with every class kept, with one class kept, and checked only (Roi::parse); where that
// succeeds, the union is measured. The oracle: parse returns or throws mltool::Error (anything
// else, a crash, a hang or a sanitizer report is a finding), and what it returns holds together:
//   - regions and skipped features are counts (>= 0), the area finite and >= 0, and 0 without
//     regions;
//   - the bounding box is finite and ordered (x0 <= x1, y0 <= y1);
//   - share() of boxes over the bounding box is within [0, 1]; a box apart from it shares 0;
//   - every ring of the outline has at least 4 finite positions.
//
// Built with lib/slide/roi.cpp and GEOS's C library (fuzz/CMakeLists.txt): the fuzz build has
// no slide support, and the reader needs none of it.
//
// Seeds: fuzz/seeds/fuzz_roi (a FeatureCollection with a hole and classes, a bare Feature with
// a MultiPolygon, an array with a Point and a self-intersecting bow tie).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

#include "fuzz_check.hpp"
#include "mltool/slide/roi.hpp"
#include "mltool/util/error.hpp"
#include "mltool/util/log.hpp"

const char* const kFuzzTarget = "fuzz_roi";

namespace {

using mltool::slide::Roi;

void check_share(const Roi& roi, double x, double y, double size) {
  const double s = roi.share(x, y, size);
  if (!(s >= 0 && s <= 1)) finding("a share outside [0, 1]");
}

void check_roi(const Roi& roi) {
  if (roi.regions() < 0 || roi.skipped() < 0) finding("a negative count");
  const double area = roi.area();
  if (!std::isfinite(area) || area < 0) finding("an area not finite and >= 0");
  if (roi.regions() == 0 && area != 0) finding("an area without regions");
  const auto b = roi.bounds();
  if (b.size() != 4) finding("bounds are not four numbers");
  for (const double v : b)
    if (!std::isfinite(v)) finding("a bound not finite");
  if (b[0] > b[2] || b[1] > b[3]) finding("bounds out of order");
  for (const auto& ring : roi.rings()) {
    if (ring.size() < 4) finding("a ring of fewer than 4 positions");
    for (const auto& [x, y] : ring)
      if (!std::isfinite(x) || !std::isfinite(y)) finding("a ring position not finite");
  }
  const double w = b[2] - b[0], h = b[3] - b[1];
  const double size = std::max(w, h) / 4;
  if (!(size > 0) || !std::isfinite(size) || size < 1e-6 || size > 1e12) return;
  for (int row = 0; row < 4; ++row)
    for (int col = 0; col < 4; ++col) check_share(roi, b[0] + col * size, b[1] + row * size, size);
  if (roi.share(b[2] + size, b[3] + size, size) != 0) finding("a box apart shares");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const bool quiet = (mltool::log::set_level(mltool::log::Level::error), true);
  (void)quiet;
  const std::string text(reinterpret_cast<const char*>(data), size);
  const std::vector<std::vector<std::string>> choices = {{}, {"Tumor"}};
  for (const auto& classes : choices)
    expect_clean("Roi::parse", [&] { check_roi(Roi::parse(text, "fuzz.geojson", classes)); });
  expect_clean("Roi::parse (lenient)", [&] { Roi::parse(text, "fuzz.geojson", {}, true); });
  return 0;
}
