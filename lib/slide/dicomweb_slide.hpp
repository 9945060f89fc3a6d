// A DICOMweb series as a slide (not a public header): Slide::open gives a series URL to
// DicomwebSeries, which reads the instances' metadata (WADO-RS) as OpenSlide reads a local DICOM
// WSI series — the VOLUME instances, largest first, are the levels; µm/px from level 0's
// PixelSpacing — and reads regions by fetching the frames they cover, in batches, and decoding
// them (JPEG baseline as OpenSlide decodes it, or uncompressed RGB). DicomwebFrames passes a
// level's JPEG frames through as tiles, fetched ahead in batches on the client's connections.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "mltool/io/dicom.hpp"
#include "mltool/io/dicomweb.hpp"
#include "mltool/slide/geometry.hpp"
#include "own_jpeg_tiles.hpp"

namespace mltool::slide {

/// Frames asked for in one request, at least.
inline constexpr std::size_t kDicomwebBatch = 256;
/// Frames asked for in one request, at most (about 5 to 10 MB of JPEG frames a request).
inline constexpr std::size_t kDicomwebMaxBatch = 1024;
/// Requests a level's frames take, about: a larger level asks more frames per request.
inline constexpr std::size_t kDicomwebRequestsPerLevel = 16;

/// A frame of DicomwebSeries::fetch_each: its bytes, or why a request of it alone failed.
struct DicomwebFetched {
  io::DicomwebFrame frame;
  std::exception_ptr error;  ///< an io::DicomwebError; null when `frame` holds the frame
};

class DicomwebSeries {
 public:
  /// Reads the series' metadata (checked as dicom_json.hpp says). UsageError for a URL that
  /// is not a series URL; InputError naming the URL when the series has no VOLUME instance or
  /// a level lacks its size or has too many frames; FormatError naming the URL, the instance,
  /// the tag and the value for a value of the wrong type or range, or a UID that is none.
  DicomwebSeries(const std::string& url, const io::DicomwebOptions& options);

  const io::DicomwebClient& client() const { return client_; }
  const SlideGeometry& geometry() const { return geometry_; }
  /// The instance (its metadata as a header: no path, offsets or transfer syntax unless the
  /// metadata names AvailableTransferSyntaxUID) of each level.
  const io::DicomHeader& level(int l) const { return levels_[static_cast<std::size_t>(l)]; }
  /// dicomweb.url, dicomweb.study, dicomweb.series and the level-0 instance's image type.
  const std::map<std::string, std::string>& properties() const { return properties_; }

  /// Slide::read_rgb over the series: whole frames painted, white outside the frame grid.
  void read_rgb(std::int64_t x, std::int64_t y, int level, std::int64_t w, std::int64_t h,
                std::uint8_t* rgb) const;

  /// Frames asked for in one request at `level`: kDicomwebBatch, or more for a level of more
  /// than kDicomwebRequestsPerLevel batches, up to kDicomwebMaxBatch. Orthanc's DICOMweb
  /// plugin (1.7, Debian 12's) reads and parses the whole instance for every frames request,
  /// whatever frames it names: a fixed batch would make the server's work grow with the square
  /// of the level's size (docs/benchmarks.md, "DICOMweb against local files").
  std::size_t batch(int level) const;

  /// Frames (0-based `indices`) of level `level`, fetched batch(level) at a time (one by one
  /// where the server refuses a list of frame numbers).
  std::vector<io::DicomwebFrame> fetch(int level, const std::vector<std::size_t>& indices) const;

  /// As fetch, but a request that fails for good (io::DicomwebError) fails only the frames that
  /// fail alone: its frames are asked again in halves (without retries: the batch's retries
  /// waited out transient faults), down to single frames, which are retried once a request of
  /// the batch has been answered (else the server answers nothing, and they fail as they are).
  /// After 4 failed requests per bit of the batch's size (about four failing frames of a batch
  /// told apart), the frames not yet asked fail with the last error. An io::DicomwebAuthError,
  /// and any other error, is thrown.
  std::vector<DicomwebFetched> fetch_each(int level, const std::vector<std::size_t>& indices) const;

