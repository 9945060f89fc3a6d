// HDF5 files through the HDF5 C library (Debian's libhdf5), for the per-slide feature files
// CLAM and TRIDENT read and write (`mltool export h5`, `mltool import h5`). Only what those
// files use: 2-D datasets at the root, written and read a block of rows at a time, and the
// scalar and 1-D attributes on them. Float16 is the type h5py writes for numpy's float16
// (IEEE binary16, little-endian), so either side reads the other's files.
//
// Every HDF5 failure becomes an mltool error naming the file, the dataset or attribute and
// what HDF5 said; the library's own printing of its error stack is switched off.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace mltool::io {

/// The element types mltool reads and writes; `other` is anything else (read as an error).
enum class H5Element { float16, float32, float64, int32, int64, other };

/// "float16", "int64", ...
const char* name(H5Element element) noexcept;

/// A dataset's shape and element type; `type_text` describes an `other` type ("string").
struct H5DatasetInfo {
  std::vector<std::uint64_t> shape;
  H5Element element = H5Element::other;
  std::string type_text;
};

/// One open HDF5 file. Movable, not copyable; closed by close() (which reports errors) or,
/// silently, by the destructor.
class H5File {
 public:
  /// Creates (truncates) `path` for writing. ResourceError if it cannot be created.
  static H5File create(const std::string& path);
  /// Opens `path` read-only. InputError if it is missing, FormatError if it is no HDF5 file.
  static H5File open(const std::string& path);

  H5File(H5File&&) noexcept;
  H5File& operator=(H5File&&) noexcept;
  ~H5File();

  const std::string& path() const { return path_; }

  /// Whether a dataset `name` exists at the root.
  bool has_dataset(const std::string& name) const;
  /// The shape and element type of dataset `name`; InputError if there is none.
  H5DatasetInfo dataset_info(const std::string& name) const;

  /// Creates the 2-D dataset `name` (rows x cols) of `element` (float16, float32, int32 or
  /// int64), extendible in rows (maxshape (None, cols)) and chunked by `chunk_rows` rows
  /// (0: about 1 MiB of rows).
  void create_dataset(const std::string& name, H5Element element, std::uint64_t rows,
                      std::uint64_t cols, std::uint64_t chunk_rows = 0);
  /// Writes rows [row0, row0 + count) of the 2-D dataset `name` from `data`, row-major, whose
  /// elements are `memory` (HDF5 converts to the dataset's type).
  void write_rows(const std::string& name, std::uint64_t row0, std::uint64_t count,
                  H5Element memory, const void* data);
  /// Reads rows [row0, row0 + count) of dataset `name` (1-D or 2-D) into `out` as `memory`.
  void read_rows(const std::string& name, std::uint64_t row0, std::uint64_t count, H5Element memory,
                 void* out) const;

  /// The attributes of dataset `name` as JSON: integers, reals, strings, and 1-D arrays of
  /// them; attributes of other types are left out.
  nlohmann::json attributes(const std::string& name) const;
  /// Sets attributes of dataset `name` from a JSON object of integers, reals, strings
  /// (UTF-8, variable length, as h5py writes them) and arrays of integers or reals.
  void set_attributes(const std::string& name, const nlohmann::json& attributes);

  /// Flushes and closes the file; ResourceError if that fails (a full disk).
  void close();

 private:
  struct Handle;
  H5File(std::string path, std::unique_ptr<Handle> handle);
  std::string path_;
  std::unique_ptr<Handle> handle_;
};

}  // namespace mltool::io
