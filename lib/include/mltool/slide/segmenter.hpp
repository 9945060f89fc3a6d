// Tissue and artifacts found by a segmentation model (`--tissue MODEL.pt`) instead of Otsu's
// threshold. The slide side, without LibTorch: the contract a segmenter follows, the windows
// a slide is read in at the model's µm/px, and the class map they add up to. The model itself
// runs behind the Segmenter interface, which the LibTorch half implements
// (features::open_segmenter) and the caller hands down (TileJob::open_segmenter), as train's
// tile feed gets its pixel reader.
//
// The windows: S × S pixels at the model's µm/px (S = input_size), read from the coarsest
// level at or finer than it and resampled as tiles are (libvips Lanczos3), outside the slide
// white. Neighbouring windows overlap by S/4; each pixel takes its class from the window in
// whose central 3S/4-wide part it lies, at least S/8 pixels from that window's border,
// so no pixel is classified next to a border the model saw as the edge of its input (no seams).
// Every pixel takes the arg-max class. docs/tile.md#tissue-found-by-a-model.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "mltool/slide/openslide.hpp"

namespace mltool::slide {

/// What a segmenter's `mltool.json` says (its extra file in the TorchScript archive).
struct SegmenterContract {
  double mpp = 0;                      ///< µm per pixel of the model's input
  int input_size = 0;                  ///< S: the forward takes N × 3 × S × S
  std::vector<std::string> classes;    ///< output channels, in order
  std::vector<std::string> tissue;     ///< names of classes that are tissue
  std::vector<std::string> artifacts;  ///< names of classes that are artifacts
  nlohmann::json doc;                  ///< the whole file, as written

  /// Whether class `index` is in tissue / in artifacts.
  bool is_tissue(int index) const;
  bool is_artifact(int index) const;
};

/// The extra file of a TorchScript archive that holds the contract (as encoders' cards).
inline constexpr const char* kSegmenterContractFile = "mltool.json";

/// Parses and checks a contract: kind "segmenter", mpp in 0.05..100, input_size 32..4096,
/// classes 2..255 distinct non-empty names, tissue a non-empty subset of them, artifacts a
/// subset disjoint from tissue. InputError naming `file`, mltool.json and what is missing or
/// wrong.
SegmenterContract parse_segmenter_contract(const std::string& text, const std::string& file);

/// A segmentation model behind its contract. Not thread-safe: one caller at a time.
class Segmenter {
 public:
  virtual ~Segmenter() = default;
  virtual const SegmenterContract& contract() const = 0;
  /// The class (arg-max channel; ties: the lower channel) of each pixel of `n` windows:
  /// `rgb` n × S × S × 3 bytes, interleaved RGB; `classes` n × S × S bytes.
  virtual void classify(const std::uint8_t* rgb, int n, std::uint8_t* classes) = 0;
  /// How many windows one classify call should take (memory; it splits them itself when
  /// they do not fit).
  virtual int batch() const = 0;
};

/// Opens a segmenter file on a device ("auto", "cpu", "cuda:N"): reads and checks its
/// contract, loads the module, and runs it once on a blank window to check the forward's output
/// shape (N × C × S × S, C = classes). InputError naming the file for anything that breaks the
/// contract; before any slide is read.
using SegmenterOpener =
    std::function<std::shared_ptr<Segmenter>(const std::string& path, const std::string& device)>;

/// --tissue's check of a segmenter's file: UsageError unless `text` is a file, naming --tissue
/// and what else it takes (`others`: "otsu, none").
void check_segmenter_file(const std::string& text, const std::string& others);

/// A slide's classes, at `cell` model pixels per map pixel (1 when the model's image of the
/// slide is at most kMaxClassMapSide on its longer side; else the smallest factor that makes
/// it so). Each cell holds the counts of model pixels per kind, so a tile's shares are exact at
/// cell 1 and assume pixels spread evenly inside a cell otherwise.
struct ClassMap {
  int width = 0, height = 0;                       ///< cells
  int cell = 1;                                    ///< model pixels per cell side
  double level0_per_pixel = 1;                     ///< level-0 pixels per model pixel
  std::int64_t model_width = 0, model_height = 0;  ///< the model's image of the slide
  std::vector<std::uint8_t> classes;       ///< per cell: its most frequent class (ties: lower)
  std::vector<std::uint16_t> tissue;       ///< per cell: model pixels of tissue classes
  std::vector<std::uint16_t> artifact;     ///< per cell: model pixels of artifact classes
  std::vector<std::int64_t> class_pixels;  ///< per class: model pixels over the whole slide
  std::int64_t windows = 0;                ///< windows the model ran on
  double seconds = 0;                      ///< spent segmenting (reads and model)

  /// Level-0 pixels per cell side.
  double level0_per_cell() const { return level0_per_pixel * cell; }
};

/// The longest side of a ClassMap in cells.
inline constexpr int kMaxClassMapSide = 4096;

/// Runs `model` over `slide`, whose µm per level-0 pixel is `slide_mpp`, in overlapping windows
/// (above), `threads` reading them. InputError naming the slide where the model's µm/px is finer
/// than level 0 by more than kLevelTolerance allows (the slide would have to be enlarged).
ClassMap segment_slide(const Slide& slide, double slide_mpp, Segmenter& model, int threads);

/// The windows' geometry along one axis of `length` model pixels: window i starts at
/// i * (S - S/4) - S/8 and gives its classes to [i * (S - S/4), (i + 1) * (S - S/4)).
int window_count(std::int64_t length, int input_size);

}  // namespace mltool::slide
