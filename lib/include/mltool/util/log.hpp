// One levelled logger for the whole program. Logs go to stderr (stdout is for data, help
// and the --json summary), one line each, prefixed with the program/command name.
#pragma once

#include <string>

namespace mltool::log {

enum class Level { error = 0, warn = 1, info = 2, debug = 3 };

/// Sets the most verbose level that is printed (default: info).
void set_level(Level level);
Level level();
/// Sets the prefix of every line, e.g. "mltool tile".
void set_prefix(std::string prefix);

void error(const std::string& message);
void warn(const std::string& message);
void info(const std::string& message);
void debug(const std::string& message);

}  // namespace mltool::log
