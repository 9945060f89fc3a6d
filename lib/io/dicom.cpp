#include "mltool/io/dicom.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>

#include "mltool/util/error.hpp"

namespace mltool::io {
namespace {

constexpr std::uint32_t tag(std::uint32_t group, std::uint32_t element) {
  return (group << 16) | element;
}
constexpr std::uint32_t kItem = tag(0xFFFE, 0xE000), kItemEnd = tag(0xFFFE, 0xE00D),
                        kSequenceEnd = tag(0xFFFE, 0xE0DD), kPixelData = tag(0x7FE0, 0x0010);
constexpr std::uint32_t kUndefined = 0xFFFFFFFF;
constexpr int kMaxDepth = 32;  // sequences in sequences; deeper is a malformed (or hostile) file

std::uint16_t u16(const unsigned char* p) { return static_cast<std::uint16_t>(p[0] | p[1] << 8); }
std::uint32_t u32(const unsigned char* p) {
  return std::uint32_t{p[0]} | std::uint32_t{p[1]} << 8 | std::uint32_t{p[2]} << 16 |
         std::uint32_t{p[3]} << 24;
}
std::uint64_t u64(const unsigned char* p) { return u32(p) | std::uint64_t{u32(p + 4)} << 32; }

std::string tag_name(std::uint32_t t) {
  char text[16];
  std::snprintf(text, sizeof text, "(%04X,%04X)", t >> 16, t & 0xFFFF);
  return text;
}

// A file read at offsets through a window of pread bytes.
class Source {
 public:
  explicit Source(const std::string& path) : path_(path) {
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0) throw InputError(sys_message(path, "cannot open", errno));
    struct stat st {};
    if (::fstat(fd_, &st) != 0) {
      const int err = errno;
      ::close(fd_);
      throw InputError(sys_message(path, "cannot stat", err));
    }
    size_ = static_cast<std::uint64_t>(st.st_size);
  }
  ~Source() { ::close(fd_); }
  Source(const Source&) = delete;
  Source& operator=(const Source&) = delete;

  const std::string& path() const { return path_; }
  std::uint64_t size() const { return size_; }

  // FormatError unless `n` bytes from `at` lie inside the file.
  void need(std::uint64_t at, std::uint64_t n, const std::string& what) const {
    if (at > size_ || n > size_ - at)
      throw FormatError(at_offset(path_, at,
                                  what + " (" + std::to_string(n) +
                                      " bytes) runs past the end "
                                      "of the file (" +
                                      std::to_string(size_) + " bytes; truncated?)"));
  }

  // `n` bytes at `at`, valid until the next call.
  const unsigned char* bytes(std::uint64_t at, std::size_t n, const std::string& what) {
    need(at, n, what);
    if (at < start_ || at + n > start_ + window_.size()) refill(at, n);
    return window_.data() + (at - start_);
  }

 private:
  void refill(std::uint64_t at, std::size_t n) {
    window_.resize(static_cast<std::size_t>(
        std::min<std::uint64_t>(std::max<std::size_t>(n, 1 << 16), size_ - at)));
    std::size_t done = 0;
    while (done < window_.size()) {
      const ssize_t got =
          ::pread(fd_, window_.data() + done, window_.size() - done, static_cast<off_t>(at + done));
      if (got < 0 && errno == EINTR) continue;
      if (got < 0)
        throw InputError(sys_message(path_, "reading byte " + std::to_string(at), errno));
      if (got == 0) throw InputError(at_offset(path_, at + done, "the file shrank while read"));
      done += static_cast<std::size_t>(got);
    }
    start_ = at;
  }

