// Where a slide's µm per level-0 pixel comes from: --slide-mpp-table, --slide-mpp, the
// slide's metadata, or (--mpp-from-power) the objective power it declares.
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <fstream>

#include "mltool/slide/geometry.hpp"
#include "mltool/slide/tiler.hpp"
#include "mltool/util/error.hpp"
#include "mltool/util/file.hpp"
#include "slide_mpp.hpp"

namespace mltool::slide {
namespace {

// The fields of one CSV line: commas separate, double quotes enclose ("" is a quote).
std::vector<std::string> csv_fields(const std::string& line) {
  std::vector<std::string> out(1);
  bool quoted = false;
  for (std::size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted && c == '"' && i + 1 < line.size() && line[i + 1] == '"') {
      out.back() += '"';
      ++i;
    } else if (c == '"') {
      quoted = !quoted;
    } else if (c == ',' && !quoted) {
      out.emplace_back();
    } else if (c != '\r' || i + 1 != line.size()) {
      out.back() += c;
    }
  }
  for (auto& f : out) {  // surrounding blanks are not part of a value
    const auto a = f.find_first_not_of(" \t"), b = f.find_last_not_of(" \t");
    f = a == std::string::npos ? "" : f.substr(a, b - a + 1);
  }
  return out;
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
  std::ifstream in(path);
  if (!in) throw InputError(sys_message(path, "cannot read --slide-mpp-table", errno));
  MppTable table;
  table.path = path;
  std::string line;
  std::size_t slide_col = 0, mpp_col = 0, line_no = 0;
  auto where = [&] { return path + ":" + std::to_string(line_no); };
  if (!std::getline(in, line)) throw InputError(at_file(path, "--slide-mpp-table is empty"));
  ++line_no;
  {
    const auto header = csv_fields(line);
    const auto find = [&](const std::string& name) {
      for (std::size_t i = 0; i < header.size(); ++i)
        if (header[i] == name) return i;
      throw InputError(where() + ": --slide-mpp-table needs a header line with the columns " +
                       "slide,mpp; no column '" + name + "'");
    };
    slide_col = find("slide");
    mpp_col = find("mpp");
  }
  while (std::getline(in, line)) {
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const auto fields = csv_fields(line);
    if (fields.size() <= std::max(slide_col, mpp_col))
      throw InputError(where() + ": " + std::to_string(fields.size()) + " fields, the header has " +
                       std::to_string(std::max(slide_col, mpp_col) + 1) + " or more");
    const std::string& slide = fields[slide_col];
    if (slide.empty()) throw InputError(where() + ": the slide field is empty");
    const auto mpp = positive_number(fields[mpp_col]);
    if (!mpp || *mpp < kMinPlausibleMpp || *mpp > kMaxPlausibleMpp)
      throw InputError(where() + ": mpp '" + fields[mpp_col] + "' of " + slide +
                       " is not a µm per pixel between " + std::to_string(kMinPlausibleMpp) +
                       " and " + std::to_string(kMaxPlausibleMpp));
    if (!table.mpp.emplace(slide, *mpp).second)
      throw InputError(where() + ": slide " + slide + " is listed twice");
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
