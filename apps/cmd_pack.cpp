// mltool pack FEATURES/ --labels labels.csv -o dataset/ [options]
//
// Option parsing and the summary; the packing is mltool::records::pack_dataset.
#include <iostream>
#include <map>
#include <memory>

#include <nlohmann/json.hpp>

#include "cli.hpp"
#include "mltool/records/pack.hpp"
#include "mltool/util/error.hpp"
#include "mltool/util/log.hpp"

namespace mltool::cli {
namespace {

struct PackOptions {
  records::PackJob job;
  std::string unit = "tile";
  std::string split = "train=0.8,val=0.1,test=0.1";
  std::uint32_t shards = 1;
};

int run_pack(PackOptions& o, const CommonOptions& common) {
  o.job.unit = records::parse_unit(o.unit);
  o.job.splits = records::parse_splits(o.split);
  if (o.shards < 1) throw UsageError("--shards must be at least 1");
  o.job.shards = o.shards;
  o.job.threads = common.threads;
  o.job.on_shard = [](const records::PackShard& s) {
    log::debug(s.file + ": " + std::to_string(s.records) + " records, " + std::to_string(s.bytes) +
               " bytes");
  };
  const auto r = records::pack_dataset(o.job);
  if (r.missing_keys)
    log::warn(std::to_string(r.missing_keys) +
              " labels rows name keys not in the feature store (skipped)");
  if (r.invalid_rows)
    log::warn(std::to_string(r.invalid_rows) + " labels fall on invalid feature rows (not packed)");
  if (r.empty_bags) log::warn(std::to_string(r.empty_bags) + " bags had no valid row (not packed)");
  // A split can come out empty when there are few groups (by default a group is a slide).
  std::map<std::string, std::uint64_t> per_split;
  for (const auto& s : r.shards) per_split[s.split] += s.records;
  for (const auto& [split, n] : per_split)
    if (n == 0)
      log::warn("split '" + split +
                "' is empty: too few groups (slides, or --group-by values) to fill every split");
  log::info(
      r.output + ": " + std::to_string(r.records) + " records in " +
      std::to_string(r.shards.size()) + " shards" +
      (o.job.dedupe ? ", " + std::to_string(r.duplicate_rows) + " duplicate rows shared" : ""));
  if (common.json) {
    nlohmann::json shards = nlohmann::json::array();
    for (const auto& s : r.shards)
      shards.push_back(
          {{"split", s.split}, {"file", s.file}, {"records", s.records}, {"bytes", s.bytes}});
    std::cout << nlohmann::json{{"command", "pack"},
                                {"output", r.output},
                                {"records", r.records},
                                {"shards", shards},
                                {"missing_keys", r.missing_keys},
                                {"invalid_rows", r.invalid_rows},
                                {"duplicate_labels", r.duplicate_labels},
                                {"duplicate_rows", r.duplicate_rows},
                                {"empty_bags", r.empty_bags},
                                {"coordinates", r.coordinates}}
                     .dump(2)
              << "\n";
  }
  return exit_code::ok;
}

}  // namespace

Command pack_command() {
  return {
      "pack", "Pack features and labels into index-based TFRecord shards with leak-free splits",
      [](CLI::App& app, const CommonOptions& common) -> Action {
        auto o = std::make_shared<PackOptions>();
        auto& j = o->job;
        app.add_option("features", j.features, "The feature store (mltool extract)")->required();
        app.add_option("--labels", j.labels, "Labels table: .csv, .tsv or .jsonl")->required();
        app.add_option("-o,--output", j.output, "The dataset directory to create")->required();
        app.add_option("--unit", o->unit,
                       "Records: tile (one per tile and label), bag (one per slide and label) "
                       "or image (tile records with the tile-store key)")
            ->check(CLI::IsMember({"tile", "bag", "image"}))
            ->capture_default_str();
        app.add_option("--split", o->split, "Splits and their fractions")->capture_default_str();
        app.add_option("--key-column", j.columns.key, "Column of tile keys or slide ids")
            ->capture_default_str();
        app.add_option("--label-column", j.columns.label, "Column of labels")
            ->capture_default_str();
        app.add_option(
            "--group-by", j.columns.group,
            "Column of groups (e.g. patient) that never straddle splits (default: the slide)");
        app.add_option("--shards", o->shards, "Shards per split")->capture_default_str();
        app.add_option("--seed", j.seed, "Seed of the split and shard assignment")
            ->capture_default_str();
        app.add_flag("--dedupe", j.dedupe,
                     "Records of identical feature rows share the first such row");
        app.add_flag("--skip-missing", j.skip_missing,
                     "Skip labels whose key is not in the feature store");
        app.add_flag("--overwrite", j.overwrite, "Replace an existing dataset directory");
        return [o, &common] { return run_pack(*o, common); };
      }};
}

}  // namespace mltool::cli
