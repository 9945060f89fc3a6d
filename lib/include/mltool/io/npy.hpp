// NumPy .npy files: a strict header parser (untrusted input: bounded, overflow
// checked), a header formatter, a streaming writer that patches the row count in
// place at the end, and a memory-mapped reader. Format reference:
// https://numpy.org/doc/stable/reference/generated/numpy.lib.format.html
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "mltool/util/file.hpp"

namespace mltool::io {

/// Element types mltool reads and writes. All are stored little-endian.
enum class DType { float32, float16, uint8, int64 };

/// Bytes per element.
std::size_t itemsize(DType dtype) noexcept;
/// The numpy name ("float32", "float16", "uint8", "int64"), as used in manifests.
std::string_view name(DType dtype) noexcept;
/// The .npy descr string ("<f4", "<f2", "|u1", "<i8").
std::string_view npy_descr(DType dtype) noexcept;
/// The dtype with numpy name `text`, or nullopt.
std::optional<DType> dtype_from_name(std::string_view text) noexcept;

/// The most dimensions a header may declare (numpy 1.x's NPY_MAXDIMS).
inline constexpr std::size_t kNpyMaxDims = 32;
/// The longest header (dict text) accepted; numpy refuses longer ones by default too.
inline constexpr std::size_t kNpyMaxHeaderLength = 10000;
/// Header size used by NpyWriter: room for any 2-D shape, so the row count can be
/// patched in place without moving data; numpy itself writes 128-byte headers.
inline constexpr std::size_t kNpyStreamingHeaderSize = 128;

/// What an .npy header says, checked against the size of the file.
struct NpyHeader {
  int major_version = 1;  ///< 1, 2 or 3
  DType dtype = DType::float32;
  std::vector<std::uint64_t> shape;  ///< C order; empty for a 0-d array
  std::uint64_t data_offset = 0;     ///< where the array data starts
  std::uint64_t data_bytes = 0;      ///< product(shape) * itemsize
  /// Number of elements (product of shape; 1 for a 0-d array).
  std::uint64_t elements() const { return data_bytes / itemsize(dtype); }
};

/// Parses and checks the header of a whole .npy file held in [data, data+size).
/// Accepts versions 1.0, 2.0 and 3.0, C order, and the DType descrs above.
/// Throws FormatError naming `path` and the byte offset: bad magic, unsupported
/// version, malformed dict, big-endian or unsupported descr, fortran_order True,
/// more than kNpyMaxDims dims, a size that overflows 64 bits, or a file size
/// other than data_offset + data_bytes ("truncated: expected N bytes of data, found M").
/// Never allocates more than the shape vector.
NpyHeader parse_npy_header(const std::uint8_t* data, std::size_t size, const std::string& path);

/// A version 1.0 header (magic through the newline) whose total length is the
/// smallest multiple of 64 that fits, as numpy pads it so data is aligned.
std::string format_npy_header(DType dtype, const std::vector<std::uint64_t>& shape);

/// The same header padded to exactly `total_size` bytes (a multiple of 64), so
/// that a rewrite with a larger row count fits in the same space. Throws
/// UsageError if the header does not fit or the size is not a multiple of 64.
std::string format_npy_header_padded(DType dtype, const std::vector<std::uint64_t>& shape,
                                     std::size_t total_size);

/// Streams an array of shape (rows, inner_shape...) to `path` without holding it
/// in memory: the header is written first with rows = 0 and patched by commit().
/// Published atomically by commit(); destroyed before that, nothing is published.
class NpyWriter {
 public:
  NpyWriter(std::string path, DType dtype, std::vector<std::uint64_t> inner_shape);

  /// Appends `count` rows of row_bytes() each, already in the file's dtype.
  void write_rows(const void* rows, std::uint64_t count);
  /// Rows written so far.
  std::uint64_t rows() const { return rows_; }
  /// Bytes per row (product of inner_shape times itemsize).
  std::uint64_t row_bytes() const { return row_bytes_; }
  /// Patches the header with the final row count and renames the file into place.
  void commit();
  const std::string& path() const { return file_.path(); }

 private:
  util::AtomicFile file_;
  DType dtype_;
  std::vector<std::uint64_t> inner_shape_;
  std::uint64_t row_bytes_ = 0;
  std::size_t header_size_ = 0;
  std::uint64_t rows_ = 0;
};

/// A memory-mapped .npy file with its checked header. The mapping is shared so
/// that views (e.g. a tensor aliasing the data) can outlive this object.
struct MappedNpy {
  std::shared_ptr<const util::MappedFile> file;
  NpyHeader header;
  /// Start of the array data inside the mapping.
  const std::uint8_t* data() const { return file->data() + header.data_offset; }
};

/// Maps `path` and parses its header; InputError if unreadable, FormatError as
/// parse_npy_header.
MappedNpy map_npy(const std::string& path);

}  // namespace mltool::io
