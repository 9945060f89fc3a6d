// mltool predict: a finished run's weights applied to a feature store (see predict.hpp).
#include "mltool/train/predict.hpp"

#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <map>
#include <unordered_map>

#include "dataset.hpp"
#include "export.hpp"
#include "mltool/io/feature_store.hpp"
#include "mltool/io/geojson_export.hpp"
#include "mltool/io/tile_store.hpp"
#include "mltool/train/model_spec.hpp"
#include "mltool/train/models.hpp"
#include "mltool/train/safetensors.hpp"
#include "mltool/util/device.hpp"
#include "mltool/util/error.hpp"
#include "mltool/util/file.hpp"
#include "mltool/util/log.hpp"
#ifdef MLTOOL_HAVE_SLIDE
#include "mltool/slide/heatmap.hpp"
#include "mltool/slide/openslide.hpp"
#include "mltool/slide/qc.hpp"
#endif

namespace mltool::train {

const util::EnumNames<Weights> kWeights = {{Weights::best, "best"},
                                           {Weights::final_weights, "final"}};

const util::Options<PredictJob>& predict_options() {
  using J = PredictJob;
  using util::choice, util::option;
  static const util::Options<PredictJob> table = {
      option("run", &J::run, "The run directory (mltool train), finished").required(),
      option("input", &J::input, "The feature store (mltool extract) to predict on").required(),
      option("-o,--output", &J::output, "The prediction directory (created)").required(),
      choice("--weights", &J::weights, kWeights,
             "best (best.safetensors, the monitored best epoch) or final (model.safetensors)"),
      option("--device", &J::device, "auto (the first GPU, else CPU), cpu, cuda or cuda:N"),
      option("--batch", &J::batch, "Tiles per forward pass (tile models)").at_least(1),
      option("--tiles", &J::tiles,
             "The tile store for heatmaps (default: the one the features name, if it exists)"),
      option("--label", &J::label,
             "The class whose probability the PNG heatmaps show (default: the last label)"),
      option("--heatmap-size", &J::heatmap_size, "The PNG heatmaps' long side in pixels")
          .at_least(64),
  };
  return table;
}

namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

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
  const std::string status = run.value("status", "");
  if (status != "complete" && status != "early_stopped")
    throw InputError(at_file(path, "the run's status is '" + status +
                                       "': only a finished run (complete or early_stopped) "
                                       "has weights to predict with"));
  return run;
}

// The extractor (features.json "model") the run's training features came from, or null if
// its dataset or feature store is no longer there (then only the dims are checked).
json trained_extractor(const json& run) {
  const std::string dataset = run.at("dataset").value("path", "");
  try {
    const auto info = read_dataset_info(dataset);
    return io::FeatureStore::open(info.features).manifest().value("model", json());
  } catch (const Error& e) {
    log::warn("cannot read the features the run was trained on (" + std::string(e.what()) +
              "): checking the feature dims only");
    return nullptr;
  }
}

void check_features(const json& run, const io::FeatureStore& store, const std::string& where) {
  const auto dims = run.at("model").at("input_dims").get<std::int64_t>();
  if (static_cast<std::int64_t>(store.dims()) != dims)
    throw InputError(at_file(where, "features of " + std::to_string(store.dims()) +
                                        " dims, but the run was trained on " +
                                        std::to_string(dims) + "-dim features"));
  const json want = trained_extractor(run);
  const json got = store.manifest().value("model", json());
  if (!want.is_null() && want != got)
    throw InputError(at_file(where, "features of extractor " + got.dump() +
                                        ", but the run was trained on features of " + want.dump()));
}

torch::ScalarType tensor_dtype(const std::string& name, const std::string& where) {
  if (name == "F32") return torch::kFloat32;
  if (name == "F16") return torch::kFloat16;
  if (name == "F64") return torch::kFloat64;
  if (name == "I64") return torch::kInt64;
  throw FormatError(at_file(where, "unsupported safetensors dtype " + name));
}

