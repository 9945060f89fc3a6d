// The little of DICOM Part 10 that `mltool tile --passthrough` needs from a DICOM WSI series
// (VL Whole Slide Microscopy Image instances, one per pyramid level): which instance a file
// holds and how its frames are laid out, and where each frame's compressed bytes are in the
// file. Not a general DICOM reader: it reads the top-level elements it names, skips the rest
// (sequences included), and stops at Pixel Data; datasets in explicit or implicit VR little
// endian (every transfer syntax but the retired big endian and deflate, whose dataset it
// does not read). Frames are read later with pread, from any number of threads.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace mltool::io {

/// JPEG baseline (process 1): the transfer syntax whose frames are whole JPEG files.
inline constexpr const char* kDicomJpegBaseline = "1.2.840.10008.1.2.4.50";

/// A DICOM file's header: the file meta group and the top-level elements before Pixel Data
/// that describe a whole-slide instance. Strings lose DICOM's trailing padding; absent
/// elements stay empty or zero (numbers that default to 1 in DICOM are 1 here).
struct DicomHeader {
  std::string path;
  std::string transfer_syntax;          ///< (0002,0010)
  bool dataset_read = false;            ///< false for big endian / deflated datasets
  std::string sop_class;                ///< (0008,0016), else (0002,0002)
  std::string sop_instance;             ///< (0008,0018)
  std::string series_instance;          ///< (0020,000E)
  std::vector<std::string> image_type;  ///< (0008,0008): e.g. ORIGINAL\PRIMARY\VOLUME\NONE
  std::string photometric;              ///< (0028,0004): RGB, YBR_FULL_422, ...
  std::string organization;             ///< (0020,9311) DimensionOrganizationType
  std::string concatenation;            ///< (0020,9161) ConcatenationUID
  int samples = 0, bits_allocated = 0, planar = 0;
  std::int64_t rows = 0, columns = 0;              ///< (0028,0010/0011): one frame's size
  std::int64_t frames = 1;                         ///< (0028,0008) NumberOfFrames
  std::int64_t total_columns = 0, total_rows = 0;  ///< (0048,0006/0007) TotalPixelMatrix
  std::int64_t focal_planes = 1;                   ///< (0048,0303)
  std::int64_t optical_paths = 1;                  ///< (0048,0302)
  /// (7FE0,0001/0002) Extended Offset Table and its lengths, or empty.
  std::vector<std::uint64_t> extended_offsets, extended_lengths;
  /// The file offset of Pixel Data's value (its first item, when encapsulated); 0 if absent.
  std::uint64_t pixel_data = 0;
  bool encapsulated = false;  ///< Pixel Data of undefined length: items of compressed frames
};

/// Reads `path`'s header. InputError when it cannot be opened or read; FormatError naming the
/// file and the byte offset when it is not DICOM Part 10 (no "DICM" after the 128-byte
/// preamble) or an element is malformed (a length past the end of the file, an unexpected
/// tag inside a sequence, sequences nested too deep).
DicomHeader read_dicom_header(const std::string& path);

/// Where each frame's bytes are: frame i is the concatenation of fragments
/// first[i] .. first[i + 1] - 1 (usually one), each `length` bytes at file `offset`.
struct DicomFrames {
  std::vector<std::uint64_t> offset, length;  ///< per fragment
  std::vector<std::size_t> first;             ///< per frame, plus one past the end
  std::size_t count() const { return first.empty() ? 0 : first.size() - 1; }
};

/// Scans the encapsulated Pixel Data of `header` (its items' headers, not their values) and
/// maps frames to fragments with the Extended Offset Table, else the Basic Offset Table, else
/// one fragment per frame. FormatError naming the file and the byte offset for an item that is
/// not one, an offset table that does not point at items, or fragments that cannot be frames
/// (several per frame without an offset table, fewer than frames).
DicomFrames read_dicom_frames(const DicomHeader& header);

}  // namespace mltool::io
