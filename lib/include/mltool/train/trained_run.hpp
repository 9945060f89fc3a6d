// A finished training run (mltool train's run directory) as other commands use it: its
// run.json checked, its task's outputs, its model's spec, unit and inputs, how its inputs were
// preprocessed, its weights, and its model built for inference. This is all `mltool predict`
// knows of lib/train; nothing here names a task or a model family (each answers for itself).
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "mltool/records/pack.hpp"

namespace torch::jit {
struct Module;
}
namespace mltool::io {
struct Table;
}

namespace mltool::train {

class BlockModel;
class Task;

/// What a run's task tells of its model's outputs (train's Task implements it,
/// lib/train/task.hpp): predictions.csv's columns, each sample's scores and probabilities.
class TaskOutputs {
 public:
  virtual ~TaskOutputs() = default;
  /// The width of the model's output.
  virtual std::int64_t outputs() const = 0;
  /// predict's predictions.csv: its columns after "sample,slide", and one sample's fields from
  /// its outputs (classification: prediction, logit_LABEL..., prob_LABEL...; regression:
  /// prediction; survival: risk, and with nll survival_CUT...).
  virtual std::string output_header() const = 0;
  virtual std::string output_row(const float* out) const = 0;
  /// One number per sample: the risk (survival; higher = earlier event), the prediction
  /// (regression), the last label's probability (classification).
  virtual std::vector<double> scores(const torch::Tensor& outputs) const = 0;
  /// The name of scores() in predict's heatmaps (tasks with probabilities() show those).
  virtual std::string score_name() const = 0;
  /// The names of probabilities()' columns: classification's labels, multilabel's outcomes;
  /// empty for a task without probabilities. predict's --label picks one for the heatmaps.
  virtual std::vector<std::string> label_names() const { return {}; }
  /// Each sample's probability of each of label_names() (CPU float32, N × label_names().size())
  /// from `outputs` (CPU float32, N × outputs()); only for a task with label_names().
  virtual torch::Tensor probabilities(const torch::Tensor& outputs) const {
    (void)outputs;
    return {};
  }
};

/// A CSV field: `s` as it is, or double-quoted ("" for a quote) when it holds a comma, a
/// quote or a line break (the predictions' cells, train's and predict's).
std::string csv_field(const std::string& s);
/// A float32 in the fewest digits that read back to the same float ("%.9g").
std::string exact_float(float v);

/// Which weights of a run: best.safetensors (the monitored best epoch) or model.safetensors
/// (the last epoch's).
enum class RunWeights { best, final_weights };

/// A bag's scores: its logits (1 × classes, CPU float32) and, when the model tells it, its
/// attention per instance (CPU float32, one per instance; undefined otherwise).
struct BagScores {
  torch::Tensor logits;
  torch::Tensor attention;
};

/// A run's model for inference: the built-in family its spec names or its TorchScript module,
/// the chosen weights loaded, in eval mode on one device. Call under torch::NoGradGuard.
class InferenceModel {
 public:
  InferenceModel(std::shared_ptr<BlockModel> model, std::shared_ptr<torch::jit::Module> script,
                 bool bag, const torch::Device& device, std::string name);
  /// The logits (N × classes, on the device) of a batch `x` on the device: N feature rows,
  /// or N uint8 tiles (image models; the model converts them).
  torch::Tensor forward(const torch::Tensor& x) const;
  /// A bag model's scores of one bag: `instances` (L × D, on the device).
  BagScores bag(const torch::Tensor& instances) const;
  /// Whether bag() tells the attention: every built-in bag family (its forward sets
  /// Activation::attention), a TorchScript bag module with an `attention(bag)` method.
  bool has_attention() const;
  bool is_bag() const { return bag_; }
  const torch::Device& device() const { return device_; }
  /// The model, as messages name it ("the model of RUN").
  const std::string& name() const { return name_; }

 private:
  std::shared_ptr<BlockModel> model_;
  std::shared_ptr<torch::jit::Module> script_;  ///< a TorchScript run's module, else null
  bool bag_ = false;
  torch::Device device_;
  std::string name_;
};

/// A finished run directory.
class TrainedRun {
 public:
  /// Reads DIR/run.json: InputError naming it for a directory without one or a run that is
  /// not finished (complete or early_stopped), FormatError for one that is not JSON,
  /// UsageError for a unit this build does not know.
  static TrainedRun open(const std::string& dir);

  const std::string& dir() const { return dir_; }
  /// run.json as read.
  const nlohmann::json& manifest() const { return run_; }
  /// The unit its model was trained on (run.json's dataset.unit): what it reads.
  records::PackUnit unit() const { return unit_; }
  /// run.json's spec: the family and its fields, or {"family": "torchscript", ...}.
  const nlohmann::json& spec() const { return run_.at("spec"); }
  /// The features' dims it was trained on (tile and bag models).
  std::int64_t input_dims() const;
  /// The model's output width.
  std::int64_t classes() const;
  /// Its task's outputs (run.json's "task"; a run from before tasks: classification).
  const TaskOutputs& task() const;
  /// The names of the task's probabilities (classification's labels, multilabel's), or none.
  std::vector<std::string> labels() const { return task().label_names(); }
  /// pack --bag-by's column its bags were made by, or "".
  std::string bag_column() const;
  /// The tile store its image dataset was packed from (run.json's dataset.tile_store), or "".
  std::string tile_store() const;
  /// --stain-norm of a pixel model (run.json's stain_norm: method, reference, sha256), or null.
  nlohmann::json stain_norm() const;
  /// The extractor (features.json's "model") of the features its dataset was packed from, or
  /// null when the dataset or its features.json is no longer there (a warning says so). Only
  /// features.json is read.
  nlohmann::json extractor() const;
  /// The path of the chosen weights.
  std::string weights_file(RunWeights weights) const;
  /// Its model with `weights` loaded, in eval mode on `device`.
  InferenceModel model(RunWeights weights, const torch::Device& device) const;
  /// The task's metrics, with 95% intervals by 1000 bootstrap resamples of the slides (the
  /// run's --seed), of `predictions` (predict's predictions.csv: sample, slide, the task's
  /// columns) where the task scores known labels (classification) and the run's labels table
  /// names every sample's label (by its key, else its slide); null otherwise. The intervals'
  /// JSON as run.json's result.intervals has it.
  nlohmann::json known_label_metrics(const io::Table& predictions) const;

 private:
  std::string dir_;
  nlohmann::json run_;
  records::PackUnit unit_ = records::PackUnit::tile;
  std::shared_ptr<const Task> task_;
};

}  // namespace mltool::train
