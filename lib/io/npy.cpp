#include "mltool/io/npy.hpp"

#include <algorithm>
#include <cstring>
#include <limits>
#include <utility>

#include "mltool/util/error.hpp"

namespace mltool::io {
namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr std::size_t kMagicSize = 6;

std::string quote(std::string_view s) { return "'" + std::string(s) + "'"; }

// A strict recursive-descent reader for the one dict literal numpy writes. It
// works on the mapped bytes in place and fails on the first surprise, naming the
// absolute byte offset, so hostile headers cost linear time and no allocation.
class DictReader {
 public:
  DictReader(std::string_view text, std::uint64_t base, const std::string& path)
      : text_(text), base_(base), path_(path) {}

  [[noreturn]] void fail(const std::string& message) const { fail_at(pos_, message); }
  [[noreturn]] void fail_at(std::size_t pos, const std::string& message) const {
    throw FormatError(at_offset(path_, base_ + pos, "invalid .npy header: " + message));
  }

  std::size_t pos() const { return pos_; }
  bool at_end() const { return pos_ >= text_.size(); }
  char peek() const { return at_end() ? '\0' : text_[pos_]; }

  void skip_space() {
    while (!at_end() && (peek() == ' ' || peek() == '\t' || peek() == '\n' || peek() == '\r'))
      ++pos_;
  }

  bool consume(char c) {
    skip_space();
    if (peek() != c || at_end()) return false;
    ++pos_;
    return true;
  }

  void expect(char c) {
    if (!consume(c)) fail(std::string("expected '") + c + "'" + found());
  }

  std::string found() const {
    if (at_end()) return ", found the end of the header";
    const unsigned char c = static_cast<unsigned char>(peek());
    if (c >= 0x20 && c < 0x7f) return std::string(", found '") + peek() + "'";
    return ", found byte " + std::to_string(c);
  }

  std::string_view string_literal() {
    skip_space();
    const char q = peek();
    if (q != '\'' && q != '"') fail("expected a quoted string" + found());
    const std::size_t start = ++pos_;
    while (!at_end() && peek() != q) {
      if (peek() == '\\') fail("escape sequences are not supported in header strings");
      ++pos_;
    }
    if (at_end()) fail("unterminated string");
    return text_.substr(start, pos_++ - start);
  }

  bool boolean() {
    skip_space();
    for (auto [word, value] : {std::pair{std::string_view("True"), true}, {"False", false}}) {
      if (text_.compare(pos_, word.size(), word) == 0) {
        pos_ += word.size();
        return value;
      }
    }
    fail("expected True or False" + found());
  }

  std::uint64_t integer() {
    skip_space();
    const std::size_t start = pos_;
    if (peek() == '-') fail("negative dimension in shape");
    if (peek() < '0' || peek() > '9') fail("expected a dimension" + found());
    std::uint64_t value = 0;
    while (peek() >= '0' && peek() <= '9' && !at_end()) {
      const auto digit = static_cast<std::uint64_t>(peek() - '0');
      if (value > (std::numeric_limits<std::uint64_t>::max() - digit) / 10)
        fail_at(start, "dimension does not fit in 64 bits");
      value = value * 10 + digit;
      ++pos_;
    }
    if (pos_ - start > 1 && text_[start] == '0') fail_at(start, "dimension with a leading zero");
    if (peek() == 'L' || peek() == 'l') ++pos_;  // Python 2 longs, written by old numpy
    return value;
  }

  std::vector<std::uint64_t> shape() {
    expect('(');
    std::vector<std::uint64_t> dims;
    if (consume(')')) return dims;
    for (;;) {
      if (dims.size() == kNpyMaxDims)
        fail("more than " + std::to_string(kNpyMaxDims) + " dimensions");
      dims.push_back(integer());
      if (consume(')')) {
        // Python needs the comma in "(5,)"; "(5)" is an int, not a tuple.
        if (dims.size() == 1) fail_at(pos_ - 1, "a 1-d shape must be written '(n,)'");
        return dims;
      }
      expect(',');
      if (consume(')')) return dims;
    }
  }

