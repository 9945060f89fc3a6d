// mltool inspect DATASET/ | SHARD.tfrecord... [--deep] [--check [THRESHOLDS]] [--plot FILE.png]
//                [--label-feature NAME] [--json]
//
// Records, bytes and labels per shard, shard balance, what a uniform interleave over the shards
// does to an epoch, and under --deep a check of every byte. Text report (or --json) on stdout;
// --check turns thresholds into exit code 4. The work is mltool::records::inspect.
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "cli.hpp"
#include "mltool/records/inspect.hpp"
#include "mltool/util/error.hpp"
#include "mltool/util/log.hpp"

namespace mltool::cli {
namespace {

struct InspectCliOptions {
  records::InspectOptions inspect;
  std::string plot;
  std::string check;
  CLI::Option* check_option = nullptr;
};

int run_inspect(InspectCliOptions& o, const CommonOptions& common) {
  o.inspect.inputs = expand_stdin_list(o.inspect.inputs);
  o.inspect.threads = common.threads;
  const bool checking = o.check_option->count() > 0;
  records::Thresholds limits;
  if (checking) {
    try {
      limits = records::parse_thresholds(o.check);
    } catch (const UsageError& e) {
      throw UsageError(std::string("--check: ") + e.what() +
                       " (put --check after the inputs, or write --check=...)");
    }
  }
  const records::InspectReport report = records::inspect(o.inspect);
  std::vector<records::Violation> violations;
  if (checking) violations = records::check_thresholds(report, limits);

  if (!o.plot.empty()) {
    records::write_plot(o.plot, report);
    log::info("plot written to " + o.plot);
  }
  if (common.json) {
    nlohmann::json doc =
        records::to_json(report, checking ? &limits : nullptr, checking ? &violations : nullptr);
    doc["command"] = "inspect";
    std::cout << doc.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  } else {
    std::cout << records::format_text(report);
  }
  for (const auto& v : violations) log::error("check failed: " + v.message);
  if (!violations.empty()) {
    log::error(std::to_string(violations.size()) + " threshold(s) exceeded");
    return exit_code::partial;
  }
  return exit_code::ok;
}

}  // namespace

Command inspect_command() {
  return {
      "inspect", "Shard balance, label mix, interleave bias and integrity of TFRecord datasets",
      [](CLI::App& app, const CommonOptions& common) -> Action {
        auto o = std::make_shared<InspectCliOptions>();
        app.add_option(
               "inputs", o->inspect.inputs,
               "A dataset directory (mltool pack), or TFRecord files ('-' reads paths from stdin)")
            ->required();
        app.add_flag("--deep", o->inspect.deep,
                     "Verify every CRC, record, DALI index line and (datasets) row index and "
                     "dataset.json figure");
        o->check_option =
            app.add_option("--check", o->check,
                           "Exit 4 if a threshold is exceeded: NAME=VALUE,... over the defaults " +
                               records::format_thresholds(records::Thresholds{}) +
                               " (VALUE 'off' drops one; no value: the defaults)")
                ->expected(0, 1);
        app.add_option("--plot", o->plot,
                       "Write a PNG chart of shard sizes and label mix by decile");
        app.add_option("--label-feature", o->inspect.label_feature,
                       "TFRecord files: the feature holding the label (int64 or bytes)")
            ->capture_default_str();
        return [o, &common] { return run_inspect(*o, common); };
      }};
}

}  // namespace mltool::cli
