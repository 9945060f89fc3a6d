// `mltool info`: a slide's format, levels, resolution metadata and what the tissue says of
// it (info.hpp).
#include "mltool/slide/info.hpp"

#include <cmath>
#include <cstdlib>
#include <sstream>

#include "flat_image.hpp"
#include "mltool/io/dicomweb_options.hpp"
#include "mltool/io/tile_store.hpp"
#include "mltool/util/common_options.hpp"
#include "mltool/util/error.hpp"
#include "mltool/util/parallel.hpp"

namespace mltool::slide {

const util::Options<InfoJob>& info_options() {
  static const util::Options<InfoJob> table = util::joined<InfoJob>(
      {{
           util::option("--regions", &InfoJob::regions,
                        "Tissue regions of the finest level the µm/px estimate reads (768 px each)")
               .at_least(1)
               .at_most(64),
           util::custom<InfoJob>(
               "--tissue", "otsu|MODEL.pt",
               "The tissue share from Otsu's threshold on a thumbnail, or from a TorchScript "
               "segmenter (docs/tile.md)",
               [](InfoJob& j, const std::string& text) {
                 if (text != "otsu") check_segmenter_file(text, "otsu");
                 j.tissue_model = text == "otsu" ? "" : text;
               },
               [](const InfoJob& j) {
                 return nlohmann::json(j.tissue_model.empty() ? "otsu" : j.tissue_model);
               }),
           util::device_option(&InfoJob::device),
       },
       io::dicomweb_options(&InfoJob::dicomweb)});
  return table;
}

namespace {

std::string round_text(double v, double digits) {
  return decimal_text(v, static_cast<int>(digits));
}

bool plausible(double mpp) { return mpp >= kMinPlausibleMpp && mpp <= kMaxPlausibleMpp; }

MetadataMpp from_value(std::optional<double> mpp, std::string source) {
  MetadataMpp m;
  m.source = std::move(source);
  if (!mpp || *mpp <= 0)
    m.problem = "missing";
  else if (!plausible(*mpp))
    m.problem = "implausible " + round_text(*mpp, 4) + " µm/px";
  else
    m.mpp = mpp;
  return m;
}

bool is_centimeter(const std::string& unit) { return unit == "centimeter" || unit == "cm"; }
bool is_inch(const std::string& unit) { return unit == "inch" || unit == "in"; }

// `per_unit` pixels per `unit` in dots per inch (0 for a unit that is neither): libvips
// writes its resolution in centimetres, so its 72 dpi is 28.35 px/cm.
double dots_per_inch(double per_unit, const std::string& unit) {
  return is_inch(unit) ? per_unit : is_centimeter(unit) ? per_unit * 2.54 : 0;
}

// A resolution of `per_unit` pixels per `unit`, as TIFF tags or libvips give it.
MetadataMpp from_resolution(std::optional<double> per_unit, const std::string& unit,
                            std::string source) {
  if (!per_unit || *per_unit <= 0) return {std::nullopt, source, "missing"};
  if (const double dpi = dots_per_inch(*per_unit, unit); is_placeholder_dpi(dpi))
    return {std::nullopt, source, "placeholder " + round_text(dpi, 1) + " dpi"};
  if (is_centimeter(unit)) return from_value(10000.0 / *per_unit, source);
  if (is_inch(unit)) return from_value(25400.0 / *per_unit, source);
  return {std::nullopt, source, "resolution unit " + (unit.empty() ? "none" : unit)};
}

// A flat image: libvips gives pixels per mm whatever the unit, and 1 px/mm when the file
// has no resolution at all.
MetadataMpp flat_metadata(const Slide& slide) {
  const auto px_per_mm = property_number(slide.property("flat.xres-px-per-mm"));
  const std::string unit = slide.property("flat.resolution-unit").value_or("");
  const std::string source = "flat image resolution";
  if (!px_per_mm || *px_per_mm <= 0 || (unit.empty() && std::abs(*px_per_mm - 1) < 1e-9))
    return {std::nullopt, source, "missing"};
  if (is_placeholder_dpi(*px_per_mm * 25.4))
    return {std::nullopt, source, "placeholder " + round_text(*px_per_mm * 25.4, 1) + " dpi"};
  return from_value(1000.0 / *px_per_mm, source);
}

}  // namespace

MetadataMpp metadata_mpp(const Slide& slide) {
  if (slide.flat_info()) return flat_metadata(slide);
  if (slide.dicomweb()) return from_value(slide_mpp(slide.geometry()), "DICOM PixelSpacing");
  // OpenSlide 4 derives openslide.mpp-x from a generic TIFF's resolution tags, placeholders
  // included (72 dpi reads as 352.8 µm/px, or 352.7 from libvips' 28.35 px/cm): name the
  // placeholder for what it is.
  const auto resolution = property_number(slide.property("tiff.XResolution"));
  const std::string unit = slide.property("tiff.ResolutionUnit").value_or("");
  if (resolution && is_placeholder_dpi(dots_per_inch(*resolution, unit)))
    return from_resolution(resolution, unit, "TIFF resolution");
  const auto x = property_number(slide.property("openslide.mpp-x"));
  const auto y = property_number(slide.property("openslide.mpp-y"));
  if (x || y) {
    MetadataMpp m = from_value(slide_mpp(slide.geometry()), "openslide.mpp-x/-y");
    if (!m.mpp) m.problem = "implausible " + round_text(x ? *x : *y, 4) + " µm/px";
    return m;
  }
  if (!resolution) return {std::nullopt, "", "missing"};
  return from_resolution(resolution, unit, "TIFF resolution");
}

std::string mpp_verdict(const MetadataMpp& metadata, const MppEstimate& estimate) {
  if (!metadata.mpp) return "no metadata";
  if (!estimate.mpp) return "no estimate";
  return *metadata.mpp >= *estimate.low && *metadata.mpp <= *estimate.high ? "agrees" : "disagrees";
}

namespace {

// The file format behind OpenSlide's vendor.
std::string format_of(const Slide& slide) {
  if (const auto* flat = slide.flat_info())
    return flat->format == "tiff" ? "TIFF (flat)" : flat->format == "png" ? "PNG" : "JPEG";
  static const std::vector<std::pair<std::string, std::string>> formats = {
      {"aperio", "Aperio SVS (TIFF)"}, {"dicom", "DICOM WSI"},
      {"generic-tiff", "TIFF"},        {"hamamatsu", "Hamamatsu NDPI/VMS"},
      {"leica", "Leica SCN (TIFF)"},   {"mirax", "MIRAX"},
      {"philips", "Philips TIFF"},     {"sakura", "Sakura SVSLIDE"},
      {"trestle", "Trestle TIFF"},     {"ventana", "Ventana BIF (TIFF)"},
      {"zeiss", "Zeiss CZI"},          {"synthetic", "OpenSlide synthetic"}};
  for (const auto& [vendor, format] : formats)
    if (slide.vendor() == vendor) return format;
  return slide.vendor();
}

// {class: share}, or null without a segmenter.
nlohmann::json class_fractions_json(const SlideInfo& info) {
  if (info.tissue_by == "otsu") return nullptr;
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [name, share] : info.class_fractions) out[name] = share;
  return out;
}

// --tissue MODEL.pt: the tissue share and class shares from the segmenter (none where the
// slide's µm/px is unknown: the segmenter cannot be given its pixel size).
void segmented_tissue(const Slide& slide, Segmenter& model, const std::string& file,
                      SlideInfo& info) {
  info.tissue_by = file.substr(file.rfind('/') + 1);
  info.tissue_fraction.reset();
  if (!info.metadata.mpp) return;
  const ClassMap map = segment_slide(slide, *info.metadata.mpp, model, util::thread_count(0));
  std::int64_t all = 0, tissue = 0;
  for (auto n : map.class_pixels) all += n;
  const auto& c = model.contract();
  for (std::size_t k = 0; k < c.classes.size(); ++k) {
    if (c.is_tissue(static_cast<int>(k))) tissue += map.class_pixels[k];
    info.class_fractions.emplace_back(c.classes[k],
                                      all ? static_cast<double>(map.class_pixels[k]) / all : 0.0);
  }
  info.tissue_fraction = all ? static_cast<double>(tissue) / all : 0.0;
}

}  // namespace

