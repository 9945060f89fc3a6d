// The first pass of `mltool inspect` (see inspect_scan.hpp): frame lengths, chunk starts, and
// under deep the DALI index line by line against the frames.
#include <cstring>
#include <memory>

#include "inspect_scan.hpp"
#include "mltool/io/tfrecord.hpp"
#include "mltool/util/error.hpp"

namespace mltool::records::detail {
namespace {

// Chunks of the second pass start about this far apart (at frame boundaries).
constexpr std::uint64_t kChunkBytes = 4 << 20;

constexpr const char* kStale = " (a stale index: rebuild it with mltool index)";

}  // namespace

// Only lengths are read here: the second pass checks every frame's CRCs from the start of its
// chunk, so a corrupt length is reported there, at its own frame, before any chunk boundary
// it may have misplaced; a walk that runs off the end is worded by the reader.
Framing walk_frames(const ShardSource& shard, bool deep) {
  Framing f;
  try {
    f.map = std::make_shared<util::MappedFile>(shard.path);
    std::unique_ptr<io::IndexReader> index;
    if (deep && !shard.index.empty()) {
      try {
        index = std::make_unique<io::IndexReader>(shard.index);
      } catch (...) {
        f.index_error = std::current_exception();
      }
    }
    const std::uint8_t* const data = f.map->data();
    const std::uint64_t size = f.map->size();
    f.starts.emplace_back(0, 0);
    for (std::uint64_t pos = 0; pos < size; ++f.records) {
      const std::uint64_t left = size - pos;
      // The walk depends on each length it reads: fetch ahead, across page boundaries too.
      if (left > 4096) __builtin_prefetch(data + pos + 4096);
      const std::uint64_t length = left >= io::kTFRecordOverhead ? util::load_le64(data + pos) : 0;
      if (left < io::kTFRecordOverhead || length > left - io::kTFRecordOverhead) {
        io::TFRecordReader::from_buffer(shard.path, data, size).read_at(pos);  // throws
        throw FormatError(at_offset(shard.path, pos, "not a TFRecord frame"));
      }
      const std::uint64_t frame = length + io::kTFRecordOverhead;
      if (pos - f.starts.back().second >= kChunkBytes) f.starts.emplace_back(f.records, pos);
      if (index && !f.index_error) {
        try {
          io::IndexEntry entry;
          if (!index->next(entry)) {
            throw FormatError(at_file(shard.index, "lists " + std::to_string(f.records) +
                                                       " records, but " + shard.path +
                                                       " holds more" + kStale));
          }
          const std::uint64_t offset = entry.offset, bytes = entry.size;
          if (offset != pos || bytes != frame) {
            throw FormatError(
                at_file(index->where(), "says record " + std::to_string(f.records) +
                                            " is at byte " + std::to_string(offset) +
                                            " and spans " + std::to_string(bytes) + " bytes; in " +
                                            shard.path + " it is at byte " + std::to_string(pos) +
                                            " and spans " + std::to_string(frame) + kStale));
          }
        } catch (...) {
          f.index_error = std::current_exception();
        }
      }
      pos += frame;
    }
    io::IndexEntry extra;
    if (index && !f.index_error && index->next(extra)) {
      f.index_error = std::make_exception_ptr(
          FormatError(at_file(index->where(), "lists more records than " + shard.path + " holds (" +
                                                  std::to_string(f.records) + ")" + kStale)));
    }
  } catch (...) {
    f.error = std::current_exception();
  }
  return f;
}

}  // namespace mltool::records::detail
