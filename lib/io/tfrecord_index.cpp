// DALI index files: "offset size\n" per record, size being the whole frame.
#include <charconv>
#include <cstring>

#include "mltool/io/tfrecord.hpp"
#include "mltool/util/error.hpp"
#include "mltool/util/file.hpp"

namespace mltool::io {
namespace {

bool is_blank(char c) { return c == ' ' || c == '\t' || c == '\r'; }

std::string_view trim(std::string_view s) {
  while (!s.empty() && is_blank(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_blank(s.back())) s.remove_suffix(1);
  return s;
}

// Parses one unsigned decimal number at the front of `s` and consumes it.
bool take_number(std::string_view& s, std::uint64_t& value) {
  const char* end = s.data() + s.size();
  const auto [ptr, ec] = std::from_chars(s.data(), end, value);
  if (ec != std::errc() || ptr == s.data()) return false;
  s.remove_prefix(static_cast<std::size_t>(ptr - s.data()));
  return true;
}

std::string quoted_excerpt(std::string_view line) {
  constexpr std::size_t kMax = 60;
  std::string out = "'";
  out.append(line.substr(0, kMax));
  if (line.size() > kMax) out += "...";
  return out + "'";
}

}  // namespace

IndexReader::IndexReader(const std::string& path) : path_(path), map_(path) {}

std::string IndexReader::where() const { return path_ + ":" + std::to_string(line_); }

bool IndexReader::next(IndexEntry& entry) {
  const char* const data = reinterpret_cast<const char*>(map_.data());
  while (pos_ < map_.size()) {
    const void* nl = std::memchr(data + pos_, '\n', map_.size() - pos_);
    const std::size_t eol =
        nl ? static_cast<std::size_t>(static_cast<const char*>(nl) - data) : map_.size();
    const std::string_view line = trim(std::string_view(data + pos_, eol - pos_));
    pos_ = eol + 1;
    ++line_;
    if (line.empty()) continue;
    std::string_view rest = line;
    bool ok = take_number(rest, entry.offset);
    if (ok) {
      const std::size_t before = rest.size();
      rest = trim(rest);
      ok = rest.size() < before && take_number(rest, entry.size) && rest.empty();
    }
    if (!ok) {
      throw FormatError(at_file(
          where(),
          "expected 'offset size' (two unsigned decimal numbers), found " + quoted_excerpt(line)));
    }
    return true;
  }
  return false;
}

std::vector<IndexEntry> read_index(const std::string& path) {
  IndexReader reader(path);
  std::vector<IndexEntry> entries;
  std::uint64_t end_of_previous = 0;
  IndexEntry entry;
  while (reader.next(entry)) {
    const auto fail = [&](const std::string& what) {
      return FormatError(at_file(reader.where(), what));
    };
    if (entry.size < kTFRecordOverhead) {
      throw fail("frame size " + std::to_string(entry.size) + " is smaller than the " +
                 std::to_string(kTFRecordOverhead) + " bytes of TFRecord framing");
    }
    if (entry.offset < end_of_previous) {
      throw fail("offset " + std::to_string(entry.offset) +
                 " overlaps or precedes the previous frame, which ends at byte " +
                 std::to_string(end_of_previous));
    }
    if (entry.size > UINT64_MAX - entry.offset) {
      throw fail("offset " + std::to_string(entry.offset) + " + size " +
                 std::to_string(entry.size) + " overflows");
    }
    end_of_previous = entry.offset + entry.size;
    entries.push_back(entry);
  }
  return entries;
}

std::string format_index(const std::vector<IndexEntry>& entries) {
  std::string text;
  text.reserve(entries.size() * 16);
  for (const IndexEntry& e : entries) {
    text += std::to_string(e.offset);
    text += ' ';
    text += std::to_string(e.size);
    text += '\n';
  }
  return text;
}

void write_index(const std::string& path, const std::vector<IndexEntry>& entries) {
  util::write_file_atomic(path, format_index(entries));
}

std::vector<IndexEntry> build_index(const std::string& tfrecord_path) {
  TFRecordReader reader(tfrecord_path);
  std::vector<IndexEntry> entries;
  std::string_view record;
  while (reader.next(record)) entries.push_back({reader.offset(), reader.frame_size()});
  return entries;
}

}  // namespace mltool::io
