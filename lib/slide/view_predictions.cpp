// A predict output directory as `mltool view` reads it (docs/predict.md#output): the tile
// store its heatmaps came from (.predict/job.json "heatmaps"), predictions.csv (per tile or per
// slide: prob_LABEL, prediction, risk) and attention.csv. These files may come from anyone:
// sizes are bounded, every value must be a finite number where a number is expected, and
// every message names the file and line.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>

#include "mltool/io/table.hpp"
#include "mltool/util/error.hpp"
#include "mltool/util/file.hpp"
#include "view_internal.hpp"

namespace mltool::slide::view {
namespace {

using nlohmann::json;

constexpr std::uint64_t kMaxTableBytes = std::uint64_t{2} << 30;  // 2 GiB
constexpr std::size_t kMaxLabels = 1000;

io::Table read_bounded(const std::string& path) {
  if (util::file_size(path) > kMaxTableBytes)
    throw InputError(path + ": larger than 2 GiB, more than a prediction's table can be");
  return io::read_table(path);
}

double number_at(const io::Table& t, std::size_t row, std::size_t col) {
  const std::string& text = t.rows[row][col];
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || !std::isfinite(v))
    throw FormatError(t.path + ": line " + std::to_string(t.lines[row]) + ": column " +
                      io::json_quoted(t.columns[col]) + ": " + io::json_quoted(text) +
                      " is not a finite number");
  return v;
}

std::string short_number(double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%.3g", v);
  return text;
}

// The numeric columns a viewer shows: prob_LABEL, prediction (when numeric) and risk.
struct Columns {
  std::vector<std::pair<std::string, std::size_t>> probs;  // label, column
  std::optional<std::size_t> prediction, risk;
  bool numeric_prediction = false;
};

Columns columns_of(const io::Table& t) {
  Columns c;
  for (std::size_t i = 0; i < t.columns.size(); ++i) {
    const auto& name = t.columns[i];
    if (name.rfind("prob_", 0) == 0 && name.size() > 5) c.probs.emplace_back(name.substr(5), i);
    if (name == "prediction") c.prediction = i;
    if (name == "risk") c.risk = i;
  }
  if (c.probs.size() > kMaxLabels)
    throw FormatError(t.path + ": more than " + std::to_string(kMaxLabels) + " prob_ columns");
  c.numeric_prediction = c.prediction && c.probs.empty();
  return c;
}

// What one slide's call reads (the index and the page): the label most tiles were predicted,
// with its share, or the mean; for a bag, its own row.
void add_call(SlidePredictions& p, const io::Table& t, const Columns& c,
              const std::vector<std::size_t>& rows, bool bag) {
  if (rows.empty()) return;
  if (c.prediction && !c.numeric_prediction) {
    std::map<std::string, std::size_t> votes;
    for (auto r : rows) ++votes[t.rows[r][*c.prediction]];
    const auto best = std::max_element(votes.begin(), votes.end(),
                                       [](auto& a, auto& b) { return a.second < b.second; });
    p.call = best->first;
    if (bag) {
      for (const auto& [label, col] : c.probs)
        if (label == best->first) p.probability = short_number(number_at(t, rows[0], col));
    } else {
      p.probability = short_number(double(best->second) / rows.size()) + " of tiles";
    }
    return;
  }
  const auto mean = [&](std::size_t col) {
    double sum = 0;
    for (auto r : rows) sum += number_at(t, r, col);
    return sum / rows.size();
  };
  if (c.numeric_prediction) p.call = short_number(mean(*c.prediction));
  if (c.risk) p.call = "risk " + short_number(mean(*c.risk));
  for (const auto& [label, col] : c.probs)
    p.probability += (p.probability.empty() ? "" : ", ") + label + " " + short_number(mean(col));
}

// A heat layer over tiles: values per tile key, and how they map to [0, 1].
Layer tile_layer(const io::Table& t, std::size_t key_col, std::size_t col,
                 const std::vector<std::size_t>& rows, std::string name, Layer::Scale scale) {
  Layer l;
  l.name = std::move(name);
  l.scale = scale;
  for (auto r : rows) l.values[t.rows[r][key_col]] = number_at(t, r, col);
  return l;
}

void add_tile_layers(SlidePredictions& p, const io::Table& t, const Columns& c,
                     const std::vector<std::size_t>& rows) {
  for (const auto& [label, col] : c.probs)
    p.layers.push_back(tile_layer(t, 0, col, rows, "probability of " + label, Layer::Scale::unit));
  if (c.numeric_prediction)
    p.layers.push_back(tile_layer(t, 0, *c.prediction, rows, "prediction", Layer::Scale::range));
  if (c.risk) p.layers.push_back(tile_layer(t, 0, *c.risk, rows, "risk", Layer::Scale::range));
}

// Row indices of each slide, in the table's order.
std::map<std::string, std::vector<std::size_t>> rows_by_slide(const io::Table& t,
                                                              std::size_t slide_col) {
  std::map<std::string, std::vector<std::size_t>> by;
  for (std::size_t r = 0; r < t.rows.size(); ++r) by[t.rows[r][slide_col]].push_back(r);
  return by;
}

void read_predictions(const std::string& dir, PredictDir& out) {
  const auto path = util::join_path(dir, "predictions.csv");
  const auto t = read_bounded(path);
  const auto sample = t.column("sample"), slide = t.column("slide");
  if (sample != 0) throw FormatError(path + ": the first column is not \"sample\"");
  const Columns c = columns_of(t);
  for (const auto& [id, rows] : rows_by_slide(t, slide)) {
    auto& p = out.slides[id];
    const bool bag = rows.size() == 1 && t.rows[rows[0]][sample] == id;
    add_call(p, t, c, rows, bag);
    if (!bag) add_tile_layers(p, t, c, rows);
  }
}

void read_attention(const std::string& dir, PredictDir& out) {
  const auto path = util::join_path(dir, "attention.csv");
  if (!util::exists(path)) return;
  const auto t = read_bounded(path);
  const auto key = t.column("key"), slide = t.column("slide"), att = t.column("attention");
  for (const auto& [id, rows] : rows_by_slide(t, slide))
    out.slides[id].layers.push_back(tile_layer(t, key, att, rows, "attention", Layer::Scale::max));
}

}  // namespace

bool is_predict_dir(const std::string& path) {
  return util::is_directory(path) && util::exists(util::join_path(path, "predictions.csv")) &&
         util::exists(util::join_path(path, ".predict/job.json"));
}

PredictDir read_predict_dir(const std::string& dir) {
  PredictDir out;
  const auto job_path = util::join_path(dir, ".predict/job.json");
  const auto text = util::read_file(job_path);
  if (text.size() > (std::size_t{16} << 20)) throw InputError(job_path + ": larger than 16 MiB");
  try {
    const auto job = json::parse(text);
    out.store = job.at("heatmaps").get<std::string>();
  } catch (const json::exception& e) {
    throw FormatError(job_path + ": not predict's journal: " + e.what());
  }
  if (out.store.empty())
    throw InputError(dir + ": its prediction names no tile store (.predict/job.json " +
                     "\"heatmaps\" is empty): a bag model's slides have no tiles to draw; " +
                     "view the tile store its features came from instead");
  read_predictions(dir, out);
  read_attention(dir, out);
  return out;
}

}  // namespace mltool::slide::view
