// train --folds all (cross_validate.hpp): the folds trained one after the other into
// OUTPUT/fold-I, then gathered into cv.json, oof_predictions.csv and the pictures.
#include "mltool/train/cross_validate.hpp"
#include "mltool/train/train.hpp"

#include <cmath>
#include <cstdio>
#include <map>
#include <optional>

#include "class_plots.hpp"
#include "cv_plots.hpp"
#include "dataset.hpp"
#include "export.hpp"
#include "intervals.hpp"
#include "mltool/io/manifest.hpp"
#include "mltool/io/table.hpp"
#include "mltool/report/pages.hpp"
#include "mltool/util/error.hpp"
#include "mltool/util/file.hpp"
#include "mltool/util/log.hpp"
#include "mltool/util/output_lock.hpp"
#include "mltool/util/version.hpp"
#include "task.hpp"

namespace mltool::train {
namespace {

using json = nlohmann::json;

bool finished_run(const json& run) {
  return run.is_object() && run.contains("status") && train::finished(run_status(run, "run.json"));
}

// Fold I's run.json, or null when it has none.
json fold_run(const std::string& output, int fold) {
  const std::string path = util::join_path(fold_directory(output, fold), "run.json");
  return util::exists(path) ? io::read_manifest(path, "train-run") : json();
}

// Mean and sample standard deviation (n − 1) of each metric the folds report as a number,
// over the folds that report it; `scored` counts those folds for a metric some fold cannot
// score (a label with one value only in its validation split).
void summarize(const std::vector<json>& validations, json& mean, json& sd, json& scored) {
  std::map<std::string, std::vector<double>> values;
  for (const auto& v : validations)
    for (const auto& [name, value] : v.items())
      if (value.is_number()) values[name].push_back(value.get<double>());
  for (const auto& [name, xs] : values) {
    if (xs.size() != validations.size()) scored[name] = xs.size();
    double m = 0;
    for (const double x : xs) m += x;
    m /= static_cast<double>(xs.size());
    double ss = 0;
    for (const double x : xs) ss += (x - m) * (x - m);
    mean[name] = m;
    if (xs.size() > 1) sd[name] = std::sqrt(ss / static_cast<double>(xs.size() - 1));
  }
}

// cv.json's per_label (multilabel): each label's out-of-fold counts and AUC (Task::
// label_counts) with its 95% interval, and its folds' mean and sd over the folds that score it.
json per_label(const Task& task, const OutOfFold& oof, const json& cv, int folds) {
  json out = task.label_counts(oof);
  if (!out.is_array()) return nullptr;
  const json intervals = cv.value("intervals", json());
  for (auto& l : out) {
    const std::string metric = "val_auc_" + l.at("label").get<std::string>();
    if (intervals.is_object() && intervals.at("metrics").contains(metric)) {
      const json& m = intervals.at("metrics").at(metric);
      l["auc_low"] = m.at("low");
      l["auc_high"] = m.at("high");
      if (m.contains("not_estimable")) l["auc_not_estimable"] = m["not_estimable"];
    }
    l["folds_scored"] =
        cv.at("mean").contains(metric) ? cv.at("scored_folds").value(metric, json(folds)) : json(0);
    l["fold_mean"] = cv.at("mean").value(metric, json());
    l["fold_sd"] = cv.at("sd").value(metric, json());
  }
  return out;
}

// oof_predictions.csv: every fold's predictions.csv, `sample` first, then `fold`, then the
// rest of its columns. Returns the rows read, for the pictures.
OutOfFold write_oof(const std::string& output, int folds) {
  OutOfFold oof;
  std::string text;
  for (int f = 0; f < folds; ++f) {
    const auto table =
        io::read_table(util::join_path(fold_directory(output, f), "predictions.csv"));
    const std::size_t sample = table.column("sample");
    if (f == 0) {
      oof.columns = {"sample", "fold"};
      for (std::size_t c = 0; c < table.columns.size(); ++c)
        if (c != sample) oof.columns.push_back(table.columns[c]);
      for (std::size_t c = 0; c < oof.columns.size(); ++c)
        text += (c ? "," : "") + csv_field(oof.columns[c]);
      text += "\n";
    } else if (table.columns.size() + 1 != oof.columns.size()) {
      throw FormatError(at_file(table.path, "has other columns than fold 0's predictions.csv"));
    }
    for (const auto& row : table.rows) {
      std::vector<std::string> out{row[sample], std::to_string(f)};
      for (std::size_t c = 0; c < row.size(); ++c)
        if (c != sample) out.push_back(row[c]);
      for (std::size_t c = 0; c < out.size(); ++c) text += (c ? "," : "") + csv_field(out[c]);
      text += "\n";
      oof.rows.push_back(std::move(out));
    }
  }
  util::write_file_atomic(util::join_path(output, "oof_predictions.csv"), text);
  return oof;
}

// The groups of the out-of-fold samples: fold f's rows of oof_predictions.csv are its
// validation split's samples, in order, so their groups are that split's.
SampleGroups oof_groups(const TrainJob& job, int folds) {
  const DatasetInfo data = read_dataset_info(job.dataset);
  if (static_cast<int>(data.fold_splits.size()) != folds)
    throw InputError(at_file(data.manifest_path, "has " + std::to_string(data.fold_splits.size()) +
                                                     " folds, the runs " + std::to_string(folds)));
  SampleGroups groups;
  for (const auto& split : data.fold_splits) {
    const auto g = sample_groups(data, read_split(data, split));
    groups.unit = g.unit;
    groups.of.insert(groups.of.end(), g.of.begin(), g.of.end());
  }
  return groups;
}

// Gathers the finished folds: cv.json, oof_predictions.csv, the pictures.
json gather(const TrainJob& job, int folds) {
  std::vector<json> runs;
  std::string missing;
  for (int f = 0; f < folds; ++f) {
    runs.push_back(fold_run(job.output, f));
    if (runs.back().is_null() || !finished_run(runs.back()))
      missing += (missing.empty() ? "" : ", ") + std::to_string(f) + " (" +
                 (runs.back().is_null() ? "absent" : runs.back().value("status", "?")) + ")";
  }
  if (!missing.empty())
    throw InputError(at_file(
        job.output, "cannot gather: fold(s) " + missing +
                        " not finished; train them with --folds all "
                        "(without --gather-only), or each with --fold I "
                        "-o " +
                        fold_directory(job.output, 0).substr(0, job.output.size()) + "/fold-I"));
  json per_fold = json::array(), mean = json::object(), sd = json::object();
  std::vector<json> validations;
  std::vector<double> medians;
  for (int f = 0; f < folds; ++f) {
    const json& result = runs[static_cast<std::size_t>(f)].at("result");
    validations.push_back(result.at("validation"));
    medians.push_back(result.value("train_risk_median", std::nan("")));
    per_fold.push_back({{"fold", f},
                        {"run", "fold-" + std::to_string(f)},
                        {"best_epoch", result.at("best_epoch")},
                        {"validation", result.at("validation")}});
    if (result.contains("label_counts")) per_fold.back()["label_counts"] = result["label_counts"];
  }
  json scored = json::object();
  summarize(validations, mean, sd, scored);
  json task = runs.front().value("task", json::object());
  task["kind"] = records::to_string(records::manifest_task(runs.front()));
  json cv = {{"format", "mltool.cv"},
             {"format_version", 1},
             {"created_by", util::tool_version()},
             {"dataset", runs.front().at("dataset").at("path")},
             {"task", task},
             {"folds", folds},
             {"per_fold", per_fold},
             {"mean", mean},
             {"sd", sd},
             {"scored_folds", scored}};
  const OutOfFold oof = write_oof(job.output, folds);
  const SampleGroups groups = job.bootstrap > 0 ? oof_groups(job, folds) : SampleGroups{};
  const auto fold_task = run_task(runs.front());
  if (job.bootstrap > 0)
    cv["intervals"] =
        metric_intervals(fold_task->statistics(oof), oof, groups, job.bootstrap, job.seed);
  const json labels = per_label(*fold_task, oof, cv, folds);
  if (!labels.is_null()) cv["per_label"] = labels;
  cv["pictures"] = draw_cv_pictures(job.output, fold_task->cv_picture(), oof, medians);
  cv["pictures"].update(fold_task->draw_charts(job.output, oof, groups, job.bootstrap, job.seed));
  io::write_manifest(util::join_path(job.output, "cv.json"), cv, "cv");
  report::write_cv_report(job.output, cv);
  return cv;
}

// For a mean over labels that says which it averages (val_auc_mean_labels): " (without L, in
// folds F, G)" for each label some fold leaves out; "" otherwise.
std::string left_out(const json& cv, const std::string& name) {
  std::map<std::string, std::string> folds_without;
  std::vector<std::string> order;
  for (const auto& f : cv.at("per_fold")) {
    const json averaged = f.at("validation").value(name + "_labels", json());
    if (!averaged.is_string()) continue;
    const std::string list = "," + averaged.get<std::string>() + ",";
    for (const auto& l : cv.at("task").value("labels", std::vector<std::string>{}))
      if (list.find("," + l + ",") == std::string::npos) {
        if (!folds_without.count(l)) order.push_back(l);
        auto& folds = folds_without[l];
        folds += (folds.empty() ? "" : ", ") + std::to_string(f.value("fold", 0));
      }
  }
  std::string out;
  for (const auto& l : order)
    out += (out.empty() ? "" : "; ") + l + " in fold(s) " + folds_without[l];
  return out.empty() ? "" : " (without " + out + ")";
}

}  // namespace

std::string summary_line(const CrossValidationReport& r) {
  const auto fixed4 = [](const json& v) {
    char t[32];
    std::snprintf(t, sizeof t, "%.4f", v.get<double>());
    return std::string(t);
  };
  std::string out = r.output + ": " + std::to_string(r.folds) + " folds (" +
                    (r.gather_only ? "gathered, --gather-only"
                                   : std::to_string(r.trained) + " trained, " +
                                         std::to_string(r.skipped) + " already finished") +
                    ")";
  const json& cv = r.cv;
  if (!cv.is_object()) return out;
  const json task = cv.value("task", json::object());
  json reported = json::object();
  for (const auto& f : cv.at("per_fold"))
    for (const auto& [name, v] : f.at("validation").items()) reported[name] = v;
  const json scored = cv.value("scored_folds", json::object());
  std::string metrics;
  for (const auto& name : report::metric_order(reported, task)) {
    const json mean = cv.at("mean").value(name, json()), sd = cv.at("sd").value(name, json());
    metrics += (metrics.empty() ? "; " : ", ") + name + " " +
               (mean.is_number() ? fixed4(mean) + (sd.is_number() ? " ± " + fixed4(sd) : "")
                                 : "not scorable in any fold") +
               (scored.contains(name)
                    ? " (" + scored[name].dump() + " of " + std::to_string(r.folds) + " folds)"
                    : "") +
               left_out(cv, name);
  }
  return out + metrics;
}

std::string fold_directory(const std::string& output, int fold) {
  return util::join_path(output, "fold-" + std::to_string(fold));
}

CrossValidationReport cross_validate(
    const TrainJob& job, const std::function<void(int fold, const TrainProgress&)>& progress) {
  if (job.fold >= 0) throw UsageError("--fold and --folds all exclude each other");
  const DatasetInfo data = read_dataset_info(job.dataset);
  const int folds = static_cast<int>(data.fold_splits.size());
  if (folds == 0)
    throw UsageError("--folds all: " + data.manifest_path +
                     " has no folds (pack it with --folds K)");
  CrossValidationReport r;
  r.output = job.output;
  r.folds = folds;
  r.gather_only = job.gather_only;
  util::make_directories(job.output);
  const bool writer = job.rank == 0;
  std::optional<util::OutputLock> lock;
  if (writer) lock.emplace(util::join_path(job.output, "cv.json"), "mltool train --folds all");
  for (int f = 0; f < folds && !job.gather_only; ++f) {
    const json run = fold_run(job.output, f);
    if (!job.overwrite && !run.is_null() && finished_run(run)) {
      ++r.skipped;
      continue;
    }
    TrainJob fold = job;
    fold.all_folds = false;
    fold.fold = f;
    fold.output = fold_directory(job.output, f);
    fold.resume = !job.overwrite && !run.is_null();
    log::info("fold " + std::to_string(f + 1) + "/" + std::to_string(folds) +
              (fold.resume ? ": resuming " : ": training ") + fold.output);
    train_model(fold, [&](const TrainProgress& p) {
      if (progress) progress(f, p);
    });
    ++r.trained;
  }
  if (writer) r.cv = gather(job, folds);
  return r;
}

}  // namespace mltool::train
