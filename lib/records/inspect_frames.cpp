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

// An unsigned decimal number at p (at least one digit, no overflow); advances p.
bool decimal(const char*& p, const char* end, std::uint64_t& v) {
  if (p == end || *p < '0' || *p > '9') return false;
  v = 0;
  for (; p != end && *p >= '0' && *p <= '9'; ++p) {
    if (__builtin_mul_overflow(v, 10u, &v) ||
        __builtin_add_overflow(v, static_cast<unsigned>(*p - '0'), &v))
      return false;
  }
  return true;
}

// A DALI index read line by line from its mapping, with read_index's tolerance (blank lines,
// extra blanks and \r), so the deep check never holds a whole index in memory.
class IndexLines {
 public:
  explicit IndexLines(const std::string& path) : path_(path), map_(path) {}

  // The next entry; false at the end. FormatError "INDEX:LINE: ..." for a malformed line.
  bool next(std::uint64_t& offset, std::uint64_t& size) {
    const char* const data = reinterpret_cast<const char*>(map_.data());
    while (pos_ < map_.size()) {
      const void* nl = std::memchr(data + pos_, '\n', map_.size() - pos_);
      const std::size_t eol =
          nl ? static_cast<std::size_t>(static_cast<const char*>(nl) - data) : map_.size();
      std::string_view line(data + pos_, eol - pos_);
      pos_ = eol + 1;
      ++line_;
      const auto blank = [](char c) { return c == ' ' || c == '\t' || c == '\r'; };
      while (!line.empty() && blank(line.front())) line.remove_prefix(1);
      while (!line.empty() && blank(line.back())) line.remove_suffix(1);
      if (line.empty()) continue;
      const char* p = line.data();
      const char* const end = p + line.size();
      bool ok = decimal(p, end, offset) && p != end && blank(*p);
      if (ok) {
        while (p != end && blank(*p)) ++p;
        ok = decimal(p, end, size) && p == end;
      }
      if (!ok) {
        throw FormatError(
            at_file(where(), "expected 'offset size' (two unsigned decimal numbers), found '" +
                                 std::string(line.substr(0, 60)) + "'"));
      }
      return true;
    }
    return false;
  }
  std::string where() const { return path_ + ":" + std::to_string(line_); }

 private:
  std::string path_;
  util::MappedFile map_;
  std::size_t pos_ = 0;
  std::size_t line_ = 0;
};

}  // namespace

// Only lengths are read here: the second pass checks every frame's CRCs from the start of its
// chunk, so a corrupt length is reported there, at its own frame, before any chunk boundary
// it may have misplaced; a walk that runs off the end is worded by the reader.
Framing walk_frames(const ShardSource& shard, bool deep) {
  Framing f;
  try {
    f.map = std::make_shared<util::MappedFile>(shard.path);
    std::unique_ptr<IndexLines> index;
    if (deep && !shard.index.empty()) {
      try {
        index = std::make_unique<IndexLines>(shard.index);
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
          std::uint64_t offset, bytes;
          if (!index->next(offset, bytes)) {
            throw FormatError(at_file(shard.index, "lists " + std::to_string(f.records) +
                                                       " records, but " + shard.path +
                                                       " holds more" + kStale));
          }
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
    std::uint64_t offset, bytes;
    if (index && !f.index_error && index->next(offset, bytes)) {
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