// Copies every parameter and buffer of `model` from the safetensors file at `path`.
void load_safetensors(BlockModel& model, const std::string& path) {
  const SafetensorsFile file = read_safetensors(path);
  std::vector<std::pair<std::string, torch::Tensor>> targets;
  for (const auto& p : model.named_parameters(true)) targets.emplace_back(p.key(), p.value());
  for (const auto& b : model.named_buffers(true)) targets.emplace_back(b.key(), b.value());
  torch::NoGradGuard no_grad;
  for (auto& [name, target] : targets) {
    const auto it = file.tensors.find(name);
    if (it == file.tensors.end())
      throw FormatError(at_file(path, "no tensor " + name + " (the run's model has it)"));
    const SafetensorsEntry& e = it->second;
    auto t = torch::from_blob(const_cast<void*>(e.data), e.shape, tensor_dtype(e.dtype, path));
    if (t.sizes() != target.sizes() || t.nbytes() != e.bytes)
      throw FormatError(at_file(path, name + ": shape differs from the run's model"));
    target.copy_(t);
  }
}

// The run's model with the chosen weights, on `device`, in eval mode.
std::shared_ptr<BlockModel> load_model(const json& run, const PredictJob& job,
                                       const torch::Device& device) {
  if (run.at("spec").value("family", "") == "torchscript")
    throw InputError(at_file(job.run,
                             "a run of a TorchScript model (train --model MODEL.pt): "
                             "predict applies built-in families only so far; its "
                             "model.script.pt loads in PyTorch"));
  const ModelSpec spec = parse_model_spec(run.at("spec"), job.run + "/run.json#/spec");
  const auto& m = run.at("model");
  auto model = build_model(spec, m.at("input_dims").get<std::int64_t>(),
                           m.at("classes").get<std::int64_t>());
  const std::string file = job.weights == Weights::best ? "best.safetensors" : "model.safetensors";
  load_safetensors(*model, job.run + "/" + file);
  model->to(device);
  model->eval();
  return model;
}

// Every row of the store as a CPU tensor of its stored dtype, viewing the memory map.
torch::Tensor matrix_view(const io::FeatureStore& store) {
  const auto type = store.dtype() == io::DType::float16 ? torch::kFloat16 : torch::kFloat32;
  return torch::from_blob(
      const_cast<void*>(store.data()),
      {static_cast<std::int64_t>(store.rows()), static_cast<std::int64_t>(store.dims())}, type);
}

// Rows [begin, end) of the store as float32 on `device`.
torch::Tensor rows(const io::FeatureStore& store, std::int64_t begin, std::int64_t end,
                   const torch::Device& device) {
  return matrix_view(store).slice(0, begin, end).to(device).to(torch::kFloat32);
}

// Logits of every row, `batch` rows per forward pass.
torch::Tensor tile_logits(BlockModel& model, const io::FeatureStore& store, std::int64_t batch,
                          const torch::Device& device) {
  const auto n = static_cast<std::int64_t>(store.rows());
  std::vector<torch::Tensor> parts;
  for (std::int64_t b = 0; b < n; b += batch)
    parts.push_back(model.forward({rows(store, b, std::min(n, b + batch), device), {}}).cpu());
  return parts.empty() ? torch::zeros({0, 0}) : torch::cat(parts);
}

// The bags of a store: each slide's rows, slides in order of their first row.
struct Bags {
  std::vector<std::string> slides;
  std::vector<std::vector<std::int64_t>> rows;
};

Bags bags_of(const io::FeatureStore& store) {
  Bags b;
  std::map<std::string, std::size_t, std::less<>> index;
  for (std::size_t i = 0; i < store.rows(); ++i) {
    const std::string slide(io::slide_of_key(store.key(i)));
    auto [it, added] = index.emplace(slide, b.slides.size());
    if (added) {
      b.slides.push_back(slide);
      b.rows.emplace_back();
    }
    b.rows[it->second].push_back(static_cast<std::int64_t>(i));
  }
  return b;
}

// The attention block's softmax weights over one bag (1 × L) given its input `h`.
torch::Tensor attention_weights(Block& block, const torch::Tensor& h) {
  auto children = block.named_children();
  auto linear = [&](const char* name) { return children[name]->as<torch::nn::Linear>(); };
  auto a = torch::tanh(linear("V")->forward(h));
  if (children.contains("U")) a = a * torch::sigmoid(linear("U")->forward(h));
  return torch::softmax(linear("w")->forward(a).squeeze(-1), 1);
}

struct BagOutput {
  torch::Tensor logits;          ///< bags × classes
  std::vector<float> attention;  ///< per store row
};

