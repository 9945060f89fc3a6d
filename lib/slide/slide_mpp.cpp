// Where a slide's µm per level-0 pixel comes from: --slide-mpp-table, --slide-mpp, the
// slide's metadata (checked against the tissue with --check-mpp), the tissue
// (--mpp-from-content), or (--mpp-from-power) the objective power it declares.
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>

#include "mltool/io/table.hpp"
#include "mltool/slide/geometry.hpp"
#include "mltool/slide/tiler.hpp"
#include "mltool/util/error.hpp"
#include "mltool/util/file.hpp"
#include "mltool/util/log.hpp"
#include "slide_mpp.hpp"

#include "mltool/util/options.hpp"

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

namespace {

std::string rounded(double v) { return decimal_text(v, 4); }

// tile's estimate: its tissue thumbnail and QC picture read the same level 0 of a small slide.
EstimateOptions shared_level0() {
  EstimateOptions options;
  options.share_level0 = true;
  return options;
}

// --check-mpp: the metadata's `mpp` against the tissue's estimate; `name` is the slide as
// given.
void check_metadata(const std::string& name, double mpp, const MppEstimate& e, CheckMpp check) {
  if (!e.mpp || (mpp >= *e.low && mpp <= *e.high)) return;
  const std::string what =
      "its metadata says " + rounded(mpp) + " µm/px but its tissue says " + estimate_text(e);
  if (check == CheckMpp::refuse)
    throw InputError(name + ": " + what +
                     "; refused (--check-mpp refuse). Give its µm/px with --slide-mpp X or "
                     "--slide-mpp-table CSV, or tile it at its metadata's with --check-mpp warn");
  log::warn(name + ": " + what +
            " (--check-mpp warn); tiled at the metadata's. Give its µm/px "
            "with --slide-mpp X or --slide-mpp-table CSV if that is wrong");
}

SlideMpp from_metadata_or_content(const Slide& slide, const std::string& id, const TileJob& job,
                                  std::optional<MppEstimate>& estimate) {
  const auto estimated = [&]() -> const MppEstimate& {
    if (!estimate) estimate = estimate_mpp(slide, shared_level0());
    return *estimate;
  };
  if (const auto mpp = slide_mpp(slide.geometry())) {
    if (job.check_mpp != CheckMpp::off)
      check_metadata(slide.path(), *mpp, estimated(), job.check_mpp);
    return {*mpp, MppSource::metadata};
  }
  if (job.mpp_from_content) {
    const MppEstimate& e = estimated();
    if (e.mpp && !e.uncertain) return {*e.mpp, MppSource::content};
    log::warn(id + ": no usable µm/px metadata, and the tissue's estimate is " + estimate_text(e) +
              ": not used (--mpp-from-content)");
  }
  if (job.mpp_from_power)
    if (const auto power = slide.property("openslide.objective-power"))
      if (const auto m = positive_number(*power);
          m && 10 / *m >= kMinPlausibleMpp && 10 / *m <= kMaxPlausibleMpp)
        return {10 / *m, MppSource::power};
  return {std::nullopt, MppSource::none};
}

}  // namespace

const char* to_string(MppSource source) {
  static const util::EnumNames<MppSource> names = {
      {MppSource::table, "table"},       {MppSource::override, "override"},
      {MppSource::metadata, "metadata"}, {MppSource::content, "content"},
      {MppSource::power, "power"},       {MppSource::none, "none"}};
  return util::name_of(names, source);
}

SlideMpp resolve_slide_mpp(const Slide& slide, const std::string& id, const TileJob& job,
                           bool estimate_too) {
  std::optional<MppEstimate> estimate;
  SlideMpp out{std::nullopt, MppSource::none};
  const auto& rows = job.slide_mpp_table.mpp;
  for (const std::string& key : {slide.path(), util::absolute_path(slide.path()), id})
    if (const auto it = rows.find(key); it != rows.end() && !out.mpp)
      out = {it->second, MppSource::table};
  if (!out.mpp && job.slide_mpp) out = {*job.slide_mpp, MppSource::override};
  if (!out.mpp) out = from_metadata_or_content(slide, id, job, estimate);
  if (estimate_too && !estimate) estimate = estimate_mpp(slide, shared_level0());
  out.estimate = std::move(estimate);
  return out;
}

void fit_target_to_estimate(SlideMpp& mpp, std::optional<double> target_mpp,
                            const std::string& name, const std::string& id) {
  if (mpp.source != MppSource::content || !target_mpp || !mpp.mpp || !mpp.estimate ||
      !mpp.estimate->low)
    return;
  const double target = *target_mpp, low = *mpp.estimate->low;
  if (target >= *mpp.mpp * (1 - kLevelTolerance)) return;  // level 0 resampled: plan_read's
  const std::string estimate = estimate_text(*mpp.estimate);
  if (target >= low * (1 - kLevelTolerance)) {
    mpp.mpp = target;
    mpp.level0_as_target = true;
    log::warn(id + ": --mpp " + rounded(target) + " lies inside the interval of the µm/px its " +
              "tissue gives, " + estimate + ": level 0 serves it, read as it is (no " +
              "resampling) and recorded as " + rounded(target) + " µm/px (--mpp-from-content)");
    return;
  }
  // The estimate itself is off by its bias (docs/info.md): the interval's fine end, not the
  // estimate, is the finest target this slide may serve.
  throw InputError(name + ": --mpp " + rounded(target) +
                   " is finer than this slide's level 0 can serve: its tissue gives " + estimate +
                   " (--mpp-from-content), so level 0 is at best " + rounded(low) +
                   " µm/px. Ask for --mpp " + rounded(low) +
                   " or coarser, or give the slide's µm/px with --slide-mpp X or "
                   "--slide-mpp-table CSV where it is known");
}

}  // namespace mltool::slide
