#include "mltool/util/input_check.hpp"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>

#include "mltool/util/error.hpp"

namespace mltool::util {

void require_input(const std::string& path, const std::string& given_as) {
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) return;
  const std::string why = errno == ENOENT ? "no such file or directory" : std::strerror(errno);
  throw InputError(at_file(path, why + " (" + given_as + ")"));
}

}  // namespace mltool::util