  std::string path_;
  int fd_ = -1;
  std::uint64_t size_ = 0, start_ = 0;
  std::vector<unsigned char> window_;
};

struct Element {
  std::uint32_t tag = 0;
  char vr[2] = {' ', ' '};
  std::uint64_t at = 0, value = 0;  // file offsets of the header and of the value
  std::uint32_t length = 0;
  bool is(const char* v) const { return vr[0] == v[0] && vr[1] == v[1]; }
};

// VRs whose explicit header has two reserved bytes and a 32-bit length.
bool long_vr(const Element& e) {
  for (const char* v : {"OB", "OD", "OF", "OL", "OV", "OW", "SQ", "UC", "UN", "UR", "UT"})
    if (e.is(v)) return true;
  return false;
}

Element element_at(Source& src, std::uint64_t pos, bool implicit) {
  const unsigned char* p = src.bytes(pos, 8, "an element header");
  Element e;
  e.tag = tag(u16(p), u16(p + 2));
  e.at = pos;
  if (implicit || (e.tag >> 16) == 0xFFFE) {  // items and delimiters have no VR
    e.length = u32(p + 4), e.value = pos + 8;
    return e;
  }
  e.vr[0] = static_cast<char>(p[4]), e.vr[1] = static_cast<char>(p[5]);
  if (e.vr[0] < 'A' || e.vr[0] > 'Z' || e.vr[1] < 'A' || e.vr[1] > 'Z')
    throw FormatError(at_offset(src.path(), pos,
                                "element " + tag_name(e.tag) +
                                    " has no value representation "
                                    "(explicit VR expected)"));
  if (!long_vr(e)) {
    e.length = u16(p + 6), e.value = pos + 8;
    return e;
  }
  e.length = u32(src.bytes(pos + 8, 4, "an element header")), e.value = pos + 12;
  return e;
}

std::uint64_t skip_value(Source& src, const Element& e, bool implicit, int depth);

// Skips the items of a sequence (or the fragments of nested encapsulated pixel data) from
// `pos` to its delimiter; returns the offset after it.
std::uint64_t skip_items(Source& src, std::uint64_t pos, bool implicit, int depth) {
  if (depth > kMaxDepth)
    throw FormatError(at_offset(
        src.path(), pos, "sequences nested more than " + std::to_string(kMaxDepth) + " deep"));
  while (true) {
    const Element item = element_at(src, pos, true);
    if (item.tag == kSequenceEnd) return item.value;
    if (item.tag != kItem)
      throw FormatError(at_offset(
          src.path(), pos,
          "expected an item (FFFE,E000) or a sequence delimiter, found " + tag_name(item.tag)));
    if (item.length != kUndefined) {
      src.need(item.value, item.length, "item");
      pos = item.value + item.length;
      continue;
    }
    for (pos = item.value;;) {  // an item of undefined length: elements up to its delimiter
      const Element e = element_at(src, pos, implicit);
      if (e.tag == kItemEnd) break;
      pos = skip_value(src, e, implicit, depth + 1);
    }
    pos += 8;
  }
}

std::uint64_t skip_value(Source& src, const Element& e, bool implicit, int depth) {
  if (e.length != kUndefined) {
    src.need(e.value, e.length, "the value of " + tag_name(e.tag));
    return e.value + e.length;
  }
  // Undefined length: a sequence (implicit VR, SQ, or UN whose content is implicit VR) or
  // encapsulated pixel data (items of defined length).
  return skip_items(src, e.value, implicit || e.is("UN"), depth);
}

std::string text_value(Source& src, const Element& e) {
  if (e.length == kUndefined || e.length > (1u << 16))
    throw FormatError(at_offset(src.path(), e.at, tag_name(e.tag) + " is not a short string"));
  const auto* p = src.bytes(e.value, e.length, "the value of " + tag_name(e.tag));
  std::string s(reinterpret_cast<const char*>(p), e.length);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\0')) s.pop_back();
  while (!s.empty() && s.front() == ' ') s.erase(0, 1);
  return s;
}

std::int64_t number_value(Source& src, const Element& e, int bytes) {
  if (bytes == 0) {  // IS: an integer string
    const std::string s = text_value(src, e);
    char* end = nullptr;
    const long long v = std::strtoll(s.c_str(), &end, 10);
    if (s.empty() || *end != '\0' || v < 0)
      throw FormatError(
          at_offset(src.path(), e.at, tag_name(e.tag) + " is \"" + s + "\", not a count"));
    return v;
  }
  if (e.length != static_cast<std::uint32_t>(bytes))
    throw FormatError(at_offset(src.path(), e.at,
                                tag_name(e.tag) + " has " + std::to_string(e.length) +
                                    " bytes, expected " + std::to_string(bytes)));
  const auto* p = src.bytes(e.value, e.length, "the value of " + tag_name(e.tag));
  return bytes == 2 ? u16(p) : u32(p);
}

std::vector<std::uint64_t> u64_values(Source& src, const Element& e) {
  if (e.length == kUndefined || e.length % 8 != 0)
    throw FormatError(
        at_offset(src.path(), e.at, tag_name(e.tag) + " is not a list of 64-bit offsets"));
  const auto* p = src.bytes(e.value, e.length, "the value of " + tag_name(e.tag));
  std::vector<std::uint64_t> out(e.length / 8);
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = u64(p + 8 * i);
  return out;
}

std::vector<std::string> split_values(const std::string& s) {
  std::vector<std::string> out(1);
  for (char c : s) {
    if (c == '\\')
      out.emplace_back();
    else
      out.back().push_back(c);
  }
  return out;
}

// Takes the value of `e` if it is one the header keeps; false if not.
bool take(Source& src, const Element& e, DicomHeader& h) {
  switch (e.tag) {
    case tag(0x0008, 0x0008): h.image_type = split_values(text_value(src, e)); return true;
    case tag(0x0008, 0x0016): h.sop_class = text_value(src, e); return true;
    case tag(0x0008, 0x0018): h.sop_instance = text_value(src, e); return true;
    case tag(0x0020, 0x000E): h.series_instance = text_value(src, e); return true;
    case tag(0x0020, 0x9161): h.concatenation = text_value(src, e); return true;
    case tag(0x0020, 0x9311): h.organization = text_value(src, e); return true;
    case tag(0x0028, 0x0002): h.samples = static_cast<int>(number_value(src, e, 2)); return true;
    case tag(0x0028, 0x0004): h.photometric = text_value(src, e); return true;
    case tag(0x0028, 0x0006): h.planar = static_cast<int>(number_value(src, e, 2)); return true;
    case tag(0x0028, 0x0008): h.frames = number_value(src, e, 0); return true;
    case tag(0x0028, 0x0010): h.rows = number_value(src, e, 2); return true;
    case tag(0x0028, 0x0011): h.columns = number_value(src, e, 2); return true;
    case tag(0x0028, 0x0100):
      h.bits_allocated = static_cast<int>(number_value(src, e, 2));
      return true;
    case tag(0x0048, 0x0006): h.total_columns = number_value(src, e, 4); return true;
    case tag(0x0048, 0x0007): h.total_rows = number_value(src, e, 4); return true;
    case tag(0x0048, 0x0302): h.optical_paths = number_value(src, e, 4); return true;
    case tag(0x0048, 0x0303): h.focal_planes = number_value(src, e, 4); return true;
    case tag(0x7FE0, 0x0001): h.extended_offsets = u64_values(src, e); return true;
    case tag(0x7FE0, 0x0002): h.extended_lengths = u64_values(src, e); return true;
    default: return false;
  }
}

// The file meta group (always explicit VR little endian); returns the offset after it.
std::uint64_t read_meta(Source& src, DicomHeader& h) {
  const auto* p = src.bytes(0, 132, "the 128-byte preamble and \"DICM\"");
  if (std::string(reinterpret_cast<const char*>(p) + 128, 4) != "DICM")
    throw FormatError(at_offset(src.path(), 128,
                                "not a DICOM Part 10 file (no \"DICM\" after the 128-byte "
                                "preamble)"));
  std::uint64_t pos = 132;
  // The group is read before the VR: the dataset after it may be implicit VR.
  while (pos < src.size() && u16(src.bytes(pos, 2, "an element header")) == 0x0002) {
    const Element e = element_at(src, pos, false);
    if (e.tag == tag(0x0002, 0x0010)) h.transfer_syntax = text_value(src, e);
    if (e.tag == tag(0x0002, 0x0002)) h.sop_class = text_value(src, e);
    pos = skip_value(src, e, false, 0);
  }
  if (h.transfer_syntax.empty())
    throw FormatError(
        at_offset(src.path(), 132, "the file meta group has no Transfer Syntax UID (0002,0010)"));
  return pos;
}

}  // namespace

