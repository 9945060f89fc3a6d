#include "mltool/util/log.hpp"

#include <atomic>
#include <cstdio>
#include <mutex>

namespace mltool::log {
namespace {

std::atomic<Level> g_level{Level::info};
std::mutex g_mutex;  // guards g_prefix and keeps lines from interleaving
std::string g_prefix = "mltool";

void emit(Level at, const char* tag, const std::string& message) {
  if (at > g_level.load(std::memory_order_relaxed)) return;
  std::lock_guard<std::mutex> lock(g_mutex);
  std::fprintf(stderr, "%s: %s%s\n", g_prefix.c_str(), tag, message.c_str());
}

}  // namespace

void set_level(Level level) { g_level.store(level); }
Level level() { return g_level.load(); }
void set_prefix(std::string prefix) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_prefix = std::move(prefix);
}

void error(const std::string& message) { emit(Level::error, "error: ", message); }
void warn(const std::string& message) { emit(Level::warn, "warning: ", message); }
void info(const std::string& message) { emit(Level::info, "", message); }
void debug(const std::string& message) { emit(Level::debug, "debug: ", message); }

}  // namespace mltool::log
