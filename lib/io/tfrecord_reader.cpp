// TFRecordReader: validates frames in place (mapped file or caller's buffer) and hands
// out views of the record data. Nothing is allocated from a length field: a length is
// only trusted after it has been checked against the bytes actually present.
#include <cstdio>

#include "mltool/io/crc32c.hpp"
#include "mltool/io/tfrecord.hpp"
#include "mltool/util/endian.hpp"
#include "mltool/util/error.hpp"

namespace mltool::io {
namespace {

using util::load_le32;
using util::load_le64;

std::string hex32(std::uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", v);
  return buf;
}

}  // namespace

TFRecordReader::TFRecordReader(const std::string& path, TFRecordReadOptions options)
    : map_(std::make_unique<util::MappedFile>(path)),
      name_(path),
      data_(map_->data()),
      size_(map_->size()),
      options_(options) {}

TFRecordReader::TFRecordReader(std::string name, const std::uint8_t* data, std::size_t size,
                               TFRecordReadOptions options)
    : name_(std::move(name)), data_(data), size_(size), options_(options) {}

TFRecordReader TFRecordReader::from_buffer(std::string name, const void* data, std::size_t size,
                                           TFRecordReadOptions options) {
  return TFRecordReader(std::move(name), static_cast<const std::uint8_t*>(data), size, options);
}

std::string_view TFRecordReader::frame_at(std::uint64_t at, std::int64_t number) {
  const auto fail = [&](const std::string& what) {
    const std::string record = number >= 0 ? "record " + std::to_string(number) + ": " : "";
    return FormatError(at_offset(name_, at, record + what));
  };

  const std::uint64_t left = size_ - at;
  if (left < kTFRecordHeaderSize) {
    throw fail("truncated record header: expected " + std::to_string(kTFRecordHeaderSize) +
               " bytes, found " + std::to_string(left) +
               " before the end of the file (trailing garbage or an interrupted write)");
  }
  const std::uint8_t* const p = data_ + at;
  const std::uint64_t length = load_le64(p);
  // Compared in masked form, as stored: a fuzzer's comparison tracing can then solve
  // the check by copying the computed value into its input.
  const std::uint32_t stored_length_crc = load_le32(p + 8);
  const std::uint32_t length_crc = mask_crc(crc32c(p, 8));
  const std::uint64_t room = left - kTFRecordHeaderSize;  // for data and its CRC
  const bool fits = length <= room && room - length >= 4;

  if (stored_length_crc != length_crc) {
    std::string what = "length CRC mismatch (stored " + hex32(stored_length_crc) + ", computed " +
                       hex32(length_crc) + "): not a TFRecord frame, or a corrupt length";
    if (!fits) what += " (it reads " + std::to_string(length) + ", beyond the end of the file)";
    throw fail(what);
  }
  if (!fits) {
    if (length > size_) {
      throw fail("record length " + std::to_string(length) + " is larger than the whole file (" +
                 std::to_string(size_) + " bytes): corrupt length field");
    }
    throw fail("truncated record: expected " + std::to_string(length) +
               " data bytes and a 4-byte CRC, found " + std::to_string(room) +
               " bytes before the end of the file");
  }

  const std::uint8_t* const payload = p + kTFRecordHeaderSize;
  if (options_.verify_data_crc) {
    const std::uint32_t stored = load_le32(payload + length);
    const std::uint32_t computed = mask_crc(crc32c(payload, length));
    if (stored != computed) {
      throw fail("data CRC mismatch (stored " + hex32(stored) + ", computed " + hex32(computed) +
                 ") over " + std::to_string(length) + " data bytes");
    }
  }
  frame_size_ = length + kTFRecordOverhead;
  return {reinterpret_cast<const char*>(payload), static_cast<std::size_t>(length)};
}

bool TFRecordReader::next(std::string_view& record) {
  if (pos_ == size_) return false;
  record = frame_at(pos_, static_cast<std::int64_t>(records_));
  current_ = pos_;
  pos_ += frame_size_;
  ++records_;
  numbered_ = true;
  return true;
}

std::string_view TFRecordReader::read_at(std::uint64_t offset) {
  if (offset >= size_) {
    throw FormatError(at_offset(
        name_, offset, "no record here: the file has only " + std::to_string(size_) + " bytes"));
  }
  const std::string_view record = frame_at(offset, -1);
  current_ = offset;
  numbered_ = false;
  return record;
}

std::string TFRecordReader::where() const {
  if (!numbered_) return name_ + ": byte " + std::to_string(current_);
  return name_ + ": record " + std::to_string(record_number()) + " (byte " +
         std::to_string(current_) + ")";
}

}  // namespace mltool::io
