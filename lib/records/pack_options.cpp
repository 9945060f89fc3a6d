// The options of `mltool pack`, declared once: apps/cmd_pack.cpp binds this table to the
// command line and pack_dataset checks a job against it; docs/pack.md's synopsis is checked
// against it (tests/cli/options_docs_test.py).
#include <algorithm>

#include "mltool/records/pack.hpp"
#include "mltool/util/common_options.hpp"

namespace mltool::records {

const util::EnumNames<PackUnit> kPackUnits = {
    {PackUnit::tile, "tile"}, {PackUnit::bag, "bag"}, {PackUnit::image, "image"}};

const char* to_string(PackUnit unit) { return util::name_of(kPackUnits, unit); }

PackUnit parse_unit(const std::string& text) {
  for (const auto& [unit, name] : kPackUnits)
    if (text == name) return unit;
  throw UsageError("unit \"" + text + "\": expected tile, bag or image");
}

const util::EnumNames<PackTask> kPackTasks = {{PackTask::classification, "classification"},
                                              {PackTask::regression, "regression"},
                                              {PackTask::survival, "survival"},
                                              {PackTask::multilabel, "multilabel"}};

const char* to_string(PackTask task) { return util::name_of(kPackTasks, task); }

PackTask parse_task(const std::string& text) {
  for (const auto& [task, name] : kPackTasks)
    if (text == name) return task;
  throw UsageError("task \"" + text +
                   "\": expected classification, regression, survival or "
                   "multilabel");
}

PackTask manifest_task(const nlohmann::json& manifest) {
  const auto task = manifest.find("task");
  if (task == manifest.end()) return PackTask::classification;  // before tasks were recorded
  return parse_task((task->is_object() ? task->at("kind") : *task).get<std::string>());
}

namespace {

// "train=0.8,val=0.1,test=0.1", as parse_splits reads it.
std::string splits_text(const std::vector<SplitSpec>& splits) {
  std::string out;
  for (const auto& s : splits)
    out += (out.empty() ? "" : ",") + s.name + "=" + nlohmann::json(s.fraction).dump();
  return out;
}

}  // namespace

const util::Options<PackJob>& pack_options() {
  using J = PackJob;
  using util::choice, util::custom, util::flag, util::option, util::option_at;
  static const util::Options<PackJob> table = {
      option("features", &J::features, "The feature store (mltool extract)").required(),
      option("--labels", &J::labels, "Labels table: .csv, .tsv or .jsonl").required(),
      option("-o,--output", &J::output, "The dataset directory to create").required(),
      choice("--unit", &J::unit, kPackUnits,
             "Records: tile (one per tile and label), bag (one per slide and label) or image "
             "(tile records with the tile-store key)"),
      choice("--task", &J::task, kPackTasks,
             "What records carry: a label (classification), a float target (regression), a "
             "time and an event (survival) or several binary outcomes (multilabel)"),
      custom<J>(
          "--split", "TEXT",
          "Splits and their fractions (with --folds: held-out splits only, summing below 1)",
          [](J& j, const std::string& text) {
            j.splits = parse_splits(text, false);  // the sum: by check_job, knowing --folds
            j.splits_given = true;
          },
          [](const J& j) { return nlohmann::json(splits_text(j.splits)); }),
      option_at<J>(
          "--key-column", [](J& j) -> std::string& { return j.columns.key; },
          "Column of tile keys or slide ids"),
      option_at<J>(
          "--label-column", [](J& j) -> std::string& { return j.columns.label; },
          "Column of labels (classification only)"),
      custom<J>(
          "--label-columns", "TEXT",
          "Multilabel: the columns of the binary outcomes, comma-separated (an empty cell masks "
          "that outcome of the sample)",
          [](J& j, const std::string& text) {
            j.columns.labels.clear();
            std::size_t start = 0;
            while (start <= text.size()) {
              const auto comma = std::min(text.find(',', start), text.size());
              const std::string name = text.substr(start, comma - start);
              if (name.empty()) throw UsageError("--label-columns: an empty column name");
              j.columns.labels.push_back(name);
              start = comma + 1;
            }
          },
          [](const J& j) {
            std::string out;
            for (const auto& c : j.columns.labels) out += (out.empty() ? "" : ",") + c;
            return nlohmann::json(out);
          }),
      option_at<J>(
          "--target-column", [](J& j) -> std::string& { return j.columns.target; },
          "Regression: column of the target (a finite number)"),
      option_at<J>(
          "--time-column", [](J& j) -> std::string& { return j.columns.time; },
          "Survival: column of the time to event or censoring (a number > 0)"),
      option_at<J>(
          "--event-column", [](J& j) -> std::string& { return j.columns.event; },
          "Survival: column of the event: 1 observed, 0 censored (also true/false, yes/no, "
          "dead/alive)"),
      option_at<J>(
          "--bag-by", [](J& j) -> std::string& { return j.columns.bag; },
          "With --unit bag: column whose values are the bags (e.g. patient: all of its "
          "slides' tiles; default: one bag per slide)"),
      option_at<J>(
          "--group-by", [](J& j) -> std::string& { return j.columns.group; },
          "Column of groups (e.g. patient) that never straddle splits or folds (default: the "
          "bag column, else the slide)"),
      option("--folds", &J::folds,
             "K folds for cross-validation, splits fold-0..fold-K-1 (0: none)")
          .check([](const J& j) { return j.folds == 0 || j.folds >= 2; }, "0 or at least 2"),
      option("--shards", &J::shards, "Shards per split").at_least(1),
      option("--seed", &J::seed, "Seed of the split and shard assignment"),
      flag("--dedupe", &J::dedupe, "Records of identical feature rows share the first such row"),
      flag("--skip-missing", &J::skip_missing, "Skip labels whose key is not in the feature store"),
      util::overwrite_option(&J::overwrite),
  };
  return table;
}

nlohmann::json to_json(const PackReport& r) {
  nlohmann::json shards = nlohmann::json::array();
  for (const auto& s : r.shards)
    shards.push_back(
        {{"split", s.split}, {"file", s.file}, {"records", s.records}, {"bytes", s.bytes}});
  return {{"command", "pack"},
          {"output", r.output},
          {"records", r.records},
          {"shards", shards},
          {"missing_keys", r.missing_keys},
          {"invalid_rows", r.invalid_rows},
          {"duplicate_labels", r.duplicate_labels},
          {"duplicate_rows", r.duplicate_rows},
          {"empty_bags", r.empty_bags},
          {"incomplete_bags", r.incomplete_bags},
          {"coordinates", r.coordinates}};
}

}  // namespace mltool::records
