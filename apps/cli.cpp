#include "cli.hpp"

#include <cstdio>
#include <cstring>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "mltool/slide/versions.hpp"
#include "mltool/util/build_info.hpp"
#include "mltool/util/error.hpp"
#include "mltool/util/log.hpp"
#include "torch_module.hpp"

namespace mltool::cli {
namespace {

constexpr const char* kDescription =
    "mltool: whole-slide images to trained models without running out of memory.\n"
    "Exit codes: 0 ok, 1 usage, 2 input/data error, 3 runtime/resource error, 4 partial success.";

// mltool first, then the module's components (LibTorch, CUDA) and which module it is, then
// the slide readers (OpenSlide, libvips).
std::string version_text(const TorchModule* module, const std::string& why,
                         const std::string& path) {
  std::vector<std::pair<std::string, std::string>> versions = {{"mltool", version()}};
  auto torch = module ? module->versions()
                      : std::vector<std::pair<std::string, std::string>>{
                            {"LibTorch", "unavailable (" + why + ")"}};
  if (module) torch.emplace_back("module", path.substr(path.rfind('/') + 1));
  versions.insert(versions.end(), torch.begin(), torch.end());
  const auto readers = slide::reader_versions();
  versions.insert(versions.end(), readers.begin(), readers.end());
  std::string out;
  for (const auto& [name, value] : versions) out += name + " " + value + "\n";
  return out;
}

// Whether the command line names a command built into the program (directly or as
// `help CMD`): then the LibTorch module is not loaded.
bool names_builtin_command(int argc, char** argv) {
  if (argc < 2) return false;
  const char* name = std::strcmp(argv[1], "help") == 0 && argc >= 3 ? argv[2] : argv[1];
  return is_program_command(name);
}

// The help of a subcommand, identical whether asked as `mltool CMD --help` or `mltool help CMD`
// (`mltool export h5 --help`, `mltool help export h5` for a subcommand's subcommand).
std::string command_help(const CLI::App& sub) {
  std::string prefix;
  for (const CLI::App* p = sub.get_parent(); p && p->get_parent(); p = p->get_parent())
    prefix = " " + p->get_name() + prefix;
  return sub.help("mltool" + prefix);
}

// The subcommand of `sub` named `name`, or null.
CLI::App* child(CLI::App* sub, const std::string& name) {
  for (CLI::App* c : sub->get_subcommands([](const CLI::App*) { return true; }))
    if (c->get_name() == name) return c;
  return nullptr;
}

// The innermost parsed subcommand at or below `sub`.
CLI::App* innermost_parsed(CLI::App* sub) {
  for (CLI::App* c : sub->get_subcommands([](const CLI::App*) { return true; }))
    if (c->parsed()) return innermost_parsed(c);
  return sub;
}

// A command that cannot run without more arguments: required options, or subcommands.
bool needs_arguments(CLI::App* sub) {
  return !sub->get_options([](const CLI::Option* o) { return o->get_required(); }).empty() ||
         !sub->get_subcommands([](const CLI::App*) { return true; }).empty();
}

// `mltool help CMD --json`: the options as declared (each command's option table, bound by
// cli_options.hpp, and the shared ones), for wrappers and for the test that checks the docs.
nlohmann::json command_options(const CLI::App& sub) {
  nlohmann::json out = nlohmann::json::array();
  for (const CLI::Option* o : sub.get_options()) {
    if (o->get_name() == "--help") continue;
    std::vector<std::string> names;
    for (const auto& n : o->get_snames()) names.push_back("-" + n);
    for (const auto& n : o->get_lnames()) names.push_back("--" + n);
    if (names.empty()) names.push_back(o->get_name());
    nlohmann::json d = {{"names", names},
                        {"positional", o->get_lnames().empty() && o->get_snames().empty()},
                        {"flag", o->get_type_name().empty()},
                        {"required", o->get_required()},
                        {"help", o->get_description()}};
    std::string type = o->get_type_name();
    if (const auto brace = type.find(":{"); brace != std::string::npos) {
      std::vector<std::string> choices;
      std::string list = type.substr(brace + 2, type.find('}', brace) - brace - 2);
      for (std::size_t at = 0; at <= list.size();) {
        const auto comma = std::min(list.find(',', at), list.size());
        choices.push_back(list.substr(at, comma - at));
        at = comma + 1;
      }
      d["choices"] = choices;
      type.erase(brace);
    }
    if (!type.empty()) d["type"] = type;
    if (!o->get_default_str().empty()) d["default"] = o->get_default_str();
    out.push_back(d);
  }
  return out;
}

// The --json summary of a run that ended with an error: written with one call, so a
// scheduler's log keeps it whole.
void print_failure(const std::string& command, const std::string& error, int code, bool stopped) {
  const std::string text = nlohmann::json{{"command", command},
                                          {"status", stopped ? "stopped" : "failed"},
                                          {"error", error},
                                          {"exit_code", code}}
                               .dump(2) +
                           "\n";
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fflush(stdout);
}

void apply_logging(const std::string& name, const CommonOptions& common) {
  log::set_prefix("mltool " + name);
  log::set_format(common.log_format == "json" ? log::Format::json : log::Format::text);
  if (common.quiet)
    log::set_level(log::Level::error);
  else if (common.verbose > 0)
    log::set_level(log::Level::debug);
}

// The command line as declared: every command (the LibTorch module's too, unless the line
// names one of the program's own), `help`, and each command's action.
struct CommandLine {
  CLI::App app{kDescription, "mltool"};
  bool show_version = false;
  std::string module_failure, module_path;
  const TorchModule* module = nullptr;
  std::shared_ptr<CommonOptions> common = std::make_shared<CommonOptions>();
  std::vector<std::pair<CLI::App*, Action>> actions;
  CLI::App* help = nullptr;
  std::vector<std::string> help_topic;
  bool help_json = false;

