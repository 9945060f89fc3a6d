// `mltool extract --slide-encoder FILE FEATURES/ -o SLIDES/` as a library call: a feature store
// of tiles → a feature store of one row per slide (or per group of slides, --group-table),
// each row what a slide encoder (a TorchScript module with a kind "slide" card,
// schemas/encoder.schema.json) makes of the slide's features and level-0 coordinates. No
// LibTorch in this header.
//
// Phases: check the encoder's card against the store (its patch encoder and width); group the
// store's valid rows by slide (or by the table's group); take each slide's coordinates and
// geometry from the tile store the features came from; run the module group by group, each
// group's row committed as it is done (resumable, features/chunked_writer.hpp); publish.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "mltool/features/extract.hpp"
#include "mltool/io/npy.hpp"
#include "mltool/util/options.hpp"

namespace mltool::features {

/// The options of a slide encoding. Its own table (slide_encode_options()) declares the
/// options only it takes; store, output, --device, --dtype and --math-threads are extract's
/// (extract_options()), taken over by slide_encode_job().
struct SlideEncodeJob {
  std::string encoder;        ///< --slide-encoder: the TorchScript file with a slide card
  std::string group_table;    ///< CSV/TSV/JSONL with columns slide and group_column; "": per slide
  std::string group_column;   ///< the table's column that names a slide's group (e.g. patient)
  bool skip_missing = false;  ///< slides absent from the table are left out, not refused
  // Extract's:
  std::string store;   ///< the feature store of tiles (mltool extract)
  std::string output;  ///< the feature store of slides
  std::string device = "auto";
  io::DType dtype = io::DType::float32;
  int math_threads = 0;
};

struct SlideEncodeReport {
  std::string output;
  bool skipped = false;    ///< complete already with these settings
  std::uint64_t rows = 0;  ///< slides (groups) in the output
  std::uint64_t dims = 0;
  std::uint64_t resumed_from = 0;     ///< groups an earlier run had committed
  std::uint64_t input_rows = 0;       ///< tile rows read
  std::uint64_t dropped_invalid = 0;  ///< invalid (NaN) tile rows of the input, left out
  std::uint64_t skipped_slides = 0;   ///< slides absent from the group table (--skip-missing)
  std::uint64_t invalid = 0;          ///< output rows that are not finite (or had no valid tile)
  std::uint64_t cpu_fallbacks = 0;    ///< groups run on the CPU after the GPU ran out of memory
  std::string device;
  int math_threads = 0;
  double seconds = 0;
  nlohmann::json model;  ///< features.json's model: the slide encoder
};

/// The table of the options only a slide encoding takes.
const util::Options<SlideEncodeJob>& slide_encode_options();

/// `slide` with extract's store, output, --device, --dtype and --math-threads taken from
/// `extract`; a UsageError names an extract option given that a slide encoding does not take
/// (one whose value differs from its default: --model, --batch, ...).
SlideEncodeJob slide_encode_job(const ExtractJob& extract, SlideEncodeJob slide);

/// Runs it. UsageError: a module without a slide card, or whose patch_encoder or patch_dims
/// differ from the store's (naming both), a table without the column, a slide missing from
/// the table (without skip_missing), a resume with other settings. InputError: a missing
/// store, tile store (naming where features.json names it) or slide in it. ResourceError: a
/// forward that fails (its cause kept), another writer on the output.
SlideEncodeReport encode_slides(const SlideEncodeJob& job);

/// The summary `mltool extract --slide-encoder --json` prints.
nlohmann::json to_json(const SlideEncodeReport& report);

}  // namespace mltool::features