DicomHeader read_dicom_header(const std::string& path) {
  Source src(path);
  DicomHeader h;
  h.path = path;
  std::uint64_t pos = read_meta(src, h);
  const std::string& ts = h.transfer_syntax;
  if (ts == "1.2.840.10008.1.2.2" || ts == "1.2.840.10008.1.2.1.99") return h;  // not read
  h.dataset_read = true;
  const bool implicit = ts == "1.2.840.10008.1.2";
  while (pos < src.size()) {
    const Element e = element_at(src, pos, implicit);
    if (e.tag == kPixelData) {
      h.pixel_data = e.value;
      h.encapsulated = e.length == kUndefined;
      return h;
    }
    take(src, e, h);
    pos = skip_value(src, e, implicit, 0);
  }
  return h;
}

namespace {

// The fragments of encapsulated pixel data at `at` (after its Basic Offset Table, whose
// values go to `bot`), each fragment's item offset relative to the first one in `relative`.
void scan_fragments(Source& src, std::uint64_t at, std::vector<std::uint32_t>& bot,
                    DicomFrames& out, std::vector<std::uint64_t>& relative) {
  const Element table = element_at(src, at, true);
  if (table.tag != kItem || table.length == kUndefined || table.length % 4 != 0)
    throw FormatError(at_offset(src.path(), at,
                                "encapsulated Pixel Data does not start with a Basic Offset "
                                "Table item (found " +
                                    tag_name(table.tag) + ")"));
  const auto* p = src.bytes(table.value, table.length, "the Basic Offset Table");
  for (std::uint32_t i = 0; i < table.length; i += 4) bot.push_back(u32(p + i));
  const std::uint64_t first = table.value + table.length;
  for (std::uint64_t pos = first;;) {
    const Element item = element_at(src, pos, true);
    if (item.tag == kSequenceEnd) return;
    if (item.tag != kItem || item.length == kUndefined)
      throw FormatError(at_offset(src.path(), pos,
                                  "expected a fragment item (FFFE,E000) of defined length or "
                                  "the sequence delimiter, found " +
                                      tag_name(item.tag)));
    src.need(item.value, item.length, "fragment " + std::to_string(out.offset.size()));
    out.offset.push_back(item.value), out.length.push_back(item.length);
    relative.push_back(pos - first);
    pos = item.value + item.length;
  }
}

}  // namespace

