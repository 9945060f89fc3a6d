// One levelled logger for the whole program. Logs go to stderr (stdout is for data, help
// and the --json summary), one line each: in text, an ISO 8601 UTC timestamp, the
// program/command name and the message; in json (--log-format json), one object a line
// {"time", "level", "command", "message"} — what a scheduler's log keeps and a log
// collector parses.
#pragma once

#include <string>

namespace mltool::log {

enum class Level { error = 0, warn = 1, info = 2, debug = 3 };

/// Sets the most verbose level that is printed (default: info).
void set_level(Level level);
Level level();
/// Sets the prefix of every line, e.g. "mltool tile".
void set_prefix(std::string prefix);

enum class Format { text, json };
void set_format(Format format);

void error(const std::string& message);
void warn(const std::string& message);
void info(const std::string& message);
void debug(const std::string& message);

}  // namespace mltool::log
