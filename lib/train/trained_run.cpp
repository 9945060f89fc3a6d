// A finished run as other commands use it (mltool/train/trained_run.hpp): run.json checked, its
// task, its preprocessing, its model built for inference, its metrics of new predictions.
#include "mltool/train/trained_run.hpp"

#include <torch/script.h>
#include <torch/torch.h>

#include <map>

#include "dataset.hpp"
#include "export.hpp"
#include "intervals.hpp"
#include "mltool/io/feature_store.hpp"
#include "mltool/io/table.hpp"
#include "mltool/train/model_spec.hpp"
#include "mltool/train/models.hpp"
#include "mltool/train/run_status.hpp"
#include "mltool/util/error.hpp"
#include "mltool/util/file.hpp"
#include "mltool/util/log.hpp"
#include "script_model.hpp"
#include "task.hpp"

namespace mltool::train {
namespace {

using json = nlohmann::json;

// run.json of a finished run; InputError for one still running, stopped or failed.
json read_finished_run(const std::string& dir) {
  const std::string path = dir + "/run.json";
  if (!util::exists(path))
    throw InputError(at_file(path, "no run.json: not a run directory (mltool train)"));
  json run;
  try {
    run = json::parse(util::read_file(path));
  } catch (const json::exception& e) {
    throw FormatError(at_file(path, std::string("not JSON: ") + e.what()));
  }
  const RunStatus status = run_status(run, path);
  if (!finished(status))
    throw InputError(at_file(path, std::string("the run's status is '") + to_string(status) +
                                       "': only a finished run (complete or early_stopped) "
                                       "has weights to predict with"));
  return run;
}

// The unit the run's model was trained on (run.json's dataset), parsed once.
records::PackUnit run_unit(const json& run, const std::string& run_dir) {
  const std::string name = run.at("dataset").value("unit", "tile");
  try {
    return records::parse_unit(name);
  } catch (const UsageError&) {
    throw UsageError(at_file(run_dir + "/run.json", "a model of unit '" + name + "'"));
  }
}

// The labels table of the run's dataset (dataset.json's labels), key -> label; empty when the
// dataset, its table or a label column is gone.
std::map<std::string, std::string> known_labels(const json& run) {
  std::map<std::string, std::string> out;
  try {
    const std::string path =
        util::join_path(run.at("dataset").at("path").get<std::string>(), "dataset.json");
    const json labels = json::parse(util::read_file(path)).at("labels");
    if (!labels.value("label_column", json()).is_string()) return out;
    const auto table = io::read_table(labels.at("path").get<std::string>());
    const std::size_t key = table.column(labels.at("key_column").get<std::string>());
    const std::size_t label = table.column(labels.at("label_column").get<std::string>());
    for (const auto& r : table.rows) out.emplace(r[key], r[label]);
  } catch (const std::exception&) {
    out.clear();  // no labels known: the page says so
  }
  return out;
}

}  // namespace

InferenceModel::InferenceModel(std::shared_ptr<BlockModel> model,
                               std::shared_ptr<torch::jit::Module> script, bool bag,
                               const torch::Device& device, std::string name)
    : model_(std::move(model)),
      script_(std::move(script)),
      bag_(bag),
      device_(device),
      name_(std::move(name)) {}

namespace {

// A model's input: `x`, with the mask of a bag's real instances (or none).
Activation input(torch::Tensor x, torch::Tensor mask = {}) {
  Activation in;
  in.x = std::move(x);
  in.mask = std::move(mask);
  return in;
}

}  // namespace

torch::Tensor InferenceModel::forward(const torch::Tensor& x) const {
  return model_->forward(input(x));
}

bool InferenceModel::has_attention() const {
  if (!bag_) return false;
  // Every built-in bag family's forward sets Activation::attention.
  return script_ ? script_->find_method("attention").has_value() : true;
}

BagScores InferenceModel::bag(const torch::Tensor& x) const {
  BagScores out;
  torch::Tensor w;
  if (script_) {
    out.logits = model_->forward(input(x.unsqueeze(0))).cpu();
    if (has_attention()) w = script_->run_method("attention", x).toTensor().reshape({-1});
  } else {
    const auto mask = torch::ones({1, x.size(0)}, torch::kBool).to(device_);
    const auto y = model_->forward(input(x.unsqueeze(0), mask), 0, model_->size());
    if (y.attention.defined()) w = y.attention.reshape({-1});
    out.logits = y.x.cpu();
  }
  if (w.defined()) {
    if (w.numel() != x.size(0))
      throw InputError("the TorchScript module's attention(bag) returned " +
                       std::to_string(w.numel()) + " weights for a bag of " +
                       std::to_string(x.size(0)) + " tiles");
    out.attention = w.to(torch::kCPU, torch::kFloat32).contiguous();
  }
  return out;
}

TrainedRun TrainedRun::open(const std::string& dir) {
  TrainedRun r;
  r.dir_ = dir;
  r.run_ = read_finished_run(dir);
  r.unit_ = run_unit(r.run_, dir);
  r.task_ = run_task(r.run_);
  // Runs of earlier versions have no task: the pages read the one run_task resolved.
  if (!r.run_.contains("task")) r.run_["task"] = r.task_->describe();
  return r;
}

std::int64_t TrainedRun::input_dims() const {
  return run_.at("model").at("input_dims").get<std::int64_t>();
}

std::int64_t TrainedRun::classes() const {
  return run_.at("model").at("classes").get<std::int64_t>();
}

const TaskOutputs& TrainedRun::task() const { return *task_; }

std::string TrainedRun::bag_column() const { return run_.at("dataset").value("bag_column", ""); }

std::string TrainedRun::tile_store() const { return run_.at("dataset").value("tile_store", ""); }

json TrainedRun::stain_norm() const { return run_.value("stain_norm", json()); }

json TrainedRun::extractor() const {
  try {
    const auto dataset = read_dataset_info(run_.at("dataset").value("path", ""));
    const auto manifest = util::join_path(dataset.features, io::kFeaturesManifestFile);
    return json::parse(util::read_file(manifest)).value("model", json());
  } catch (const Error& e) {
    log::warn("cannot read the features the run was trained on (" + std::string(e.what()) +
              "): checking the feature dims only");
  } catch (const json::exception& e) {
    log::warn(std::string("the features the run was trained on: ") + e.what() +
              ": checking the feature dims only");
  }
  return nullptr;
}

std::string TrainedRun::weights_file(RunWeights weights) const {
  return dir_ + "/" + (weights == RunWeights::best ? "best.safetensors" : "model.safetensors");
}

InferenceModel TrainedRun::model(RunWeights weights, const torch::Device& device) const {
  const bool bag = unit_ == records::PackUnit::bag;
  std::shared_ptr<BlockModel> model;
  std::shared_ptr<torch::jit::Module> script;
  if (spec().value("family", "") == "torchscript") {
    // The trained module as the run exported it; the chosen weights are loaded over its own.
    ScriptModel s = load_script_model(dir_ + "/model.script.pt");
    s.bag = bag;
    s.pixels = unit_ == records::PackUnit::image;
    script = s.module;
    model = script_block_model(s, classes());
  } else {
    const ModelSpec s = parse_model_spec(spec(), dir_ + "/run.json#/spec");
    model = build_model(s, input_dims(), classes());
  }
  import_safetensors(*model, weights_file(weights));
  model->to(device);
  model->eval();
  return InferenceModel(std::move(model), std::move(script), bag, device, "the model of " + dir_);
}

json TrainedRun::known_label_metrics(const io::Table& t) const {
  if (!task_->scores_known_labels() || t.rows.empty()) return nullptr;
  const auto labels = known_labels(run_);
  if (labels.empty()) return nullptr;
  OutOfFold table{{"label"}, {}};
  std::vector<std::size_t> copy;
  for (std::size_t c = 0; c < t.columns.size(); ++c)
    if (t.columns[c] == "prediction" || t.columns[c].rfind("logit_", 0) == 0)
      table.columns.push_back(t.columns[c]), copy.push_back(c);
  SampleGroups groups{"slide", {}};
  const std::size_t sample = t.column("sample"), slide = t.column("slide");
  for (const auto& r : t.rows) {
    auto it = labels.find(r[sample]);
    if (it == labels.end()) it = labels.find(r[slide]);
    if (it == labels.end()) return nullptr;
    std::vector<std::string> row{it->second};
    for (const auto c : copy) row.push_back(r[c]);
    table.rows.push_back(std::move(row));
    groups.of.push_back(r[slide]);
  }
  const std::uint64_t seed = run_.value("options", json::object()).value("seed", std::uint64_t{0});
  try {
    return metric_intervals(task_->statistics(table), table, groups, 1000, seed);
  } catch (const std::exception&) {
    return nullptr;  // a label the run does not know: no metrics
  }
}

}  // namespace mltool::train