// One forward pass per bag (bags differ in length; no padding needed).
BagOutput bag_logits(BlockModel& model, const io::FeatureStore& store, const Bags& bags,
                     const torch::Device& device) {
  BagOutput out;
  out.attention.assign(store.rows(), 0.0f);
  std::size_t pool = 0;
  while (pool < model.size() && model.names()[pool] != "attention") ++pool;
  if (pool == model.size()) throw UsageError("the bag model has no attention block");
  const auto view = matrix_view(store);
  std::vector<torch::Tensor> parts;
  for (const auto& r : bags.rows) {
    const auto x =
        view.index_select(0, torch::tensor(r, torch::kInt64)).to(device).to(torch::kFloat32);
    const auto h = model.forward(
        {x.unsqueeze(0), torch::ones({1, x.size(0)}, torch::kBool).to(device)}, 0, pool);
    const auto w = attention_weights(model.block(pool), h.x).cpu().contiguous();
    for (std::size_t i = 0; i < r.size(); ++i)
      out.attention[static_cast<std::size_t>(r[i])] = w.data_ptr<float>()[i];
    parts.push_back(model.forward(h, pool, model.size()).x.cpu());
  }
  out.logits = torch::cat(parts);
  return out;
}

// predictions.csv: sample, slide, prediction, logit_LABEL..., prob_LABEL...
void write_predictions(const std::string& path, const std::vector<std::string>& samples,
                       const std::vector<std::string>& slides, const torch::Tensor& logits,
                       const std::vector<std::string>& labels) {
  const auto l = logits.to(torch::kFloat32).contiguous();
  const auto p = torch::softmax(l, 1).contiguous();
  const auto k = static_cast<std::int64_t>(labels.size());
  std::string out = "sample,slide,prediction";
  for (const auto& name : labels) out += "," + csv_field("logit_" + name);
  for (const auto& name : labels) out += "," + csv_field("prob_" + name);
  out += "\n";
  for (std::size_t i = 0; i < samples.size(); ++i) {
    const float* row = l.data_ptr<float>() + static_cast<std::int64_t>(i) * k;
    const float* prob = p.data_ptr<float>() + static_cast<std::int64_t>(i) * k;
    const auto best = std::max_element(row, row + k) - row;
    out += csv_field(samples[i]) + "," + csv_field(slides[i]) + "," +
           csv_field(labels[static_cast<std::size_t>(best)]);
    for (std::int64_t c = 0; c < k; ++c) out += "," + exact_float(row[c]);
    for (std::int64_t c = 0; c < k; ++c) out += "," + exact_float(prob[c]);
    out += "\n";
  }
  util::write_file_atomic(path, out);
}

void write_attention(const std::string& path, const io::FeatureStore& store,
                     const std::vector<float>& attention) {
  std::string out = "key,slide,attention\n";
  for (std::size_t i = 0; i < store.rows(); ++i) {
    const std::string key(store.key(i));
    out += csv_field(key) + "," + csv_field(std::string(io::slide_of_key(key))) + "," +
           exact_float(attention[i]) + "\n";
  }
  util::write_file_atomic(path, out);
}

// The tile store for heatmaps: --tiles, else the features' own if it is still there, else
// none ("").
std::string heatmap_store(const PredictJob& job, const io::FeatureStore& store) {
  if (!job.tiles.empty()) {
    if (!util::exists(job.tiles)) throw InputError(at_file(job.tiles, "no such tile store"));
    return job.tiles;
  }
  const json source = store.manifest().value("source", json::object());
  if (!source.is_object() || !source.contains("tile_store") || !source["tile_store"].is_string())
    return "";
  const std::string path = source["tile_store"];
  if (util::exists(path)) return path;
  log::warn(at_file(store.dir(),
                    "its tile store " + path + " is not there: no heatmaps (pass --tiles STORE)"));
  return "";
}

#ifdef MLTOOL_HAVE_SLIDE
// The slide's picture at `long_side`: its thumbnail when the slide file opens, else a light
// grey canvas of its proportions.
io::RgbImage slide_picture(const json& record, int long_side) {
  try {
    const auto slide = slide::Slide::open(record.at("path").get<std::string>());
    return slide::read_qc_image(slide, long_side);
  } catch (const Error& e) {
    log::warn(std::string(e.what()) + ": the heatmap is drawn on a blank picture");
  }
  const double w = record.at("width").get<double>(), h = record.at("height").get<double>();
  const double scale = long_side / std::max({w, h, 1.0});
  io::RgbImage out{std::max(1, static_cast<int>(std::lround(w * scale))),
                   std::max(1, static_cast<int>(std::lround(h * scale))),
                   {}};
  out.pixels.assign(static_cast<std::size_t>(out.width) * out.height * 3, 235);
  return out;
}

