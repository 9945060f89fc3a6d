// mltool export geojson STORE -o DIR/ [--slide ID]... [--tile-object tile|detection]
//                       [--overwrite] [--json]
//
// DIR/<slide id>.geojson per complete slide of a tile store, for QuPath (File > Import
// objects): the tissue outline as annotations and one square per kept tile, in level-0
// pixels. The work is mltool::slide::export_geojson (docs/export.md).
#include <iostream>
#include <memory>

#include "cli.hpp"
#include "cli_options.hpp"
#include "mltool/slide/geojson_export.hpp"
#include "mltool/util/error.hpp"

namespace mltool::cli {

Command export_geojson_command() {
  return {"geojson",
          "Tissue outlines and tile squares per slide as QuPath GeoJSON (level-0 pixels)",
          [](CLI::App& app, const CommonOptions& common) -> Action {
            auto job = std::make_shared<slide::GeojsonExportJob>();
            add_options(app, slide::geojson_export_options(), job);
            return [job, &common] {
              job->threads = common.threads;
              const auto report = slide::export_geojson(*job);
              if (common.json) std::cout << slide::to_json(report).dump(2) << "\n";
              return exit_code::ok;
            };
          }};
}

}  // namespace mltool::cli
