// mltool export geojson STORE -o DIR/ [--slide ID]... [--tile-object tile|detection]
//                       [--overwrite] [--json]
//
// DIR/<slide id>.geojson per complete slide of a tile store, for QuPath (File > Import
// objects): the tissue outline as annotations and one square per kept tile, in level-0
// pixels. The work is mltool::io::export_geojson (docs/export.md).
#include <iostream>
#include <memory>

#include "cli.hpp"
#include "cli_options.hpp"
#include "mltool/io/geojson_export.hpp"
#include "mltool/util/error.hpp"

namespace mltool::cli {

Action export_geojson_subcommand(CLI::App& export_app, const CommonOptions& common) {
  CLI::App* sub = export_app.add_subcommand(
      "geojson", "Tissue outlines and tile squares per slide as QuPath GeoJSON (level-0 pixels)");
  auto job = std::make_shared<io::GeojsonExportJob>();
  add_options(*sub, io::geojson_export_options(), job);
  // --threads, --json, -v and -q are export's own (cli.cpp adds them to every command); given
  // after `geojson` they fall through to it.
  sub->fallthrough();
  sub->footer(
      "Also: --threads N (slides side by side), --json, -v, -q (mltool export --help). Exit codes: "
      "mltool --help.");
  return [job, &common] {
    job->threads = common.threads;
    const auto report = io::export_geojson(*job);
    if (common.json) std::cout << io::to_json(report).dump(2) << "\n";
    return exit_code::ok;
  };
}

}  // namespace mltool::cli
