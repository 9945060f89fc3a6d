#include "mltool/util/options.hpp"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace mltool::util {

std::string number_text(double v) {
  char text[64];
  for (int digits = 1; digits <= 17; ++digits) {
    std::snprintf(text, sizeof text, "%.*g", digits, v);
    if (std::strtod(text, nullptr) == v) break;
  }
  return text;
}

std::string value_text(const nlohmann::json& v) {
  if (v.is_null()) return "";
  if (v.is_string()) return v.get<std::string>();
  if (v.is_number_float()) return number_text(v.get<double>());
  return v.dump();
}

std::string one_of_text(const std::vector<std::string>& names) {
  std::string out;
  for (std::size_t i = 0; i < names.size(); ++i)
    out += (i == 0 ? "" : i + 1 == names.size() ? " or " : ", ") + names[i];
  return out;
}

std::int64_t parse_integer(const std::string& text, const std::string& flag) {
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno == ERANGE)
    throw UsageError(flag + ": '" + text + "' is not an integer");
  return v;
}

std::uint64_t parse_unsigned(const std::string& text, const std::string& flag) {
  char* end = nullptr;
  errno = 0;
  const unsigned long long v = std::strtoull(text.c_str(), &end, 10);
  if (text.empty() || text.front() == '-' || *end != '\0' || errno == ERANGE)
    throw UsageError(flag + ": '" + text + "' is not a non-negative integer");
  return v;
}

double parse_real(const std::string& text, const std::string& flag) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || !std::isfinite(v))
    throw UsageError(flag + ": '" + text + "' is not a finite number");
  return v;
}

}  // namespace mltool::util