DicomFrames read_dicom_frames(const DicomHeader& h) {
  if (!h.encapsulated || h.pixel_data == 0)
    throw FormatError(at_file(h.path, "no encapsulated Pixel Data (7FE0,0010)"));
  Source src(h.path);
  DicomFrames out;
  std::vector<std::uint32_t> bot;
  std::vector<std::uint64_t> relative;
  scan_fragments(src, h.pixel_data, bot, out, relative);
  const auto frames = static_cast<std::size_t>(h.frames);
  std::vector<std::uint64_t> starts;
  std::string table = "Extended Offset Table";
  if (!h.extended_offsets.empty()) {
    starts = h.extended_offsets;
  } else if (!bot.empty()) {
    starts.assign(bot.begin(), bot.end()), table = "Basic Offset Table";
  } else if (out.offset.size() == frames) {
    for (std::size_t i = 0; i <= frames; ++i) out.first.push_back(i);
    return out;
  } else {
    throw FormatError(at_offset(h.path, h.pixel_data,
                                std::to_string(out.offset.size()) + " fragments for " +
                                    std::to_string(frames) +
                                    " frames and no offset table to group them"));
  }
  if (starts.size() != frames)
    throw FormatError(at_offset(h.path, h.pixel_data,
                                "the " + table + " has " + std::to_string(starts.size()) +
                                    " entries for " + std::to_string(frames) + " frames"));
  for (std::size_t i = 0; i < frames; ++i) {
    const auto it = std::lower_bound(relative.begin(), relative.end(), starts[i]);
    const auto k = static_cast<std::size_t>(it - relative.begin());
    if (it == relative.end() || *it != starts[i] || (i > 0 && k <= out.first.back()))
      throw FormatError(at_offset(h.path, h.pixel_data,
                                  "the " + table + "'s entry " + std::to_string(i) + " (" +
                                      std::to_string(starts[i]) +
                                      ") is not the offset of a fragment after the last"));
    out.first.push_back(k);
  }
  out.first.push_back(out.offset.size());
  return out;
}

}  // namespace mltool::io
