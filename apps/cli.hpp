// The command table and the options every subcommand shares. Dispatch, the top-level
// usage and `mltool help CMD` are all built from the one table in commands.cpp, joined by
// the commands of the LibTorch module (torch_module.hpp) when a command needs them.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <string>
#include <vector>

namespace mltool::cli {

/// Options every subcommand accepts, declared once in add_common_options().
struct CommonOptions {
  int threads = 0;                  ///< worker threads; 0 = one per core
  bool json = false;                ///< print one machine-readable JSON summary on stdout
  int verbose = 0;                  ///< -v: debug logging
  bool quiet = false;               ///< -q: errors only
  std::string log_format = "text";  ///< --log-format text|json
};

/// The action of a parsed subcommand: runs it and returns the exit code.
using Action = std::function<int()>;

/// One row of the command table.
struct Command {
  const char* name;
  const char* summary;
  /// Declares the command's options and positionals on `app`; returns the action,
  /// which reads the parsed values when it runs.
  std::function<Action(CLI::App& app, const CommonOptions& common)> setup;
};

/// Where a command is built: into the program, or into the LibTorch module (torch_module.hpp),
/// which the program loads only when the command line names no command of its own.
enum class CommandHome { program, torch_module };

/// A row of the command list: a command's name and where it is built.
struct CommandSlot {
  const char* name;
  CommandHome home;
};

/// Every command, in pipeline order (`mltool --help` lists them so), and where each is built:
/// the one list of commands. A new command is a row here and its factory on its side
/// (commands.cpp or torch_module.cpp). A build without slide reading lacks info and tile.
inline constexpr CommandSlot kCommandList[] = {
    {"info", CommandHome::program},         {"tile", CommandHome::program},
    {"extract", CommandHome::torch_module}, {"train", CommandHome::torch_module},
    {"predict", CommandHome::torch_module}, {"view", CommandHome::program},
    {"pack", CommandHome::program},         {"inspect", CommandHome::program},
    {"index", CommandHome::program},        {"import", CommandHome::program},
    {"export", CommandHome::program},
};

/// Whether `name` is a command kCommandList places in the program (it needs no LibTorch).
bool is_program_command(const std::string& name);

/// The commands built into the program (those that need no LibTorch), in kCommandList's order.
const std::vector<Command>& commands();

/// The table `mltool --help` lists: commands() and `module` (the LibTorch module's commands)
/// in kCommandList's order. std::logic_error for a command the list does not place there.
std::vector<Command> all_commands(const std::vector<Command>& module);

/// Makes `app` a command of subcommands (`mltool export h5`, `mltool import h5`): each row of
/// `table` becomes a subcommand of `app` (cli.cpp gives it the shared options too), one of
/// which must be named; the returned action runs the one that was.
Action add_subcommands(CLI::App& app, const CommonOptions& common,
                       const std::vector<Command>& table);

/// Adds --threads, --json, --verbose and --quiet to a subcommand.
void add_common_options(CLI::App& app, CommonOptions& options);

/// Replaces a "-" entry by the lines of stdin (blank lines and # comments skipped).
std::vector<std::string> expand_stdin_list(const std::vector<std::string>& items);

/// `v` with `digits` decimals ("%.*f"), for log lines.
std::string format_fixed(double v, int digits = 1);

/// Parses argv and runs the selected command; returns the exit code. Throws mltool::Error.
int run(int argc, char** argv);

}  // namespace mltool::cli
