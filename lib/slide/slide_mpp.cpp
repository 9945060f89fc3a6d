// Where a slide's µm per level-0 pixel comes from: --slide-mpp-table, --slide-mpp, the
// slide's metadata, or (--mpp-from-power) the objective power it declares.
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>

#include "mltool/io/table.hpp"
#include "mltool/slide/geometry.hpp"
#include "mltool/slide/tiler.hpp"
#include "mltool/util/error.hpp"
#include "mltool/util/file.hpp"
#include "slide_mpp.hpp"

namespace mltool::slide {
namespace {

// `s` without surrounding blanks: " 0.5 " in a hand-written table is 0.5.
std::string trimmed(const std::string& s) {
  const auto a = s.find_first_not_of(" \t"), b = s.find_last_not_of(" \t");
  return a == std::string::npos ? "" : s.substr(a, b - a + 1);
}

std::optional<double> positive_number(const std::string& text) {
  if (text.empty()) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(text.c_str(), &end);
  if (errno != 0 || *end != '\0' || !std::isfinite(v) || v <= 0) return std::nullopt;
  return v;
}

}  // namespace

MppTable load_mpp_table(const std::string& path) {
  io::Table t;
  try {
    t = io::read_table(path);
  } catch (const FormatError& e) {  // a malformed or empty file is the user's input
    throw InputError(std::string(e.what()) + " (--slide-mpp-table)");
  }
  const auto column = [&](const std::string& name) {
    const auto it = std::find(t.columns.begin(), t.columns.end(), name);
    if (it == t.columns.end())
      throw InputError(path + ":1: --slide-mpp-table needs a header line with the columns " +
                       "slide,mpp; no column '" + name + "'");
    return static_cast<std::size_t>(it - t.columns.begin());
  };
  const std::size_t slide_col = column("slide"), mpp_col = column("mpp");
  MppTable table;
  table.path = path;
  for (std::size_t i = 0; i < t.rows.size(); ++i) {
    const std::string where = path + ":" + std::to_string(t.lines[i]);
    const std::string slide = trimmed(t.rows[i][slide_col]), text = trimmed(t.rows[i][mpp_col]);
    if (slide.empty()) throw InputError(where + ": the slide field is empty");
    const auto mpp = positive_number(text);
    if (!mpp || *mpp < kMinPlausibleMpp || *mpp > kMaxPlausibleMpp)
      throw InputError(where + ": mpp '" + text + "' of " + slide +
                       " is not a µm per pixel between " + std::to_string(kMinPlausibleMpp) +
                       " and " + std::to_string(kMaxPlausibleMpp));
    if (!table.mpp.emplace(slide, *mpp).second)
      throw InputError(where + ": slide " + slide + " is listed twice");
  }
  return table;
}

SlideMpp resolve_slide_mpp(const Slide& slide, const std::string& id, const TileJob& job) {
  const auto& rows = job.slide_mpp_table.mpp;
  for (const std::string& key : {slide.path(), util::absolute_path(slide.path()), id})
    if (const auto it = rows.find(key); it != rows.end()) return {it->second, "table"};
  if (job.slide_mpp) return {*job.slide_mpp, "override"};
  if (const auto mpp = slide_mpp(slide.geometry())) return {*mpp, "metadata"};
  if (job.mpp_from_power)
    if (const auto power = slide.property("openslide.objective-power"))
      if (const auto m = positive_number(*power);
          m && 10 / *m >= kMinPlausibleMpp && 10 / *m <= kMaxPlausibleMpp)
        return {10 / *m, "power"};
  return {std::nullopt, "none"};
}

}  // namespace mltool::slide
