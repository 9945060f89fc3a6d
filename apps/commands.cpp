// The command table: the only list of subcommands built into the program. A command is
// added here when it works. `import` and `export` are tables of subcommands, one per format
// (cmd_import.cpp, cmd_export.cpp). Commands that need LibTorch (extract, train) live in the
// LibTorch module (torch_module.cpp), which only they load.
#include "cli.hpp"

namespace mltool::cli {

Command index_command();
Command pack_command();
Command inspect_command();
Command import_command();
Command export_command();
#ifdef MLTOOL_HAVE_SLIDE
Command info_command();
Command tile_command();
Command view_command();
#endif

const std::vector<Command>& commands() {
  static const std::vector<Command> table = {
#ifdef MLTOOL_HAVE_SLIDE
      info_command(), tile_command(),    view_command(),
#endif
      pack_command(), inspect_command(), index_command(), import_command(), export_command(),
  };
  return table;
}

std::vector<Command> all_commands(const std::vector<Command>& module) {
  std::vector<Command> out;
  for (const auto& command : commands()) {
    if (std::string(command.name) == "pack") out.insert(out.end(), module.begin(), module.end());
    out.push_back(command);
  }
  return out;
}

}  // namespace mltool::cli
