// write_tiles (tile_writer.hpp): workers take the kept tiles in order, read, resample and
// encode each (or take its own JPEG bytes) and queue it; the calling thread puts them into the
// batch. The first error stops every thread, but for a tile whose DICOMweb frame failed for good:
// that tile is recorded and the others go on.
#include "tile_writer.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <optional>
#include <thread>

#include "mltool/io/dicomweb.hpp"
#include "mltool/slide/image.hpp"
#include "mltool/util/bounded_queue.hpp"
#include "mltool/util/log.hpp"
#include "mltool/util/parallel.hpp"

namespace mltool::slide {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

class TileWriter {
 public:
  TileWriter(RegionReader& reader, const ReadPlan& plan, const TileJob& job, std::string id,
             const std::vector<KeptTile>& kept, const OwnJpegTiles* passthrough)
      : reader_(reader),
        job_(job),
        id_(std::move(id)),
        kept_(kept),
        passthrough_(passthrough),
        read_(plan.read_size_level),
        codec_(io::encoding_info(job.settings.encoding)),
        workers_(worker_count(job, kept)),
        queue_(static_cast<std::size_t>(workers_) * 4),
        active_(workers_),
        ordered_(reader.in_order()) {}

  // Returns normally only when every tile is in a (committed or pending) batch or failed.
  WrittenTiles run(io::TileStore::SlideWriter& batch) {
    std::vector<std::thread> pool;
    for (int t = 0; t < workers_; ++t) pool.emplace_back([this] { work(); });
    try {
      commit(batch);
    } catch (...) {
      fail(std::current_exception());
    }
    for (auto& t : pool) t.join();
    if (error_) std::rethrow_exception(error_);
    WrittenTiles out;
    out.passthrough = passed_;
    out.failed = std::move(failed_);
    std::sort(out.failed.begin(), out.failed.end(), [](const auto& a, const auto& b) {
      return std::pair(a.row, a.col) < std::pair(b.row, b.col);
    });
    return out;
  }

 private:
  struct Encoded {
    std::size_t index;
    std::string bytes;
  };

  static int worker_count(const TileJob& job, const std::vector<KeptTile>& kept) {
    return std::max(1,
                    std::min<int>(util::thread_count(job.threads), static_cast<int>(kept.size())));
  }

  void fail(std::exception_ptr e) {
    {
      std::lock_guard lock(error_mutex_);
      if (!error_) error_ = e;
    }
    stop_ = true;
    queue_.close();
    { std::lock_guard lock(turn_mutex_); }
    turn_changed_.notify_all();
  }

  // Tile i's frame failed for good: recorded, and logged with its URL and HTTP status.
  void failed(std::size_t i, const io::DicomwebError& e) {
    const KeptTile& k = kept_[i];
    log::error(io::tile_key(id_, k.row, k.col) + ": tile failed: " + e.what());
    std::lock_guard lock(error_mutex_);
    failed_.push_back({k.row, k.col, k.x, k.y, e.url(), e.status(), e.what()});
  }

  // A reader that decodes top to bottom (a flat image) is read in the tiles' order: tile i
  // waits for tile i - 1's read; resampling and encoding still run side by side.
  void read_tile(std::size_t i, std::uint8_t* rgb) {
    const KeptTile& k = kept_[i];
    if (!ordered_) return reader_.read_rgb(k.x, k.y, read_, read_, rgb);
    {
      std::unique_lock lock(turn_mutex_);
      turn_changed_.wait(lock, [&] { return turn_ == i || stop_; });
      if (stop_) return;
    }
    reader_.read_rgb(k.x, k.y, read_, read_, rgb);
    {
      std::lock_guard lock(turn_mutex_);
      turn_ = i + 1;
    }
    turn_changed_.notify_all();
  }

  // Tile i read, resampled to the tile size and encoded; nothing when stopped meanwhile.
  std::optional<std::string> encode(std::size_t i, std::vector<std::uint8_t>& rgb) {
    const int tile = job_.settings.tile_size;
    read_tile(i, rgb.data());
    if (stop_) return std::nullopt;
    const std::uint8_t* pixels = rgb.data();
    io::RgbImage resized;
    if (read_ != tile) {
      resized = resize(pixels, static_cast<int>(read_), static_cast<int>(read_), tile, tile);
      pixels = resized.pixels.data();
    }
    return codec_.encode(pixels, tile, tile, job_.settings.quality);
  }

  // Tile i's bytes: its own JPEG where it has one, else read and encoded. Nothing when stopped,
  // or when its frame failed for good (then recorded).
  std::optional<std::string> bytes_of(std::size_t i, std::vector<std::uint8_t>& rgb) {
    try {
      std::optional<std::string> bytes;
      if (passthrough_) bytes = passthrough_->jpeg_at(kept_[i].x, kept_[i].y);
      if (bytes) {
        ++passed_;
        return bytes;
      }
      return encode(i, rgb);
    } catch (const io::DicomwebError& e) {
      failed(i, e);
      return std::nullopt;
    }
  }

  void work() {
    try {
      std::vector<std::uint8_t> rgb(static_cast<std::size_t>(read_) * read_ * 3);
      for (std::size_t i; !stop_ && (i = next_++) < kept_.size();) {
        auto bytes = bytes_of(i, rgb);
        if (stop_) break;
        if (bytes && !queue_.push({i, std::move(*bytes)})) break;
      }
    } catch (...) {
      fail(std::current_exception());
    }
    if (--active_ == 0) queue_.close();
  }

  // On the calling thread: each encoded tile into the slide's batch, with a progress line
  // every 10 s.
  void commit(io::TileStore::SlideWriter& batch) {
    const auto start = Clock::now();
    auto last_report = start;
    std::size_t written = 0;
    while (auto item = queue_.pop()) {
      if (stop_) continue;  // a worker failed: drain, the slide is discarded
      const KeptTile& k = kept_[item->index];
      batch.put_tile(io::tile_key(id_, k.row, k.col), item->bytes);
      if (++written % 256 == 0 && seconds_since(last_report) >= 10) {
        last_report = Clock::now();
        log::info(id_ + ": " + std::to_string(written) + "/" + std::to_string(kept_.size()) +
                  " tiles, " + std::to_string(static_cast<int>(written / seconds_since(start))) +
                  " tiles/s");
      }
    }
  }

  RegionReader& reader_;
  const TileJob& job_;
  const std::string id_;
  const std::vector<KeptTile>& kept_;
  const OwnJpegTiles* passthrough_;
  const std::int64_t read_;
  const io::EncodingInfo& codec_;
  const int workers_;
  util::BoundedQueue<Encoded> queue_;
  std::atomic<std::size_t> next_{0};
  std::atomic<bool> stop_{false};
  std::atomic<int> active_;
  std::atomic<std::int64_t> passed_{0};
  std::mutex error_mutex_;  // error_ and failed_
  std::exception_ptr error_;
  std::vector<TileFailure> failed_;
  std::mutex turn_mutex_;  // the next tile to read, for an in-order reader
  std::condition_variable turn_changed_;
  std::size_t turn_ = 0;
  const bool ordered_;
};

}  // namespace

WrittenTiles write_tiles(RegionReader& reader, const ReadPlan& plan, const TileJob& job,
                         const std::string& id, const std::vector<KeptTile>& kept,
                         const OwnJpegTiles* passthrough, io::TileStore::SlideWriter& batch) {
  return TileWriter(reader, plan, job, id, kept, passthrough).run(batch);
}

}  // namespace mltool::slide
