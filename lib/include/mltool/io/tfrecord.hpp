// TFRecord files and their DALI index.
//
// A TFRecord file is a sequence of frames:
//   u64 LE  length
//   u32 LE  masked CRC-32C of the 8 length bytes
//   bytes   data[length]
//   u32 LE  masked CRC-32C of data
// (see mask_crc in crc32c.hpp). TensorFlow's TFRecordDataset and DALI's readers.tfrecord
// read these files; DALI also needs a text index with one line "offset size\n" per
// record, where size is the whole frame (length + 16), as written by DALI's tfrecord2idx.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "mltool/util/file.hpp"

namespace mltool::io {

/// Bytes before a record's data: length (8) and its masked CRC (4).
inline constexpr std::uint64_t kTFRecordHeaderSize = 12;
/// Bytes of framing around each record: header (12) and the data's masked CRC (4).
inline constexpr std::uint64_t kTFRecordOverhead = 16;

/// One line of a DALI index: where a frame starts and how many bytes it spans.
struct IndexEntry {
  std::uint64_t offset = 0;  ///< byte offset of the frame's length field
  std::uint64_t size = 0;    ///< whole frame: record length + kTFRecordOverhead
  friend bool operator==(const IndexEntry& a, const IndexEntry& b) {
    return a.offset == b.offset && a.size == b.size;
  }
  friend bool operator!=(const IndexEntry& a, const IndexEntry& b) { return !(a == b); }
};

/// The index file that belongs to a record file: "x.tfrecord" -> "x.idx"; any other
/// name gets ".idx" appended ("x.rec" -> "x.rec.idx").
std::string index_path_for(const std::string& tfrecord_path);

/// Whether a TFRecordWriter also writes the DALI index.
enum class IndexMode {
  write,  ///< publish index_path_for(path) together with the records
  none,   ///< records only
};

/// Writes a TFRecord file (and its DALI index) atomically: both are written under
/// temporary names and appear only on commit(). Destroyed without commit(), the
/// writer leaves nothing behind. Memory stays bounded: the index is streamed to disk.
class TFRecordWriter {
 public:
  explicit TFRecordWriter(const std::string& path, IndexMode index = IndexMode::write);
  TFRecordWriter(const TFRecordWriter&) = delete;
  TFRecordWriter& operator=(const TFRecordWriter&) = delete;

  /// Appends one record (any bytes, including empty). Throws ResourceError on I/O
  /// failure and UsageError after commit().
  void write(std::string_view record);

  /// Flushes and fsyncs, then renames the record file and then its index into place.
  void commit();

  /// Records written so far.
  std::uint64_t records() const { return records_; }
  /// Bytes of the record file written so far (framing included).
  std::uint64_t bytes() const { return file_.size(); }
  /// Final path of the record file.
  const std::string& path() const { return file_.path(); }

 private:
  util::AtomicFile file_;
  std::unique_ptr<util::AtomicFile> index_;  // null for IndexMode::none
  std::uint64_t records_ = 0;
  bool committed_ = false;
};

/// Reader options.
struct TFRecordReadOptions {
  /// Verify each record's data CRC. The length CRC is always verified, since a wrong
  /// length would misframe the rest of the file.
  bool verify_data_crc = true;
};

/// Reads TFRecord frames from a memory-mapped file or a caller's buffer without
/// copying: records are views into that memory, valid while the reader lives (for
/// from_buffer, while the caller's buffer lives).
///
/// Every defect is a FormatError naming the file and the frame's byte offset: truncated
/// header, length CRC mismatch, a length beyond the end of the file (checked before
/// anything is sized from it), truncated data, data CRC mismatch, trailing bytes too
/// short to be a frame.
class TFRecordReader {
 public:
  /// Maps `path`; InputError if it cannot be opened.
  explicit TFRecordReader(const std::string& path, TFRecordReadOptions options = {});

  /// Reads from `data[0..size)`, which the caller keeps alive; `name` is used in messages.
  static TFRecordReader from_buffer(std::string name, const void* data, std::size_t size,
                                    TFRecordReadOptions options = {});

  TFRecordReader(TFRecordReader&&) noexcept = default;
  TFRecordReader& operator=(TFRecordReader&&) noexcept = default;

  /// Reads the next record into `record`. Returns false at a clean end of file (the end
  /// falls exactly after a frame); throws FormatError for anything else.
  bool next(std::string_view& record);

  /// Byte offset of the frame last returned by next() (or read_at()).
  std::uint64_t offset() const { return current_; }
  /// Zero-based number of the record last returned by next().
  std::uint64_t record_number() const { return records_ == 0 ? 0 : records_ - 1; }
  /// Size of the frame last returned (record length + kTFRecordOverhead).
  std::uint64_t frame_size() const { return frame_size_; }
  /// Where next() continues (the end of the frame last returned by next()).
  std::uint64_t position() const { return pos_; }

  /// Reads the frame at `offset` (e.g. from an index) with the same checks as next(),
  /// without moving next()'s position. FormatError if no valid frame starts there.
  std::string_view read_at(std::uint64_t offset);

  /// "where" text for messages about the record last returned:
  /// "shard.tfrecord: record 17 (byte 1234)" ("shard.tfrecord: byte 1234" after read_at).
  std::string where() const;

  /// The name used in messages: the path, or from_buffer's `name`.
  const std::string& name() const { return name_; }
  /// Bytes in the file or buffer.
  std::uint64_t size() const { return size_; }

 private:
  TFRecordReader(std::string name, const std::uint8_t* data, std::size_t size,
                 TFRecordReadOptions options);
  // Validates the frame at `at` (< size_); returns its data and sets frame_size_.
  // `number` (the record's index, or -1 if unknown) goes into error messages.
  std::string_view frame_at(std::uint64_t at, std::int64_t number);

  std::unique_ptr<util::MappedFile> map_;  // null for from_buffer
  std::string name_;
  const std::uint8_t* data_ = nullptr;
  std::uint64_t size_ = 0;
  TFRecordReadOptions options_;
  std::uint64_t pos_ = 0;
  std::uint64_t current_ = 0;
  std::uint64_t frame_size_ = 0;
  std::uint64_t records_ = 0;
  bool numbered_ = false;  // false after read_at: the record's number is unknown
};

/// A DALI index read entry by entry from its memory mapping, so memory stays bounded
/// whatever its size, with DALI's tolerance (it reads with `>>`: blank lines, extra blanks,
/// \r). The one parser of the format: read_index and inspect --deep use it.
class IndexReader {
 public:
  /// InputError if `path` cannot be opened.
  explicit IndexReader(const std::string& path);
  /// The next entry; false at the end. FormatError "PATH:LINE: ..." for a malformed line.
  bool next(IndexEntry& entry);
  /// "PATH:LINE" of the line last read, for messages.
  std::string where() const;

 private:
  std::string path_;
  util::MappedFile map_;
  std::size_t pos_ = 0;
  std::size_t line_ = 0;
};

/// Reads a whole DALI index; FormatError naming the file and line for a malformed line, a
/// frame smaller than the framing, or offsets that overlap or go backwards.
std::vector<IndexEntry> read_index(const std::string& path);

/// Writes a DALI index atomically.
void write_index(const std::string& path, const std::vector<IndexEntry>& entries);

/// The DALI index text for `entries` (one "offset size\n" per entry).
std::string format_index(const std::vector<IndexEntry>& entries);

/// Scans a record file, verifying every frame (both CRCs), and returns its index.
std::vector<IndexEntry> build_index(const std::string& tfrecord_path);

}  // namespace mltool::io
