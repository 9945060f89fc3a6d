// The factories of the commands built into the program, and the tables `mltool` dispatches
// on, ordered and checked by the one list of commands (kCommandList, cli.hpp). `import` and
// `export` are tables of subcommands, one per format (cmd_import.cpp, cmd_export.cpp).
// Commands that need LibTorch (extract, train, predict) live in the LibTorch module
// (torch_module.cpp), which only they load.
#include <cstring>
#include <stdexcept>
#include <string>

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

namespace {

// The command of `table` named `name`, or null.
const Command* find(const std::vector<Command>& table, const char* name) {
  for (const auto& command : table)
    if (std::strcmp(command.name, name) == 0) return &command;
  return nullptr;
}

// Each command of `table` has its row in kCommandList, on side `home`.
void check_listed(const std::vector<Command>& table, CommandHome home) {
  for (const auto& command : table) {
    bool listed = false;
    for (const auto& slot : kCommandList)
      listed = listed || (std::strcmp(slot.name, command.name) == 0 && slot.home == home);
    if (!listed)
      throw std::logic_error(std::string("command ") + command.name +
                             " has no row of its side in kCommandList (cli.hpp)");
  }
}

// The program's commands, in any order: all_commands orders them.
std::vector<Command> program_commands() {
  return {
#ifdef MLTOOL_HAVE_SLIDE
      info_command(), tile_command(),    view_command(),
#endif
      pack_command(), inspect_command(), index_command(), import_command(), export_command(),
  };
}

}  // namespace

bool is_program_command(const std::string& name) {
  for (const auto& slot : kCommandList)
    if (name == slot.name) return slot.home == CommandHome::program;
  return false;
}

const std::vector<Command>& commands() {
  static const std::vector<Command> table = [] {
    const auto made = program_commands();
    check_listed(made, CommandHome::program);
    std::vector<Command> ordered;
    for (const auto& slot : kCommandList)
      if (const Command* c = find(made, slot.name)) ordered.push_back(*c);
    return ordered;
  }();
  return table;
}

std::vector<Command> all_commands(const std::vector<Command>& module) {
  check_listed(module, CommandHome::torch_module);
  std::vector<Command> out;
  for (const auto& slot : kCommandList) {
    const auto& side = slot.home == CommandHome::program ? commands() : module;
    if (const Command* c = find(side, slot.name)) out.push_back(*c);
  }
  return out;
}

}  // namespace mltool::cli