SlideInfo describe_slide(const std::string& path, const InfoJob& job) {
  util::check_options(info_options(), job);
  SlideInfo info;
  info.path = io::redacted_url(path);
  info.id = io::slide_id_for(path);
  io::DicomwebOptions web = job.dicomweb;
  io::allow_origin(web, path);  // a slide the user named: the token may go to its server
  const Slide slide = Slide::open(path, web);
  info.vendor = slide.vendor();
  info.format = format_of(slide);
  info.file = slide.file();
  info.levels = slide.geometry().levels;
  info.metadata = metadata_mpp(slide);
  if (const auto power = property_number(slide.property("openslide.objective-power"));
      power && *power > 0)
    info.objective_power = power;
  info.associated = slide.associated_images();
  EstimateOptions options;
  options.regions = job.regions;
  info.estimate = estimate_mpp(slide, options);
  info.tissue_fraction = info.estimate.tissue_fraction;
  info.verdict = mpp_verdict(info.metadata, info.estimate);
  if (job.segmenter) segmented_tissue(slide, *job.segmenter, job.tissue_model, info);
  return info;
}

std::vector<SlideInfo> describe_slides(const std::vector<std::string>& paths, const InfoJob& job,
                                       const std::function<void(const SlideInfo&)>& each) {
  util::check_options(info_options(), job);
  InfoJob opened = job;
  if (!job.tissue_model.empty() && !job.segmenter) {
    if (!job.open_segmenter)
      throw UsageError("--tissue " + job.tissue_model + ": this program cannot run a segmenter");
    opened.segmenter = job.open_segmenter(job.tissue_model, job.device);
  }
  std::vector<SlideInfo> out;
  for (const auto& path : paths) {
    try {
      out.push_back(describe_slide(path, opened));
    } catch (const InputError& e) {
      SlideInfo failed;
      failed.path = path;
      failed.id = io::slide_id_for(path);
      failed.error = e.what();
      out.push_back(std::move(failed));
    }
    if (each) each(out.back());
  }
  return out;
}

