// DicomwebFrames (dicomweb_slide.hpp): a DICOMweb level's JPEG frames passed through as tiles.
// Fetchers (one per connection) take the batches of the read plan in order; a fetcher waits
// while kHeld frames wait to be read, so memory stays bounded whatever the slide's size, and
// the readers, which take the plan in order too, never wait on a batch nobody fetches.
#include <algorithm>

#include "dicom_jpeg_frames.hpp"
#include "dicom_json.hpp"
#include "dicomweb_slide.hpp"
#include "mltool/io/image_codec.hpp"
#include "mltool/util/error.hpp"

namespace mltool::slide {
namespace {

// Frames fetched but not yet read before a fetcher starts another batch (per connection: two
// batches of the smallest size), whatever batch(level) is.
std::size_t held_limit(int connections) {
  return 2 * kDicomwebBatch * static_cast<std::size_t>(std::max(1, connections));
}

}  // namespace

DicomwebFrames::DicomwebFrames(const DicomwebSeries& series, int level, int tile_size,
                               io::JpegColour colour)
    : OwnJpegTiles(series.geometry().levels[static_cast<std::size_t>(level)], tile_size, colour),
      series_(series),
      level_(level),
      batch_(series.batch(level)) {}

std::unique_ptr<DicomwebFrames> DicomwebFrames::open(const DicomwebSeries& series, int level,
                                                     int tile_size, std::string& why) {
  io::DicomHeader h = series.level(level);
  if (!h.concatenation.empty()) {
    why = "the level is a concatenation of DICOM instances (" + h.sop_instance + ", ...)";
    return nullptr;
  }
  if (h.transfer_syntax.empty() && h.frames > 0) {
    // The metadata does not name it (AvailableTransferSyntaxUID is optional): the first frame's
    // answer does.
    const auto first = series.fetch(level, {0});
    h.transfer_syntax = first.front().transfer_syntax;
    h.encapsulated = !h.transfer_syntax.empty() && !is_uncompressed_syntax(h.transfer_syntax);
  }
  io::JpegColour colour = io::JpegColour::ycbcr;
  why = dicom_frames_unfit(h, tile_size, colour);
  if (!why.empty()) return nullptr;
  return std::unique_ptr<DicomwebFrames>(new DicomwebFrames(series, level, tile_size, colour));
}

DicomwebFrames::~DicomwebFrames() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  changed_.notify_all();
  for (auto& t : fetchers_) t.join();
}

nlohmann::json DicomwebFrames::record(std::int64_t passed) const {
  return {{"tiles", passed},
          {"dicomweb_instance", series_.level(level_).sop_instance},
          {"colour", io::colour_name(colour())}};
}

void DicomwebFrames::will_read(
    const std::vector<std::pair<std::int64_t, std::int64_t>>& positions) {
  if (!fetchers_.empty()) return;  // one plan per source
  for (const auto& [x, y] : positions)
    if (const auto index = index_at(x, y); index && !batch_of_.count(*index)) {
      batch_of_[*index] = order_.size() / batch_;
      order_.push_back(*index);
    }
  done_.assign((order_.size() + batch_ - 1) / batch_, 0);
  const int n = std::min<int>(series_.client().connections(), static_cast<int>(done_.size()));
  for (int i = 0; i < n; ++i) fetchers_.emplace_back([this] { fetch_batches(); });
}

void DicomwebFrames::fetch_batches() {
  const std::size_t limit = held_limit(series_.client().connections());
  for (;;) {
    std::size_t b = 0;
    {
      std::unique_lock lock(mutex_);
      changed_.wait(lock, [&] { return stop_ || arrived_.size() < limit; });
      if (stop_ || next_batch_ >= done_.size()) return;
      b = next_batch_++;
    }
    const auto first = order_.begin() + static_cast<std::ptrdiff_t>(b * batch_);
    const std::vector<std::size_t> indices(
        first, first + static_cast<std::ptrdiff_t>(std::min(batch_, order_.size() - b * batch_)));
    std::unordered_map<std::size_t, std::string> got;
    std::unordered_map<std::size_t, std::exception_ptr> errors;
    collect(indices, got, errors);
    {
      std::lock_guard lock(mutex_);
      arrived_.merge(got);
      failed_.merge(errors);
      done_[b] = 1;
    }
    changed_.notify_all();
  }
}

// Frames `indices`, each marked as a standalone JPEG into `got` or its error into `errors`: a
// frame that fails alone (fetch_each), one whose bytes are no JPEG, or every frame of the batch
// for an error that is not one frame's.
void DicomwebFrames::collect(const std::vector<std::size_t>& indices,
                             std::unordered_map<std::size_t, std::string>& got,
                             std::unordered_map<std::size_t, std::exception_ptr>& errors) const {
  try {
    auto frames = series_.fetch_each(level_, indices);
    for (std::size_t k = 0; k < indices.size(); ++k) try {
        if (frames[k].error) std::rethrow_exception(frames[k].error);
        got[indices[k]] = marked(std::move(frames[k].frame), indices[k]);
      } catch (...) {
        errors[indices[k]] = std::current_exception();
      }
  } catch (...) {
    got.clear();
    for (const std::size_t i : indices) errors[i] = std::current_exception();
  }
}

std::string DicomwebFrames::marked(io::DicomwebFrame frame, std::size_t index) const {
  const io::DicomHeader& h = series_.level(level_);
  const std::string what = series_.client().url().url + ": instance " + h.sop_instance + " frame " +
                           std::to_string(index + 1);
  std::string jpeg = io::colour_marked_jpeg(std::move(frame.bytes), colour(), what);
  // The tile is stored as it is: a frame of another size than the metadata's would be a tile
  // of another size than the store's.
  const io::ImageSize got = io::image_size(jpeg.data(), jpeg.size(), what);
  if (got.width != h.columns || got.height != h.rows)
    throw FormatError(what + ": the frame is " + std::to_string(got.width) + " x " +
                      std::to_string(got.height) + " pixels, not Columns " +
                      std::to_string(h.columns) + " x Rows " + std::to_string(h.rows) +
                      " as the metadata says");
  return jpeg;
}

std::optional<std::string> DicomwebFrames::tile(std::size_t index) const {
  const auto planned = batch_of_.find(index);
  if (planned != batch_of_.end()) {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] { return stop_ || done_[planned->second] != 0; });
    if (const auto f = failed_.find(index); f != failed_.end()) {
      const std::exception_ptr error = f->second;
      failed_.erase(f);
      std::rethrow_exception(error);
    }
    if (auto it = arrived_.find(index); it != arrived_.end()) {
      std::string jpeg = std::move(it->second);
      arrived_.erase(it);
      lock.unlock();
      changed_.notify_all();
      return jpeg;
    }
  }
  // Not in the plan (or read twice): fetched alone.
  return marked(std::move(series_.fetch(level_, {index}).front()), index);
}

}  // namespace mltool::slide
