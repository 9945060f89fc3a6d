// What every fuzz target reports as a finding (on stderr, then abort, which libFuzzer records
// with the input): a property that does not hold, or a reader that throws anything but
// mltool::Error (its checked refusal). Each target defines kFuzzTarget, its name in messages.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string_view>

#include "mltool/util/error.hpp"

extern const char* const kFuzzTarget;

[[noreturn]] inline void finding(const char* what, std::string_view detail = {}) {
  std::fprintf(stderr, "%s finding: %s %.*s\n", kFuzzTarget, what, static_cast<int>(detail.size()),
               detail.data());
  std::abort();
}

/// Runs `f`: an mltool::Error is a clean refusal; any other exception is a finding of `step`.
template <typename F>
void expect_clean(const char* step, F&& f) {
  try {
    f();
  } catch (const mltool::Error&) {
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s finding: %s threw a non-mltool exception: %s\n", kFuzzTarget, step,
                 e.what());
    std::abort();
  } catch (...) {
    std::fprintf(stderr, "%s finding: %s threw a non-std exception\n", kFuzzTarget, step);
    std::abort();
  }
}