// heatmaps/SLIDE.png: `value(row)` in [0, 1] over each tile of the features.
void write_heatmap_png(const io::TileStore& tiles, const std::string& slide,
                       const std::string& file, int long_side,
                       const std::unordered_map<std::string, std::size_t>& row_of,
                       const std::function<float(std::size_t)>& value,
                       const std::vector<std::string>& caption) {
  const json record = *tiles.record("slides", slide);
  const json t = *tiles.record("tiles", slide);
  const io::RgbImage picture = slide_picture(record, long_side);
  const double sx = picture.width / record.at("width").get<double>();
  const double sy = picture.height / record.at("height").get<double>();
  const double size = record.at("size_level0").get<double>();
  std::vector<slide::HeatTile> heat;
  for (std::size_t i = 0; i < t.at("row").size(); ++i) {
    const auto it = row_of.find(
        io::tile_key(slide, t["row"][i].get<std::int64_t>(), t["col"][i].get<std::int64_t>()));
    if (it == row_of.end()) continue;
    const double x = t["x"][i].get<double>(), y = t["y"][i].get<double>();
    heat.push_back({x * sx, y * sy, (x + size) * sx, (y + size) * sy, value(it->second)});
  }
  io::write_png(file, slide::heatmap_picture(picture, heat, caption));
}
#endif

// What the heatmaps show of feature row i: GeoJSON measurements, and the PNG's value in [0, 1]
// with its caption.
struct HeatmapScores {
  std::function<void(std::size_t, json&)> measure;
  std::function<float(std::size_t)> value;
  std::string what;  ///< the PNG caption's name of the value
  int size = 1024;
};

// heatmaps/SLIDE.geojson (and .png where slides can be drawn) for every complete slide of the
// tile store that the features have tiles of. Returns the slides written.
std::int64_t write_heatmaps(const std::string& tiles, const io::FeatureStore& store,
                            const std::string& dir, const HeatmapScores& scores) {
  const auto tile_store = io::TileStore::open(tiles, false);
  std::unordered_map<std::string, std::size_t> row_of;
  std::vector<std::string> slides;
  for (std::size_t i = 0; i < store.rows(); ++i) {
    const std::string key(store.key(i));
    const std::string slide(io::slide_of_key(key));
    if (slides.empty() || slides.back() != slide) slides.push_back(slide);
    row_of.emplace(key, i);
  }
  std::sort(slides.begin(), slides.end());
  slides.erase(std::unique(slides.begin(), slides.end()), slides.end());
  util::make_directories(dir);
  std::int64_t written = 0;
  for (const auto& slide : slides) {
    if (!tile_store.is_complete(slide)) {
      log::warn(at_file(tiles, "no complete slide '" + slide + "': no heatmap for it"));
      continue;
    }
    const auto report =
        io::write_slide_geojson(tile_store, slide, util::join_path(dir, slide + ".geojson"),
                                io::TileObjectType::tile, [&](const std::string& key, json& m) {
                                  const auto it = row_of.find(key);
                                  if (it == row_of.end()) return false;
                                  scores.measure(it->second, m);
                                  return true;
                                });
#ifdef MLTOOL_HAVE_SLIDE
    write_heatmap_png(tile_store, slide, util::join_path(dir, slide + ".png"), scores.size, row_of,
                      scores.value,
                      {slide, "colour: " + scores.what + ", from 0 (blue) to 1 (red)",
                       std::to_string(report.tiles) + " tiles"});
#endif
    ++written;
  }
  return written;
}

// --label's id (the last label's if empty); UsageError naming the run's labels if it has none
// such.
std::size_t label_index(const PredictJob& job, const std::vector<std::string>& labels) {
  if (job.label.empty()) return labels.size() - 1;
  const auto it = std::find(labels.begin(), labels.end(), job.label);
  if (it == labels.end()) {
    std::string names;
    for (const auto& l : labels) names += (names.empty() ? "" : ", ") + l;
    throw UsageError("--label " + job.label + ": not a label of the run (" + names + ")");
  }
  return static_cast<std::size_t>(it - labels.begin());
}

