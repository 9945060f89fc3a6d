// The options of `mltool inspect`, declared once, and the job they configure: the scan, the
// --check thresholds and the --plot chart. apps/cmd_inspect.cpp binds the table and prints.
#include "mltool/records/inspect.hpp"
#include "mltool/util/log.hpp"

namespace mltool::records {

const util::Options<InspectJob>& inspect_options() {
  using J = InspectJob;
  using util::option_at;
  static const util::Options<InspectJob> table = {
      option_at<J>(
          "inputs", [](J& j) -> std::vector<std::string>& { return j.scan.inputs; },
          "A dataset directory (mltool pack), or TFRecord files ('-' reads paths from "
          "stdin)")
          .required(),
      util::flag_at<J>(
          "--deep", [](J& j) -> bool& { return j.scan.deep; },
          "Verify every CRC, record, DALI index line and (datasets) row index and "
          "dataset.json figure"),
      util::custom<J>(
          "--check", "THRESHOLDS",
          "Exit 4 if a threshold is exceeded: NAME=VALUE,... over the defaults " +
              format_thresholds(Thresholds{}) + " (VALUE 'off' drops one; no value: the defaults)",
          [](J& j, const std::string& text) {
            try {
              j.check = parse_thresholds(text);
            } catch (const UsageError& e) {
              throw UsageError(std::string("--check: ") + e.what() +
                               " (put --check after the inputs, or write --check=...)");
            }
          },
          [](const J& j) {
            return j.check ? nlohmann::json(format_thresholds(*j.check)) : nlohmann::json();
          })
          .optional_value(),
      util::option("--plot", &J::plot,
                   "Write a PNG chart (and its SVG beside) of shard sizes and label mix by decile"),
      option_at<J>(
          "--label-feature", [](J& j) -> std::string& { return j.scan.label_feature; },
          "TFRecord files: the feature holding the label (int64 or bytes)"),
  };
  return table;
}

InspectOutcome run_inspect(const InspectJob& job) {
  InspectOutcome out;
  out.report = inspect(job.scan);
  if (job.check) out.violations = check_thresholds(out.report, *job.check);
  if (!job.plot.empty()) {
    write_plot(job.plot, out.report);
    log::info("plot written to " + job.plot);
  }
  return out;
}

nlohmann::json to_json(const InspectOutcome& o, const InspectJob& job) {
  const Thresholds* limits = job.check ? &*job.check : nullptr;
  nlohmann::json doc = to_json(o.report, limits, limits ? &o.violations : nullptr);
  doc["command"] = "inspect";
  return doc;
}

}  // namespace mltool::records
