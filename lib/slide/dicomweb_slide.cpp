#include "dicomweb_slide.hpp"

#include <curl/curl.h>

#include <algorithm>
#include <cstring>

#include "dicom_jpeg_frames.hpp"
#include "dicom_json.hpp"
#include "mltool/io/image_codec.hpp"
#include "mltool/io/jpeg_tiff.hpp"
#include "mltool/util/error.hpp"

namespace mltool::slide {
namespace {

using nlohmann::json;

constexpr std::size_t kCacheBytes = std::size_t{64} << 20;  // decoded frames kept for regions
constexpr std::size_t kAheadFrames = 1024;  // compressed frames fetched ahead of region reads

}  // namespace

std::string dicomweb_reader_version() {
  return std::string("libcurl ") + curl_version_info(CURLVERSION_NOW)->version;
}

struct DicomwebSeries::Decoded {
  std::int64_t width = 0, height = 0;
  std::vector<std::uint8_t> rgb;
};

DicomwebSeries::DicomwebSeries(const std::string& url, const io::DicomwebOptions& options)
    : client_(io::parse_dicomweb_url(url), options) {
  const json metadata = client_.metadata();
  std::vector<std::pair<io::DicomHeader, const json*>> volumes;
  for (const json& dataset : metadata) {
    io::DicomHeader h = dicom_json_header(dataset, client_.url().url);
    if (h.image_type.size() < 3 || h.image_type[2] != "VOLUME") continue;
    check_dicom_level(h, client_.url().url);
    volumes.emplace_back(std::move(h), &dataset);
  }
  if (volumes.empty())
    throw InputError(url +
                     ": the series has no VOLUME instance (ImageType ...\\VOLUME): not a "
                     "whole-slide image series");
  // Largest first; one instance per size (OpenSlide's DICOM levels).
  std::stable_sort(volumes.begin(), volumes.end(), [](const auto& a, const auto& b) {
    return a.first.total_columns > b.first.total_columns;
  });
  const json* first = volumes.front().second;
  for (auto& [h, dataset] : volumes) {
    if (!levels_.empty() && levels_.back().total_columns == h.total_columns) continue;
    levels_.push_back(h);
  }
  const auto& l0 = levels_.front();
  for (const auto& h : levels_) {
    // As OpenSlide computes a level's downsample from its size.
    const double ds = (static_cast<double>(l0.total_rows) / h.total_rows +
                       static_cast<double>(l0.total_columns) / h.total_columns) /
                      2.0;
    geometry_.levels.push_back({h.total_columns, h.total_rows, ds});
  }
  if (const auto spacing =
          dicom_json_pixel_spacing(*first, client_.url().url + ": instance " + l0.sop_instance);
      spacing && spacing->first > 0 && spacing->second > 0) {
    geometry_.mpp_x = spacing->second * 1000.0;
    geometry_.mpp_y = spacing->first * 1000.0;
  }
  const auto& u = client_.url();
  properties_ = {{"dicomweb.url", u.url},
                 {"dicomweb.study", u.study},
                 {"dicomweb.series", u.series},
                 {"dicomweb.instance", l0.sop_instance}};
}

std::size_t DicomwebSeries::batch(int level) const {
  const auto frames =
      static_cast<std::size_t>(std::max<std::int64_t>(0, this->level(level).frames));
  const std::size_t even = (frames + kDicomwebRequestsPerLevel - 1) / kDicomwebRequestsPerLevel;
  return std::clamp(even, kDicomwebBatch, kDicomwebMaxBatch);
}

// Frames `indices` of `level`: those fetched ahead already, the rest in requests that also fetch
// the frames after the last of them (regions are read in raster order: a thumbnail's small
// regions would otherwise cost one request per frame).
std::vector<io::DicomwebFrame> DicomwebSeries::fetch_ahead(
    int level, const std::vector<std::size_t>& indices) const {
  const auto key = [level](std::size_t i) { return (static_cast<std::uint64_t>(level) << 40) | i; };
  std::vector<io::DicomwebFrame> out(indices.size());
  std::vector<std::size_t> want, slot;
  {
    std::lock_guard lock(cache_mutex_);
    for (std::size_t k = 0; k < indices.size(); ++k)
      if (auto it = ahead_.find(key(indices[k])); it != ahead_.end()) {
        out[k] = std::move(it->second);
        ahead_.erase(it);
      } else {
        want.push_back(indices[k]), slot.push_back(k);
      }
    if (want.empty()) return out;
    const auto frames = static_cast<std::size_t>(this->level(level).frames);
    const std::size_t most = batch(level), held = std::max(kAheadFrames, most);
    for (std::size_t i = want.back() + 1; i < frames && want.size() < most; ++i)
      if (!ahead_.count(key(i)) && ahead_.size() + want.size() < held) want.push_back(i);
  }
  std::vector<io::DicomwebFrame> got;
  try {
    got = fetch(level, want);
  } catch (const io::DicomwebError&) {
    if (want.size() == slot.size()) throw;
    // A frame fetched ahead may be the one that fails (it fails its own read later): the
    // frames this read needs, alone.
    want.resize(slot.size());
    got = fetch(level, want);
  }
  std::lock_guard lock(cache_mutex_);
  for (std::size_t k = 0; k < want.size(); ++k)
    if (k < slot.size())
      out[slot[k]] = std::move(got[k]);
    else
      ahead_[key(want[k])] = std::move(got[k]);
  return out;
}

std::vector<std::shared_ptr<const DicomwebSeries::Decoded>> DicomwebSeries::decode_missing(
    int level, const std::vector<std::size_t>& indices) const {
  const auto frames = fetch_ahead(level, indices);
  std::vector<std::shared_ptr<const Decoded>> out;
  for (std::size_t k = 0; k < frames.size(); ++k) {
    auto d = decode(level, indices[k], frames[k]);
    out.push_back(d);
    std::lock_guard lock(cache_mutex_);
    cache_bytes_ += d->rgb.size();
    cache_.emplace_front((static_cast<std::uint64_t>(level) << 40) | indices[k], std::move(d));
    while (cache_bytes_ > kCacheBytes && cache_.size() > 1) {
      cache_bytes_ -= cache_.back().second->rgb.size();
      cache_.pop_back();
    }
  }
  return out;
}

std::shared_ptr<const DicomwebSeries::Decoded> DicomwebSeries::decode(
    int level, std::size_t index, const io::DicomwebFrame& f) const {
  const io::DicomHeader& h = this->level(level);
  const io::JpegColour colour =
      h.photometric == "RGB" ? io::JpegColour::rgb : io::JpegColour::ycbcr;
  const std::string what =
      client_.url().url + ": instance " + h.sop_instance + " frame " + std::to_string(index + 1);
  auto d = std::make_shared<Decoded>();
  // Every frame is Rows x Columns, the last row and column of the grid too (padded): read_rgb
  // copies from each frame by the metadata's size.
  d->width = h.columns, d->height = h.rows;
  const bool raw = is_uncompressed_syntax(f.transfer_syntax);
  if (raw) {
    if (h.samples != 3 || h.bits_allocated != 8 || h.planar != 0 || h.photometric != "RGB")
      throw FormatError(what + ": uncompressed frames of SamplesPerPixel " +
                        std::to_string(h.samples) + ", BitsAllocated " +
                        std::to_string(h.bits_allocated) + ", PlanarConfiguration " +
                        std::to_string(h.planar) + ", PhotometricInterpretation '" + h.photometric +
                        "'; mltool reads uncompressed frames of 8-bit RGB");
    const std::size_t size = dicom_frame_bytes(h, what);
    if (f.bytes.size() != size)
      throw FormatError(what + ": an uncompressed frame of " + std::to_string(f.bytes.size()) +
                        " bytes, not Rows " + std::to_string(h.rows) + " x Columns " +
                        std::to_string(h.columns) + " x 3 = " + std::to_string(size));
    d->rgb.assign(f.bytes.begin(), f.bytes.end());
  } else if (f.bytes.size() > 2 && static_cast<unsigned char>(f.bytes[0]) == 0xff &&
             static_cast<unsigned char>(f.bytes[1]) == 0xd8) {
    io::RgbImage image;
    const std::string jpeg = io::colour_marked_jpeg(f.bytes, colour, what);
    // Rows and Columns are at most 65535 (dicom_json.hpp): they fit an int.
    io::decode_image(jpeg.data(), jpeg.size(), image,
                     what + " (Columns " + std::to_string(h.columns) + ", Rows " +
                         std::to_string(h.rows) + " in the metadata)",
                     {static_cast<int>(h.columns), static_cast<int>(h.rows)});
    d->rgb = std::move(image.pixels);
  } else {
    throw FormatError(what + ": transfer syntax " +
                      (f.transfer_syntax.empty() ? "not named" : f.transfer_syntax) +
                      "; mltool reads DICOMweb frames that are JPEG or uncompressed RGB");
  }
  return d;
}

std::shared_ptr<const DicomwebSeries::Decoded> DicomwebSeries::decoded(int level,
                                                                       std::size_t index) const {
  const std::uint64_t key = (static_cast<std::uint64_t>(level) << 40) | index;
  std::lock_guard lock(cache_mutex_);
  for (auto it = cache_.begin(); it != cache_.end(); ++it)
    if (it->first == key) {
      cache_.splice(cache_.begin(), cache_, it);
      return cache_.front().second;
    }
  return nullptr;
}

void DicomwebSeries::read_rgb(std::int64_t x, std::int64_t y, int level, std::int64_t w,
                              std::int64_t h, std::uint8_t* rgb) const {
  const io::DicomHeader& inst = this->level(level);
  const double ds = geometry_.levels[static_cast<std::size_t>(level)].downsample;
  const auto lx = static_cast<std::int64_t>(static_cast<double>(x) / ds);
  const auto ly = static_cast<std::int64_t>(static_cast<double>(y) / ds);
  std::memset(rgb, 255, static_cast<std::size_t>(w * h * 3));
  const std::int64_t across = (inst.total_columns + inst.columns - 1) / inst.columns;
  const std::int64_t down = (inst.total_rows + inst.rows - 1) / inst.rows;
  const std::int64_t c0 = std::max<std::int64_t>(0, lx / inst.columns);
  const std::int64_t r0 = std::max<std::int64_t>(0, ly / inst.rows);
  const std::int64_t c1 = std::min(across - 1, (lx + w - 1) / inst.columns);
  const std::int64_t r1 = std::min(down - 1, (ly + h - 1) / inst.rows);
  std::vector<std::size_t> need;
  for (std::int64_t r = r0; r <= r1; ++r)
    for (std::int64_t c = c0; c <= c1; ++c)
      need.push_back(static_cast<std::size_t>(r * across + c));
  std::vector<std::shared_ptr<const Decoded>> got(need.size());
  std::vector<std::size_t> missing;
  for (std::size_t k = 0; k < need.size(); ++k)
    if (!(got[k] = decoded(level, need[k]))) missing.push_back(need[k]);
  if (!missing.empty()) {
    const auto fetched = decode_missing(level, missing);
    for (std::size_t k = 0, m = 0; k < need.size(); ++k)
      if (!got[k]) got[k] = fetched[m++];
  }
  for (std::size_t k = 0; k < need.size(); ++k) {
    const Decoded& f = *got[k];
    const std::int64_t fx = static_cast<std::int64_t>(need[k] % across) * inst.columns;
    const std::int64_t fy = static_cast<std::int64_t>(need[k] / across) * inst.rows;
    const std::int64_t x0 = std::max(lx, fx), x1 = std::min(lx + w, fx + f.width);
    for (std::int64_t row = std::max(ly, fy); row < std::min(ly + h, fy + f.height); ++row)
      if (x1 > x0)
        std::memcpy(rgb + ((row - ly) * w + (x0 - lx)) * 3,
                    f.rgb.data() + ((row - fy) * f.width + (x0 - fx)) * 3,
                    static_cast<std::size_t>(x1 - x0) * 3);
  }
}

}  // namespace mltool::slide
