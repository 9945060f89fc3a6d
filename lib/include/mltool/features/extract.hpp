// `mltool extract` as a library call: tile store → feature store. No LibTorch in this
// header, so the command line compiles without it.
//
// Pipeline: one reader thread takes each batch's encoded tiles from LMDB (in store order)
// and decodes them on --threads workers (libjpeg-turbo / libvips) into a pinned host buffer
// (a pool of a few, so memory is bounded); one thread per device copies a batch to its
// device on a side CUDA stream while the previous batch computes, preprocesses and runs the
// model there; the calling thread writes the rows in store order into resumable chunks
// (features/chunked_writer.hpp) and finally publishes the feature store.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "mltool/features/stain_norm.hpp"
#include "mltool/io/npy.hpp"
#include "mltool/slide/cohort.hpp"
#include "mltool/util/options.hpp"
#include "mltool/util/profile.hpp"

namespace mltool::features {

/// Mixed precision for the forward pass.
enum class Amp { none, f16, bf16 };
extern const util::EnumNames<Amp> kAmps;
/// The stored feature types, by their option names: f32, f16.
extern const util::EnumNames<io::DType> kFeatureDTypes;
/// Where --stain-norm estimates the source stain: each tile alone (torchstain's way), or once
/// per slide from a sample of its tissue tiles (features/slide_stain.hpp).
enum class StainFit { tile, slide };
extern const util::EnumNames<StainFit> kStainFits;

/// Where JPEG tiles are decoded: libjpeg-turbo on the host, nvJPEG on each GPU (the batch's
/// pixels never on the host), or auto (device on CUDA when the tiles are JPEG and nvJPEG loads,
/// else host).
enum class Decode { host, device, automatic };
extern const util::EnumNames<Decode> kDecodes;

/// The options of `mltool extract`, declared once (lib/features/extract_options.cpp): the
/// command line, check_options and the names a resume refusal gives come from it.
struct ExtractJob {
  /// The tile store (mltool tile), or slides (files, DICOM directories) tiled on the fly into
  /// the coordinates store OUTPUT/coordinates.lmdb (extract_features decides which).
  std::vector<std::string> inputs;
  /// The tile store read: the one input, or the coordinates store; set by extract_features.
  std::string store;
  std::string output;                           ///< the feature store directory
  std::string model = "builtin:color-texture";  ///< "builtin:NAME" or a TorchScript file
  int input_size = 224;
  std::array<float, 3> mean{0.485f, 0.456f, 0.406f};
  std::array<float, 3> std{0.229f, 0.224f, 0.225f};
  int batch = 256;
  std::string device = "auto";  ///< auto (every GPU, else CPU), cpu, cuda (every GPU), cuda:N
  Amp amp = Amp::none;
  Decode decode = Decode::automatic;  ///< where JPEG tiles are decoded (--decode)
  io::DType dtype = io::DType::float32;
  int threads = 0;  ///< decode threads; 0 = one per core
  /// LibTorch's intra-op (math) threads on the CPU; 0 = a partial run's when resuming, else
  /// LibTorch's default (OMP_NUM_THREADS, or the cores). Part of the resume fingerprint.
  int math_threads = 0;
  util::ProfileRequest profile;  ///< --profile: a trace of a window of batches (first device)
  bool keep_going = false;       ///< undecodable tiles become invalid (NaN) rows
  bool overwrite = false;  ///< remove a partial extraction and the feature store in `output` first
  std::uint64_t chunk_rows = 8192;  ///< rows per committed chunk (the resume granularity)
  /// "I/N": only the complete slides I, I+N, I+2N, ... in slide-id order (features/shard.hpp);
  /// "" = all of them; "auto": I and N from a job array (util::resolve_shard).
  std::string shard;
  std::size_t shards = 0;            ///< --shards N for --shard auto; 0: not given
  bool allow_wide_features = false;  ///< keep outputs wider than 16,384 values or of > 2 dims
  /// Stain normalisation of each decoded tile before the model's preprocessing, fitted on the
  /// image stain_reference (both or neither given); each tile's stain is estimated from it
  /// alone, as torchstain does (stain_fit tile), or once per slide (slide).
  StainNorm stain_norm = StainNorm::none;
  std::string stain_reference;
  StainFit stain_fit = StainFit::tile;
  /// An out-of-memory error ends the run instead of splitting the batch (docs/memory-modes.md).
  bool no_oom_retry = false;
  /// How slides given as inputs are tiled: `mltool tile`'s options (slide::tile_options),
  /// shared, not copied; its threads are --threads. Refused with a tile store as input.
  slide::TileJob tile;
  /// The keys of the options given explicitly ("input_size", "mean", "std", "amp", "dtype"),
  /// noted by the table's parser: an encoder card's settings yield to them, with a warning.
  std::set<std::string> given;
};

struct ExtractReport {
  std::string output;
  std::string store;  ///< the tile store read (with slides as inputs: the coordinates store)
  std::uint64_t rows = 0;
  std::int64_t dims = 0;
  std::uint64_t resumed_from = 0;  ///< rows found committed by an earlier run
  std::uint64_t invalid = 0;       ///< rows of the store whose tile failed to decode (--keep-going)
  /// Rows this run wrote whose tile had too little stain to normalise (--stain-norm): left as
  /// they were.
  std::uint64_t stain_unchanged = 0;
  /// The seconds the devices spent normalising stain (--stain-norm), in all.
  double stain_seconds = 0;
  /// The decoder of JPEG tiles: "libjpeg-turbo", or nvJPEG's backend ("nvjpeg-hardware",
  /// "nvjpeg-hybrid"; --decode device), and how many of this run's tiles nvJPEG decoded (the
  /// others, not JPEG or refused by it, on the host).
  std::string decoder = "libjpeg-turbo";
  std::uint64_t device_decoded = 0;
  bool skipped = false;  ///< the store was complete already, with these settings
  double seconds = 0;
  double tiles_per_second = 0;  ///< tiles extracted by this run / seconds
  /// From the command's start to the first batch's rows written: loading the model, tiling
  /// slides, the device's first-batch set-up (cuDNN, the TorchScript executor's first runs).
  double first_batch_seconds = 0;
  /// The rate after the first batch: what a long run approaches; 0 with a single batch.
  double steady_tiles_per_second = 0;
  std::vector<std::string> devices;
  int math_threads = 0;  ///< LibTorch's math threads (CPU extraction), else 0
  std::string shard;     ///< "I/N" of a --shard run, else ""
  nlohmann::json model;
  /// Time the devices waited for decoded batches after the first, in all and the longest
  /// wait: what reading tiles (across slide boundaries too) left the model idle.
  double input_wait_seconds = 0;
  double max_input_wait_seconds = 0;
  /// With slides as inputs: their tiling into the coordinates store (failed ones under
  /// keep_going included).
  std::optional<slide::CohortReport> tiled;
};

/// Runs the extraction; throws mltool::Error (UsageError for bad settings or a model whose
/// output does not fit, InputError for a missing store/model, FormatError for an
/// undecodable tile without keep_going, naming the store and the tile key).
ExtractReport extract_features(const ExtractJob& job);

/// The table of ExtractJob's options.
const util::Options<ExtractJob>& extract_options();

/// "0.485,0.456,0.406": the shortest text of each float that reads back as it (--mean, --std).
std::string rgb_text(const std::array<float, 3>& rgb);

/// The summary `mltool extract --json` prints.
nlohmann::json to_json(const ExtractReport& report);

}  // namespace mltool::features