  // The command named `name`, or null.
  CLI::App* find(const std::string& name) const {
    for (const auto& [sub, action] : actions)
      if (sub->get_name() == name) return sub;
    return nullptr;
  }
};

void declare(CommandLine& cl, int argc, char** argv) {
  cl.app.require_subcommand(0, 1);
  cl.app.add_flag("--version", cl.show_version, "Print the versions of mltool and its components");
  if (!names_builtin_command(argc, argv))
    cl.module = load_torch_module(cl.module_failure, &cl.module_path);
  for (const auto& command :
       all_commands(cl.module ? cl.module->commands : std::vector<Command>{})) {
    CLI::App* sub = cl.app.add_subcommand(command.name, command.summary);
    add_common_options(*sub, *cl.common);
    cl.actions.emplace_back(sub, command.setup(*sub, *cl.common));
    for (CLI::App* nested : sub->get_subcommands([](const CLI::App*) { return true; }))
      add_common_options(*nested, *cl.common);
  }
  cl.help = cl.app.add_subcommand("help", "Show the help of a command: mltool help CMD");
  cl.help->add_option("command", cl.help_topic, "Command name (and subcommand: export h5)");
  cl.help->add_flag("--json", cl.help_json,
                    "The command's options as JSON: names, type, default, choices, help");
}

// `mltool CMD` (or `mltool CMD SUB`) alone prints the command's usage, as samtools does: true
// when it did.
bool printed_usage_alone(const CommandLine& cl, int argc, char** argv) {
  if (argc < 2) return false;
  CLI::App* sub = cl.find(argv[1]);
  for (int i = 2; sub && i < argc; ++i) sub = child(sub, argv[i]);
  if (!sub || !needs_arguments(sub)) return false;
  std::cout << command_help(*sub);
  return true;
}

// Parses the line; true when --help was asked for (and printed). UsageError for a line that
// does not parse, naming why the LibTorch commands are missing if they are.
bool parse_printed_help(CommandLine& cl, int argc, char** argv) {
  try {
    cl.app.parse(argc, argv);
    return false;
  } catch (const CLI::CallForHelp&) {
    for (auto& [sub, action] : cl.actions)
      if (sub->parsed()) {
        std::cout << command_help(*innermost_parsed(sub));
        return true;
      }
    std::cout << cl.app.help();
    return true;
  } catch (const CLI::ParseError& e) {
    std::string hint = " (see mltool --help)";
    if (!cl.module && !cl.module_failure.empty())
      hint += "; the LibTorch commands are unavailable: " + cl.module_failure;
    throw UsageError(e.what() + hint);
  }
}

// `mltool help [CMD [SUB]] [--json]`.
int show_help(const CommandLine& cl) {
  if (cl.help_topic.empty()) {
    std::cout << cl.app.help();
    return exit_code::ok;
  }
  CLI::App* sub = cl.find(cl.help_topic[0]);
  std::string name = cl.help_topic[0];
  for (std::size_t i = 1; sub && i < cl.help_topic.size(); ++i) {
    sub = child(sub, cl.help_topic[i]);
    name += " " + cl.help_topic[i];
  }
  if (!sub) throw UsageError("unknown command '" + name + "' (see mltool --help)");
  std::cout << (cl.help_json ? command_options(*sub).dump(2) + "\n" : command_help(*sub));
  return exit_code::ok;
}

// Runs the parsed command `sub`; with --json, a failure also prints its summary.
int run_command(const CLI::App& sub, const Action& action, const CommonOptions& common) {
  apply_logging(sub.get_name(), common);
  if (!common.json) return action();
  try {
    return action();
  } catch (const Error& e) {  // --json: a summary also of a failed run, for schedulers
    print_failure(sub.get_name(), e.what(), exit_code_for(e.kind()),
                  e.kind() == ErrorKind::stopped);
    throw;
  }
}

}  // namespace

int run(int argc, char** argv) {
  CommandLine cl;
  declare(cl, argc, argv);
  if (printed_usage_alone(cl, argc, argv)) return exit_code::usage;
  if (parse_printed_help(cl, argc, argv)) return exit_code::ok;
  if (cl.show_version) {
    std::cout << version_text(cl.module, cl.module_failure, cl.module_path);
    return exit_code::ok;
  }
  if (cl.help->parsed()) return show_help(cl);
  for (const auto& [sub, action] : cl.actions)
    if (sub->parsed()) return run_command(*sub, action, *cl.common);
  std::cout << cl.app.help();
  return exit_code::usage;
}

}  // namespace mltool::cli
