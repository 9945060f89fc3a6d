// The options of `mltool extract --slide-encoder`, declared once: apps/cmd_extract.cpp binds
// this table beside extract's, whose store, output, --device, --dtype and --math-threads a
// slide encoding shares (slide_encode_job). docs/extract.md's synopsis is checked against the
// bound options (tests/cli/options_docs_test.py).
#include <set>

#include "mltool/features/slide_encode.hpp"
#include "mltool/util/common_options.hpp"
#include "mltool/util/error.hpp"

namespace mltool::features {

const util::Options<SlideEncodeJob>& slide_encode_options() {
  using J = SlideEncodeJob;
  using util::flag, util::option;
  static const util::Options<SlideEncodeJob> table = {
      option("--slide-encoder", &J::encoder,
             "Run this slide encoder (TorchScript with a slide card, scripts/encoders.py) on "
             "the feature store given as store: one row per slide into -o"),
      util::group_table_option(&J::group_table),
      util::group_column_option(&J::group_column),
      flag("--skip-missing", &J::skip_missing,
           "With --group-table: leave out slides the table does not list (refused otherwise)"),
  };
  return table;
}

SlideEncodeJob slide_encode_job(const ExtractJob& extract, SlideEncodeJob slide) {
  // The extract options a slide encoding shares; any other one given is a mistake to report,
  // not to ignore (a --batch or --model that would silently do nothing).
  static const std::set<std::string> shared = {"inputs", "output", "device", "dtype",
                                               "math_threads"};
  const ExtractJob defaults;
  for (const auto& o : extract_options())
    if (!shared.count(o.key()) && o.value(extract) != o.value(defaults))
      throw UsageError(o.flag() +
                       " does not apply to --slide-encoder (which runs a slide encoder on the "
                       "features of a feature store)");
  if (const std::string flag = slide::given_tile_option(extract.tile); !flag.empty())
    throw UsageError(flag + " tiles slides; --slide-encoder reads a feature store");
  if (extract.inputs.size() != 1)
    throw UsageError("--slide-encoder takes one feature store, not " +
                     std::to_string(extract.inputs.size()) + " inputs");
  if (slide.group_table.empty() && (!slide.group_column.empty() || slide.skip_missing))
    throw UsageError(std::string(slide.skip_missing ? "--skip-missing" : "--group-column") +
                     " needs --group-table CSV");
  if (!slide.group_table.empty() && slide.group_column.empty())
    throw UsageError("--group-table needs --group-column NAME (the column of each slide's group)");
  slide.store = extract.inputs.front();
  slide.output = extract.output;
  slide.device = extract.device;
  slide.dtype = extract.dtype;
  slide.math_threads = extract.math_threads;
  return slide;
}

nlohmann::json to_json(const SlideEncodeReport& r) {
  return {{"command", "extract"},
          {"output", r.output},
          {"status", r.skipped ? "skipped" : "encoded"},
          {"rows", r.rows},
          {"dims", r.dims},
          {"resumed_from", r.resumed_from},
          {"input_rows", r.input_rows},
          {"dropped_invalid", r.dropped_invalid},
          {"skipped_slides", r.skipped_slides},
          {"invalid", r.invalid},
          {"cpu_fallbacks", r.cpu_fallbacks},
          {"device", r.device},
          {"math_threads", r.math_threads},
          {"model", r.model},
          {"seconds", r.seconds}};
}

}  // namespace mltool::features
