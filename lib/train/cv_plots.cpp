// km.png and scatter.png (cv_plots.hpp): what they show computed from the out-of-fold
// predictions (Kaplan–Meier curves of the risk halves and their log-rank test; Pearson's r),
// drawn by report::draw_km and report::draw_scatter (mltool/report/cv_charts.hpp).
#include "cv_plots.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "mltool/report/cv_charts.hpp"
#include "mltool/train/metrics.hpp"
#include "mltool/util/error.hpp"

namespace mltool::train {
namespace {

using json = nlohmann::json;

double parse(const std::string& text, const std::string& column) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0')
    throw FormatError("oof_predictions.csv: column " + column + ": '" + text + "' is not a number");
  return v;
}

std::vector<double> column_of(const OutOfFold& oof, const std::string& name) {
  const auto it = std::find(oof.columns.begin(), oof.columns.end(), name);
  if (it == oof.columns.end()) throw FormatError("oof_predictions.csv has no column " + name);
  const auto c = static_cast<std::size_t>(it - oof.columns.begin());
  std::vector<double> out;
  for (const auto& row : oof.rows) out.push_back(parse(row[c], name));
  return out;
}

// Survival: each sample high-risk when its risk is above its fold's training median; the
// halves' Kaplan–Meier curves and the log-rank test between them.
json draw_km(const std::string& output, const OutOfFold& oof, const std::vector<double>& medians) {
  const auto time = column_of(oof, "time"), event = column_of(oof, "event"),
             risk = column_of(oof, "risk"), fold = column_of(oof, "fold");
  std::vector<int> group;  // 1: high risk
  report::KmPicture k;
  std::vector<double> e[2];
  for (std::size_t i = 0; i < time.size(); ++i) {
    const double median = medians.at(static_cast<std::size_t>(fold[i]));
    group.push_back(risk[i] > median ? 1 : 0);
    k.times[group.back()].push_back(time[i]);
    e[group.back()].push_back(event[i]);
  }
  k.logrank_p = logrank_p(time, event, group);
  k.longest = *std::max_element(time.begin(), time.end());
  for (int g = 0; g < 2; ++g)
    if (!k.times[g].empty()) {
      const KaplanMeier km = kaplan_meier(k.times[g], e[g]);
      k.curves[g] = {km.times, km.survival, km.censored};
    }
  return report::draw_km(output, k);
}

json draw_scatter(const std::string& output, const OutOfFold& oof) {
  const auto truth = column_of(oof, "target"), pred = column_of(oof, "prediction");
  return report::draw_scatter(output, truth, pred, pearson(truth, pred));
}

}  // namespace

json draw_cv_pictures(const std::string& output, CvPicture picture, const OutOfFold& oof,
                      const std::vector<double>& train_medians) {
  if (oof.rows.empty()) return json::object();
  switch (picture) {
    case CvPicture::km: return {{"km", draw_km(output, oof, train_medians)}};
    case CvPicture::scatter: return {{"scatter", draw_scatter(output, oof)}};
    case CvPicture::none: break;
  }
  return json::object();
}

}  // namespace mltool::train
