// The pictures of a cross-validation's out-of-fold predictions, drawn from what their caller
// computed (lib/train/cv_plots.cpp): Kaplan–Meier curves of the high- and low-risk halves
// (survival) and predicted against true (regression). 1200 × 960 pixels, each a PNG with its
// SVG beside (write_chart); each returns what cv.json records of it.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace mltool::report {

/// A Kaplan–Meier curve: at each distinct time, the survival after it and the censorings there.
struct KmCurve {
  std::vector<double> times;
  std::vector<double> survival;
  std::vector<std::int64_t> censored;
};

/// The low- (0) and high-risk (1) halves: each half's samples' times (for the numbers at risk)
/// and its curve; the log-rank p-value (NaN: undefined) and the longest time.
struct KmPicture {
  std::vector<double> times[2];
  KmCurve curves[2];
  double logrank_p = 0;
  double longest = 0;
};

/// km.png and km.svg in `output`: {"file", "svg", "logrank_p", "low", "high"}.
nlohmann::json draw_km(const std::string& output, const KmPicture& km);

/// scatter.png and scatter.svg in `output`: `pred` against `truth` with Pearson's `r` (NaN:
/// undefined): {"file", "svg", "pearson"}.
nlohmann::json draw_scatter(const std::string& output, const std::vector<double>& truth,
                            const std::vector<double>& pred, double r);

}  // namespace mltool::report