 private:
  std::string_view text_;
  std::uint64_t base_;
  const std::string& path_;
  std::size_t pos_ = 0;
};

DType dtype_from_descr(std::string_view descr, const DictReader& reader, std::size_t pos) {
  for (DType t : {DType::float32, DType::float16, DType::uint8, DType::int64})
    if (descr == npy_descr(t)) return t;
  if (descr == "<u1" || descr == ">u1") return DType::uint8;  // byte order is moot
  if (!descr.empty() && descr[0] == '>')
    reader.fail_at(pos, "descr " + quote(descr) +
                            " is big-endian, which is not supported (convert with "
                            "arr.astype(arr.dtype.newbyteorder('<')))");
  reader.fail_at(
      pos, "descr " + quote(descr) + " is not supported (expected '<f4', '<f2', '|u1' or '<i8')");
}

std::uint64_t little_endian(const std::uint8_t* p, int bytes) {
  std::uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

std::string shape_text(const std::vector<std::uint64_t>& shape) {
  std::string s = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + (shape.size() == 1 ? ",)" : ")");
}

std::string dict_text(DType dtype, const std::vector<std::uint64_t>& shape) {
  if (shape.size() > kNpyMaxDims)
    throw UsageError("cannot write an .npy header with " + std::to_string(shape.size()) +
                     " dimensions (at most " + std::to_string(kNpyMaxDims) + ")");
  return "{'descr': " + quote(npy_descr(dtype)) +
         ", 'fortran_order': False, 'shape': " + shape_text(shape) + ", }";
}

std::string pad_header(const std::string& dict, std::size_t total) {
  std::string out(kMagic, kMagicSize);
  out += '\x01';
  out += '\x00';
  const std::size_t header_len = total - 10;
  out += static_cast<char>(header_len & 0xff);
  out += static_cast<char>(header_len >> 8);
  out += dict;
  out.append(total - out.size() - 1, ' ');
  out += '\n';
  return out;
}

std::size_t round_up_64(std::size_t n) { return (n + 63) / 64 * 64; }

}  // namespace

std::size_t itemsize(DType dtype) noexcept {
  switch (dtype) {
    case DType::float32: return 4;
    case DType::float16: return 2;
    case DType::uint8: return 1;
    case DType::int64: return 8;
  }
  return 1;
}

std::string_view name(DType dtype) noexcept {
  switch (dtype) {
    case DType::float32: return "float32";
    case DType::float16: return "float16";
    case DType::uint8: return "uint8";
    case DType::int64: return "int64";
  }
  return "?";
}

std::string_view npy_descr(DType dtype) noexcept {
  switch (dtype) {
    case DType::float32: return "<f4";
    case DType::float16: return "<f2";
    case DType::uint8: return "|u1";
    case DType::int64: return "<i8";
  }
  return "?";
}

std::optional<DType> dtype_from_name(std::string_view text) noexcept {
  for (DType t : {DType::float32, DType::float16, DType::uint8, DType::int64})
    if (text == name(t)) return t;
  return std::nullopt;
}

namespace {

// The magic bytes, the version and the header length: where the header dict starts (its
// byte offset) and how long it is. Sets h.major_version and h.data_offset.
std::pair<std::size_t, std::uint64_t> read_preamble(const std::uint8_t* data, std::size_t size,
                                                    const std::string& path, NpyHeader& h) {
  if (size >= kMagicSize && std::memcmp(data, kMagic, kMagicSize) != 0)
    throw FormatError(at_offset(path, 0, "not an .npy file (bad magic bytes)"));
  if (size < 10)
    throw FormatError(at_file(path, "not an .npy file (only " + std::to_string(size) +
                                        " bytes, too short for a header)"));
  h.major_version = data[6];
  const int minor = data[7];
  if (h.major_version < 1 || h.major_version > 3 || minor != 0)
    throw FormatError(at_offset(path, 6,
                                "unsupported .npy version " + std::to_string(h.major_version) +
                                    "." + std::to_string(minor) + " (expected 1.0, 2.0 or 3.0)"));
  const int len_bytes = h.major_version == 1 ? 2 : 4;
  const std::size_t prefix = 8 + static_cast<std::size_t>(len_bytes);
  if (size < prefix)
    throw FormatError(at_file(path, "truncated: the .npy header length is cut off"));
  const std::uint64_t header_len = little_endian(data + 8, len_bytes);
  if (header_len > kNpyMaxHeaderLength)
    throw FormatError(at_offset(path, 8,
                                "header length " + std::to_string(header_len) +
                                    " exceeds the limit of " + std::to_string(kNpyMaxHeaderLength) +
                                    " bytes"));
  h.data_offset = prefix + header_len;
  if (h.data_offset > size)
    throw FormatError(at_file(path, "truncated: the header needs " + std::to_string(h.data_offset) +
                                        " bytes, the file has " + std::to_string(size)));
  return {prefix, header_len};
}

// The header dict: exactly 'descr' (a supported dtype), 'fortran_order' (False) and 'shape',
// in any order. Sets h.dtype and h.shape.
void read_dict(DictReader& r, NpyHeader& h) {
  std::optional<DType> dtype;
  std::optional<bool> fortran;
  std::optional<std::vector<std::uint64_t>> shape;
  r.expect('{');
  while (!r.consume('}')) {
    const std::size_t key_pos = (r.skip_space(), r.pos());
    const std::string_view key = r.string_literal();
    r.expect(':');
    r.skip_space();
    const std::size_t value_pos = r.pos();
    const bool seen = key == "descr"           ? dtype.has_value()
                      : key == "fortran_order" ? fortran.has_value()
                      : key == "shape"         ? shape.has_value()
                                               : false;
    if (seen) r.fail_at(key_pos, "duplicate key " + quote(key));
    if (key == "descr") {
      if (r.peek() == '[') r.fail("descr: structured dtypes are not supported");
      dtype = dtype_from_descr(r.string_literal(), r, value_pos);
    } else if (key == "fortran_order") {
      fortran = r.boolean();
      if (*fortran)
        r.fail_at(value_pos,
                  "fortran_order is True; only C-order arrays are supported "
                  "(save with np.ascontiguousarray)");
    } else if (key == "shape") {
      shape = r.shape();
    } else {
      r.fail_at(key_pos, "unexpected key " + quote(key) +
                             " (expected 'descr', 'fortran_order' and 'shape')");
    }
    if (!r.consume(',')) {
      r.expect('}');
      break;
    }
  }
  r.skip_space();
  if (!r.at_end()) r.fail("unexpected text after the header dict" + r.found());
  if (!dtype) r.fail("missing key 'descr'");
  if (!fortran) r.fail("missing key 'fortran_order'");
  if (!shape) r.fail("missing key 'shape'");
  h.dtype = *dtype;
  h.shape = std::move(*shape);
}

// The data's size from the dtype and shape (h.data_bytes), which must be what the file holds
// after the header.
void check_data_size(std::size_t size, std::size_t prefix, const std::string& path, NpyHeader& h) {
  std::uint64_t bytes = itemsize(h.dtype);
  for (std::uint64_t d : h.shape)
    if (__builtin_mul_overflow(bytes, d, &bytes))
      throw FormatError(
          at_offset(path, prefix,
                    "shape " + shape_text(h.shape) + " is too large (its size overflows 64 bits)"));
  h.data_bytes = bytes;
  const std::uint64_t found = size - h.data_offset;
  if (found != h.data_bytes)
    throw FormatError(at_offset(
        path, h.data_offset,
        std::string(found < h.data_bytes ? "truncated" : "trailing data") + ": expected " +
            std::to_string(h.data_bytes) + " bytes of data for shape " + shape_text(h.shape) + " " +
            std::string(name(h.dtype)) + ", found " + std::to_string(found)));
}

}  // namespace

NpyHeader parse_npy_header(const std::uint8_t* data, std::size_t size, const std::string& path) {
  NpyHeader h;
  const auto [prefix, header_len] = read_preamble(data, size, path, h);
  const std::string_view text(reinterpret_cast<const char*>(data + prefix), header_len);
  DictReader r(text, prefix, path);
  read_dict(r, h);
  check_data_size(size, prefix, path, h);
  return h;
}

std::string format_npy_header(DType dtype, const std::vector<std::uint64_t>& shape) {
  const std::string dict = dict_text(dtype, shape);
  return pad_header(dict, round_up_64(10 + dict.size() + 1));
}

std::string format_npy_header_padded(DType dtype, const std::vector<std::uint64_t>& shape,
                                     std::size_t total_size) {
  const std::string dict = dict_text(dtype, shape);
  if (total_size % 64 != 0 || total_size < 10 + dict.size() + 1 || total_size - 10 > 0xffff)
    throw UsageError("an .npy header for shape " + shape_text(shape) + " does not fit in " +
                     std::to_string(total_size) + " bytes");
  return pad_header(dict, total_size);
}

NpyWriter::NpyWriter(std::string path, DType dtype, std::vector<std::uint64_t> inner_shape)
    : file_(std::move(path)), dtype_(dtype), inner_shape_(std::move(inner_shape)) {
  row_bytes_ = itemsize(dtype_);
  for (std::uint64_t d : inner_shape_)
    if (__builtin_mul_overflow(row_bytes_, d, &row_bytes_))
      throw UsageError(at_file(file_.path(), "row shape is too large"));
  // Size the header for the largest possible row count so commit() always fits.
  std::vector<std::uint64_t> widest{std::numeric_limits<std::uint64_t>::max()};
  widest.insert(widest.end(), inner_shape_.begin(), inner_shape_.end());
  header_size_ = std::max(kNpyStreamingHeaderSize, format_npy_header(dtype_, widest).size());
  std::vector<std::uint64_t> empty{0};
  empty.insert(empty.end(), inner_shape_.begin(), inner_shape_.end());
  file_.write(format_npy_header_padded(dtype_, empty, header_size_));
}

void NpyWriter::write_rows(const void* rows, std::uint64_t count) {
  std::uint64_t bytes = 0;
  if (__builtin_mul_overflow(count, row_bytes_, &bytes) || bytes > SIZE_MAX)
    throw UsageError(at_file(file_.path(), "too many rows in one write"));
  file_.write(rows, static_cast<std::size_t>(bytes));
  rows_ += count;
}

void NpyWriter::commit() {
  std::vector<std::uint64_t> shape{rows_};
  shape.insert(shape.end(), inner_shape_.begin(), inner_shape_.end());
  const std::string header = format_npy_header_padded(dtype_, shape, header_size_);
  file_.pwrite(header.data(), header.size(), 0);
  file_.commit();
}

MappedNpy map_npy(const std::string& path) {
  MappedNpy m;
  m.file = std::make_shared<const util::MappedFile>(path);
  m.header = parse_npy_header(m.file->data(), m.file->size(), path);
  return m;
}

}  // namespace mltool::io