namespace {

using json = nlohmann::json;

json optional_json(const std::optional<double>& v) { return v ? json(*v) : json(nullptr); }

}  // namespace

json to_json(const SlideInfo& info) {
  if (!info.error.empty())
    return {{"path", info.path}, {"id", info.id}, {"status", "failed"}, {"error", info.error}};
  json levels = json::array();
  for (const auto& l : info.levels)
    levels.push_back({{"width", l.width}, {"height", l.height}, {"downsample", l.downsample}});
  json associated = json::array();
  for (const auto& a : info.associated)
    associated.push_back({{"name", a.name}, {"width", a.width}, {"height", a.height}});
  const auto& m = info.metadata;
  return {{"path", info.path},
          {"id", info.id},
          {"status", "ok"},
          {"format", info.format},
          {"vendor", info.vendor},
          {"file", info.file},
          {"levels", levels},
          {"metadata_mpp",
           {{"mpp", optional_json(m.mpp)}, {"source", m.source}, {"problem", m.problem}}},
          {"objective_power", optional_json(info.objective_power)},
          {"associated_images", associated},
          {"tissue_fraction", optional_json(info.tissue_fraction)},
          {"tissue_by", info.tissue_by},
          {"class_fractions", class_fractions_json(info)},
          {"estimated_mpp", to_json(info.estimate)},
          {"verdict", info.verdict}};
}

std::string to_text(const SlideInfo& info) {
  std::ostringstream out;
  out << info.path << "\n";
  if (!info.error.empty()) {
    out << "  error:          " << info.error << "\n";
    return out.str();
  }
  out << "  format:         " << info.format << " (vendor " << info.vendor << ")\n";
  for (std::size_t l = 0; l < info.levels.size(); ++l)
    out << "  level " << l << ":        " << info.levels[l].width << " × " << info.levels[l].height
        << " px, downsample " << round_text(info.levels[l].downsample, 4) << "\n";
  const auto& m = info.metadata;
  out << "  metadata µm/px: "
      << (m.mpp ? round_text(*m.mpp, 4) + " (" + m.source + ")"
                : "unusable: " + m.problem + (m.source.empty() ? "" : " (" + m.source + ")"))
      << "\n";
  out << "  objective:      "
      << (info.objective_power ? round_text(*info.objective_power, 2) + "x" : "-") << "\n";
  std::string associated;
  for (const auto& a : info.associated)
    associated += (associated.empty() ? "" : ", ") + a.name + " " + std::to_string(a.width) +
                  " × " + std::to_string(a.height);
  out << "  associated:     " << (associated.empty() ? "-" : associated) << "\n";
  out << "  tissue:         "
      << (info.tissue_fraction ? round_text(*info.tissue_fraction * 100, 1) + "% of the slide"
                               : std::string("-"))
      << (info.tissue_by == "otsu" ? "" : " (segmenter " + info.tissue_by + ")") << "\n";
  for (const auto& [name, share] : info.class_fractions)
    out << "    " << name << ": " << round_text(share * 100, 1) << "%\n";
  if (info.tissue_by != "otsu" && !info.tissue_fraction)
    out << "    (no µm/px metadata: the segmenter cannot be given the slide)\n";
  out << "  estimated µm/px: " << estimate_text(info.estimate) << ", from "
      << estimate_basis(info.estimate) << "\n";
  out << "  verdict:        " << info.verdict << "\n";
  return out.str();
}

}  // namespace mltool::slide