 private:
  struct Decoded;
  struct Split;
  void fetch_split(Split& split, const std::size_t* first, std::size_t n, bool retry,
                   std::vector<DicomwebFetched>& out) const;
  std::vector<io::DicomwebFrame> request(int level, const std::size_t* first, std::size_t n,
                                         bool retry) const;
  std::shared_ptr<const Decoded> decoded(int level, std::size_t index) const;
  std::vector<std::shared_ptr<const Decoded>> decode_missing(
      int level, const std::vector<std::size_t>& indices) const;
  std::shared_ptr<const Decoded> decode(int level, std::size_t index,
                                        const io::DicomwebFrame& frame) const;
  std::vector<io::DicomwebFrame> fetch_ahead(int level,
                                             const std::vector<std::size_t>& indices) const;

  io::DicomwebClient client_;
  SlideGeometry geometry_;
  std::vector<io::DicomHeader> levels_;
  std::map<std::string, std::string> properties_;
  mutable std::mutex cache_mutex_;  // decoded frames, the most recently used first
  mutable std::list<std::pair<std::uint64_t, std::shared_ptr<const Decoded>>> cache_;
  mutable std::size_t cache_bytes_ = 0;
  // Frames fetched ahead of the region reads that will want them (compressed), by key.
  mutable std::unordered_map<std::uint64_t, io::DicomwebFrame> ahead_;
  // The server answered a list of frame numbers with 400: one frame a request from then on.
  mutable std::atomic<bool> single_frames_{false};
};

/// A DICOMweb level's JPEG frames as tiles (--passthrough auto): what DicomJpegFrames is for a
/// local series. After will_read, the frames of those tiles are fetched in that order, ahead of
/// the readers, batch(level) per request on every connection, holding a bounded number.
class DicomwebFrames : public OwnJpegTiles {
 public:
  /// As DicomJpegFrames::open: null, and `why`, when the level's frames cannot pass through.
  static std::unique_ptr<DicomwebFrames> open(const DicomwebSeries& series, int level,
                                              int tile_size, std::string& why);
  ~DicomwebFrames() override;

  /// {"tiles", "dicomweb_instance": its SOPInstanceUID, "colour"}.
  nlohmann::json record(std::int64_t passed) const override;
  void will_read(const std::vector<std::pair<std::int64_t, std::int64_t>>& positions) override;

 private:
  DicomwebFrames(const DicomwebSeries& series, int level, int tile_size, io::JpegColour colour);
  std::optional<std::string> tile(std::size_t index) const override;
  void fetch_batches();
  void collect(const std::vector<std::size_t>& indices,
               std::unordered_map<std::size_t, std::string>& got,
               std::unordered_map<std::size_t, std::exception_ptr>& errors) const;
  std::string marked(io::DicomwebFrame frame, std::size_t index) const;

  const DicomwebSeries& series_;
  int level_;
  std::size_t batch_;  // frames a request
  // The prefetch plan: frames in the order they will be read, cut into batches; what has
  // arrived (taken out when read), and the error of a batch that failed.
  std::vector<std::size_t> order_;
  std::unordered_map<std::size_t, std::size_t> batch_of_;  // frame index → batch
  mutable std::mutex mutex_;
  mutable std::condition_variable changed_;
  mutable std::unordered_map<std::size_t, std::string> arrived_;
  std::vector<char> done_;  // per batch
  // Frames that failed (fetch_each: alone, or their batch with an error that is not HTTP's).
  mutable std::unordered_map<std::size_t, std::exception_ptr> failed_;
  std::size_t next_batch_ = 0;
  bool stop_ = false;
  std::vector<std::thread> fetchers_;
};

}  // namespace mltool::slide
