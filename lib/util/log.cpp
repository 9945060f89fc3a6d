#include "mltool/util/log.hpp"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <mutex>

#include <nlohmann/json.hpp>

namespace mltool::log {
namespace {

std::atomic<Level> g_level{Level::info};
std::mutex g_mutex;  // guards g_prefix and keeps lines from interleaving
std::string g_prefix = "mltool";

std::atomic<Format> g_format{Format::text};

// "2026-11-25T22:19:02.123Z": UTC, milliseconds.
std::string timestamp() {
  const auto now = std::chrono::system_clock::now();
  const std::time_t seconds = std::chrono::system_clock::to_time_t(now);
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm utc{};
  gmtime_r(&seconds, &utc);
  char text[40];
  std::snprintf(text, sizeof text, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", utc.tm_year + 1900,
                utc.tm_mon + 1, utc.tm_mday, utc.tm_hour, utc.tm_min, utc.tm_sec,
                static_cast<int>(ms));
  return text;
}

void emit(Level at, const char* tag, const char* level, const std::string& message) {
  if (at > g_level.load(std::memory_order_relaxed)) return;
  const std::string time = timestamp();
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_format.load(std::memory_order_relaxed) == Format::json) {
    const std::string line = nlohmann::json{
        {"time", time},
        {"level", level},
        {"command", g_prefix},
        {"message", message}}.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    std::fprintf(stderr, "%s\n", line.c_str());
    return;
  }
  std::fprintf(stderr, "%s %s: %s%s\n", time.c_str(), g_prefix.c_str(), tag, message.c_str());
}

}  // namespace

void set_level(Level level) { g_level.store(level); }
Level level() { return g_level.load(); }
void set_format(Format format) { g_format.store(format); }
void set_prefix(std::string prefix) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_prefix = std::move(prefix);
}

void error(const std::string& message) { emit(Level::error, "error: ", "error", message); }
void warn(const std::string& message) { emit(Level::warn, "warning: ", "warning", message); }
void info(const std::string& message) { emit(Level::info, "", "info", message); }
void debug(const std::string& message) { emit(Level::debug, "debug: ", "debug", message); }

}  // namespace mltool::log