// The heatmaps' scores: per label probabilities and --label's for the PNG (tile models), or
// attention, scaled by the largest of its slide for the PNG (bag models).
HeatmapScores heatmap_scores(const PredictJob& job, const torch::Tensor& logits,
                             const std::vector<std::string>& labels,
                             const std::vector<float>& attention, const io::FeatureStore& store) {
  HeatmapScores h;
  h.size = job.heatmap_size;
  if (!attention.empty()) {
    std::unordered_map<std::string, float> largest;
    for (std::size_t i = 0; i < store.rows(); ++i) {
      float& m = largest[std::string(io::slide_of_key(store.key(i)))];
      m = std::max(m, attention[i]);
    }
    h.measure = [&attention](std::size_t i, json& m) { m["attention"] = attention[i]; };
    h.value = [&attention, &store, largest](std::size_t i) {
      const float m = largest.at(std::string(io::slide_of_key(store.key(i))));
      return m > 0 ? attention[i] / m : 0.0f;
    };
    h.what = "attention / the slide's largest";
    return h;
  }
  const auto label = label_index(job, labels);
  const auto probs = torch::softmax(logits.to(torch::kFloat32), 1).contiguous();
  const auto k = static_cast<std::int64_t>(labels.size());
  h.measure = [probs, k, &labels](std::size_t i, json& m) {
    const float* p = probs.data_ptr<float>() + static_cast<std::int64_t>(i) * k;
    for (std::int64_t c = 0; c < k; ++c) m["prob_" + labels[static_cast<std::size_t>(c)]] = p[c];
  };
  h.value = [probs, k, label](std::size_t i) {
    return probs
        .data_ptr<float>()[static_cast<std::int64_t>(i) * k + static_cast<std::int64_t>(label)];
  };
  h.what = "probability of " + labels[label];
  return h;
}

}  // namespace

json to_json(const PredictReport& r) {
  return {{"output", r.output},     {"unit", r.unit},       {"device", r.device},
          {"weights", r.weights},   {"samples", r.samples}, {"tiles", r.tiles},
          {"heatmaps", r.heatmaps}, {"seconds", r.seconds}};
}

PredictReport predict(const PredictJob& job) {
  const auto start = Clock::now();
  const json run = read_finished_run(job.run);
  const std::string unit = run.at("dataset").value("unit", "tile");
  if (unit != "tile" && unit != "bag")
    throw UsageError(at_file(job.run + "/run.json",
                             "a model of unit '" + unit + "': predict takes tile and bag models"));
  const auto store = io::FeatureStore::open(job.input);
  check_features(run, store, job.input);
  const torch::Device device = util::resolve_devices(job.device).front();
  const auto model = load_model(run, job, device);
  const auto labels = run.at("dataset").at("labels").get<std::vector<std::string>>();
  label_index(job, labels);  // a bad --label stops before anything is written
  const std::string tiles = heatmap_store(job, store);
  util::make_directories(job.output);
  torch::NoGradGuard no_grad;
  std::vector<std::string> samples, slides;
  torch::Tensor logits;
  std::vector<float> attention;
  if (unit == "tile") {
    logits = tile_logits(*model, store, job.batch, device);
    for (std::size_t i = 0; i < store.rows(); ++i) {
      samples.emplace_back(store.key(i));
      slides.emplace_back(io::slide_of_key(samples.back()));
    }
  } else {
    const Bags bags = bags_of(store);
    BagOutput out = bag_logits(*model, store, bags, device);
    logits = out.logits;
    attention = std::move(out.attention);
    samples = slides = bags.slides;
    write_attention(job.output + "/attention.csv", store, attention);
  }
  std::int64_t heatmaps = 0;
  if (!tiles.empty())
    heatmaps = write_heatmaps(tiles, store, job.output + "/heatmaps",
                              heatmap_scores(job, logits, labels, attention, store));
  write_predictions(job.output + "/predictions.csv", samples, slides, logits, labels);
  PredictReport r;
  r.output = job.output;
  r.unit = unit;
  r.device = device.str();
  r.weights = util::name_of(kWeights, job.weights);
  r.samples = static_cast<std::int64_t>(samples.size());
  r.tiles = static_cast<std::int64_t>(store.rows());
  r.heatmaps = heatmaps;
  r.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return r;
}

}  // namespace mltool::train
