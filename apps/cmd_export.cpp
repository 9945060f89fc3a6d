// mltool export FORMAT ...: a tile store's contents in the formats of other tools, one
// subcommand each (cmd_export_<format>.cpp sets up its subcommand and returns its action).
//
//   mltool export geojson STORE -o DIR/      QuPath GeoJSON per slide (docs/export.md)
#include <string>
#include <utility>
#include <vector>

#include "cli.hpp"
#include "mltool/util/error.hpp"

namespace mltool::cli {

Action export_geojson_subcommand(CLI::App& export_app, const CommonOptions& common);

Command export_command() {
  return {"export", "Write a tile store's slides in other tools' formats: geojson (QuPath)",
          [](CLI::App& app, const CommonOptions& common) -> Action {
            app.require_subcommand(1, 1);
            std::vector<std::pair<std::string, Action>> formats = {
                {"geojson", export_geojson_subcommand(app, common)},
            };
            CLI::App* parent = &app;
            return [parent, formats] {
              for (const auto& [name, action] : formats)
                if (parent->get_subcommand(name)->parsed()) return action();
              return exit_code::usage;
            };
          }};
}

}  // namespace mltool::cli
