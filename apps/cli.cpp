#include "cli.hpp"

#include <cstring>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "mltool/util/build_info.hpp"
#include "mltool/util/error.hpp"
#include "mltool/util/log.hpp"
#include "torch_module.hpp"

namespace mltool::cli {
namespace {

constexpr const char* kDescription =
    "mltool: whole-slide images to trained models without running out of memory.\n"
    "Exit codes: 0 ok, 1 usage, 2 input/data error, 3 runtime/resource error, 4 partial success.";

// mltool first, then the module's components (LibTorch, CUDA), then the core's others.
std::string version_text(const TorchModule* module, const std::string& why) {
  auto versions = component_versions();
  auto torch = module ? module->versions()
                      : std::vector<std::pair<std::string, std::string>>{
                            {"LibTorch", "unavailable (" + why + ")"}};
  versions.insert(versions.begin() + 1, torch.begin(), torch.end());
  std::string out;
  for (const auto& [name, value] : versions) out += name + " " + value + "\n";
  return out;
}

// Whether the command line names a command built into the program (directly or as
// `help CMD`): then the LibTorch module is not loaded.
bool names_builtin_command(int argc, char** argv) {
  if (argc < 2) return false;
  const char* name = std::strcmp(argv[1], "help") == 0 && argc >= 3 ? argv[2] : argv[1];
  for (const auto& command : commands())
    if (std::strcmp(command.name, name) == 0) return true;
  return false;
}

// The help of a subcommand, identical whether asked as `mltool CMD [SUB] --help` or
// `mltool help CMD [SUB]`; a subcommand's usage line names its parents (mltool export geojson).
std::string command_help(const CLI::App& sub) {
  std::string prefix;
  for (const CLI::App* a = sub.get_parent(); a && a->get_parent(); a = a->get_parent())
    prefix = " " + a->get_name() + prefix;
  return sub.help("mltool" + prefix);
}

// The innermost parsed subcommand of `sub` (`export geojson`: geojson), or `sub` itself.
const CLI::App* innermost(const CLI::App* sub) {
  for (const CLI::App* inner : sub->get_subcommands())
    if (inner->parsed()) return innermost(inner);
  return sub;
}

// `mltool help CMD SUB...`: the subcommand the words name, or nothing.
const CLI::App* named_subcommand(const CLI::App* sub, const std::vector<std::string>& words) {
  for (std::size_t i = 1; sub && i < words.size(); ++i) {
    const CLI::App* next = nullptr;
    for (const CLI::App* inner : sub->get_subcommands({}))
      if (inner->get_name() == words[i]) next = inner;
    sub = next;
  }
  return sub;
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

void apply_logging(const std::string& name, const CommonOptions& common) {
  log::set_prefix("mltool " + name);
  if (common.quiet)
    log::set_level(log::Level::error);
  else if (common.verbose > 0)
    log::set_level(log::Level::debug);
}

}  // namespace

int run(int argc, char** argv) {
  CLI::App app(kDescription, "mltool");
  app.require_subcommand(0, 1);
  bool show_version = false;
  app.add_flag("--version", show_version, "Print the versions of mltool and its components");

  std::string module_failure;
  const TorchModule* module =
      names_builtin_command(argc, argv) ? nullptr : load_torch_module(module_failure);
  auto common = std::make_shared<CommonOptions>();
  std::vector<std::pair<CLI::App*, Action>> actions;
  for (const auto& command : all_commands(module ? module->commands : std::vector<Command>{})) {
    CLI::App* sub = app.add_subcommand(command.name, command.summary);
    add_common_options(*sub, *common);
    actions.emplace_back(sub, command.setup(*sub, *common));
  }
  CLI::App* help = app.add_subcommand("help", "Show the help of a command: mltool help CMD");
  std::vector<std::string> help_topic;
  bool help_json = false;
  help->add_option("command", help_topic, "Command name (and subcommand: export geojson)");
  help->add_flag("--json", help_json,
                 "The command's options as JSON: names, type, default, choices, help");

  auto find_sub = [&actions](const std::string& name) -> CLI::App* {
    for (auto& [sub, action] : actions)
      if (sub->get_name() == name) return sub;
    return nullptr;
  };

  // `mltool CMD [SUB]` alone prints the command's usage, as samtools does.
  if (argc == 2 || argc == 3) {
    const CLI::App* sub = find_sub(argv[1]);
    if (sub && argc == 3) sub = named_subcommand(sub, {argv[1], argv[2]});
    const bool needs_more =
        sub && (!sub->get_options([](const CLI::Option* o) { return o->get_required(); }).empty() ||
                sub->get_require_subcommand_min() > 0);
    if (needs_more) {
      std::cout << command_help(*sub);
      return exit_code::usage;
    }
  }

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    for (auto& [sub, action] : actions)
      if (sub->parsed()) {
        std::cout << command_help(*innermost(sub));
        return exit_code::ok;
      }
    std::cout << app.help();
    return exit_code::ok;
  } catch (const CLI::ParseError& e) {
    std::string hint = " (see mltool --help)";
    if (!module && !module_failure.empty())
      hint += "; the LibTorch commands are unavailable: " + module_failure;
    throw UsageError(e.what() + hint);
  }

  if (show_version) {
    std::cout << version_text(module, module_failure);
    return exit_code::ok;
  }
  if (help->parsed()) {
    if (help_topic.empty()) {
      std::cout << app.help();
      return exit_code::ok;
    }
    if (const CLI::App* sub = named_subcommand(find_sub(help_topic[0]), help_topic)) {
      std::cout << (help_json ? command_options(*sub).dump(2) + "\n" : command_help(*sub));
      return exit_code::ok;
    }
    std::string topic;
    for (const auto& word : help_topic) topic += (topic.empty() ? "" : " ") + word;
    throw UsageError("unknown command '" + topic + "' (see mltool --help)");
  }
  for (auto& [sub, action] : actions)
    if (sub->parsed()) {
      apply_logging(sub->get_name(), *common);
      return action();
    }
  std::cout << app.help();
  return exit_code::usage;
}

}  // namespace mltool::cli
