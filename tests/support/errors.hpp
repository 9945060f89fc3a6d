// Checking what a test expects to be thrown: the message, and whether it says something.
#pragma once

#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <string_view>

namespace mltool::testing {

/// The message of the E that fn() throws, or nothing if it throws none. Other exceptions go
/// through.
template <class E, class F>
std::optional<std::string> thrown_message(F&& fn) {
  try {
    fn();
  } catch (const E& e) {
    return std::string(e.what());
  }
  return std::nullopt;
}

/// The message of the E that fn() throws; a test failure ("expected an exception") and ""
/// if it throws none.
template <class E, class F>
std::string error_of(F&& fn) {
  if (auto message = thrown_message<E>(fn)) return *message;
  ADD_FAILURE() << "expected an exception";
  return "";
}

/// The message of the E that fn() throws, or "" if it throws none: for checks of input that
/// may be valid, compared with "".
template <class E, class F>
std::string error_or_empty(F&& fn) {
  return thrown_message<E>(fn).value_or("");
}

inline bool contains(std::string_view s, std::string_view part) {
  return s.find(part) != std::string_view::npos;
}

}  // namespace mltool::testing
