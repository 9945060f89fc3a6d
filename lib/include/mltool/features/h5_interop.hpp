// Feature stores to and from the per-slide HDF5 files of CLAM and TRIDENT (docs/export.md,
// docs/import.md).
//
// export_h5: per slide of a feature store, files with dataset `features` (rows x dims) and
// `coords` (rows x 2, level-0 top-left x, y) and the attributes CLAM and TRIDENT put on them,
// in one of three layouts: flat (`<slide>.h5`, or CLAM's `<slide>.pt`, torch.save of the
// features tensor, through an encoder the LibTorch half provides), TRIDENT's job tree, or
// CLAM's feature directory (h5_files/ and pt_files/). Coordinates and patch geometry come from
// the tile store the features were extracted from.
//
// import_h5: a directory of such files (any encoder; or a TRIDENT job directory, whose
// features_<encoder>/ is found) into one feature store: slide id = file stem, keys
// `<slide>/x<X>_y<Y>`, rows in file order.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "mltool/io/npy.hpp"
#include "mltool/util/options.hpp"

namespace mltool::features {

enum class ExportFormat { h5, pt };
extern const util::EnumNames<ExportFormat> kExportFormats;
/// flat: DIR/<slide>.h5 (or .pt); trident: TRIDENT's job tree,
/// DIR/<mag>x_<ps>px_<ov>px_overlap/{patches,features_<encoder>}/; clam: CLAM's patches/,
/// h5_files/ and pt_files/ (docs/export.md).
enum class ExportLayout { flat, trident, clam };
extern const util::EnumNames<ExportLayout> kExportLayouts;
/// f32, f16 (the names `extract --dtype` uses).
extern const util::EnumNames<io::DType> kInteropDTypes;

/// Serializes a rows x dims matrix (`dtype` float32 or float16, row-major) as the bytes of a
/// `.pt` file that Python's torch.load reads as a tensor.
using PtEncoder = std::function<std::string(const void* data, std::uint64_t rows,
                                            std::uint64_t dims, io::DType dtype)>;

struct ExportH5Job {
  std::string features;  ///< the feature store
  std::string output;    ///< the directory of per-slide files
  std::string tiles;     ///< the tile store; empty: the one features.json names
  ExportFormat format = ExportFormat::h5;
  ExportLayout layout = ExportLayout::flat;
  /// Unset: float32 for the clam layout (CLAM trains in float32), the store's dtype otherwise.
  std::optional<io::DType> dtype;
  /// Replace an earlier export in `output`: its journal is dropped, every slide written again.
  bool overwrite = false;
  /// Needed for --format pt and --layout clam (the LibTorch module's); without it they are
  /// refused.
  PtEncoder encode_pt;
  /// Called after each slide's file is published or found done (progress).
  std::function<void(const std::string& slide, std::uint64_t done, std::uint64_t total)> on_slide;
};

struct ExportH5Report {
  std::string output;
  std::string format;
  std::string layout;
  std::string dtype;
  std::string encoder;  ///< the `encoder` attribute written (features_<encoder>/ of trident)
  std::string status;   ///< "exported", or "skipped" when the export was already complete
  std::uint64_t slides = 0;
  std::uint64_t written = 0;       ///< slides whose files this run wrote
  std::uint64_t resumed = 0;       ///< slides whose files an interrupted run had written, kept
  std::uint64_t no_mpp = 0;        ///< slides without µm/px: magnifications by the fallback
  std::uint64_t rows = 0;          ///< rows exported
  std::uint64_t invalid_rows = 0;  ///< invalid rows of the store, left out
  std::uint64_t dims = 0;
  std::string coordinates;  ///< the tile store, or "keys" for x<X>_y<Y> keys
  double seconds = 0;
};

const util::Options<ExportH5Job>& export_h5_options();
/// Throws UsageError for bad options, InputError/FormatError for bad inputs (naming the
/// file), ResourceError for write failures.
ExportH5Report export_h5(const ExportH5Job& job);
nlohmann::json to_json(const ExportH5Report& report);

struct ImportH5Job {
  /// The directory of .h5 files, CLAM's feat_dir (with h5_files/), or a TRIDENT job directory
  /// (or one of its <mag>x_<ps>px_<ov>px_overlap/) whose features_<encoder>/ is read.
  std::string input;
  std::string output;  ///< the feature store to write
  /// Which features_<encoder>/ of a TRIDENT job directory; needed when there are several.
  std::string encoder;
  std::uint64_t chunk_rows = 65536;  ///< rows per committed chunk: what a killed run keeps
  bool overwrite = false;            ///< replace a feature store (or partial import) in `output`
};

struct ImportH5Report {
  std::string output;
  std::string input;   ///< the directory the files were read from
  std::string status;  ///< "imported", or "skipped" when the store was already complete
  std::string layout;  ///< "trident", "clam" or "mixed"
  std::string dtype;
  std::string encoder;  ///< from the files' `features` attribute `encoder`, or ""
  std::uint64_t files = 0;
  std::uint64_t slides = 0;
  std::uint64_t empty = 0;  ///< files with no rows (no slide in the store)
  std::uint64_t rows = 0;
  std::uint64_t dims = 0;
  std::uint64_t resumed_from = 0;  ///< rows an interrupted run had committed
  double seconds = 0;
};

const util::Options<ImportH5Job>& import_h5_options();
ImportH5Report import_h5(const ImportH5Job& job);
nlohmann::json to_json(const ImportH5Report& report);

}  // namespace mltool::features
