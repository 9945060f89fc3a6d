#include "mltool/util/shard.hpp"

#include <sstream>

#include "mltool/util/error.hpp"

namespace mltool::util {

std::string Shard::text() const { return std::to_string(index) + "/" + std::to_string(count); }

Shard parse_shard(const std::string& text) {
  if (text.empty()) return {};
  Shard shard;
  char slash = 0;
  std::istringstream in(text);
  if (text.find_first_not_of("0123456789/") != std::string::npos ||
      !(in >> shard.index >> slash >> shard.count) || slash != '/' || !in.eof() ||
      shard.count == 0 || shard.index >= shard.count)
    throw UsageError("--shard must be I/N with 0 <= I < N (e.g. 0/4), not '" + text + "'");
  return shard;
}

}  // namespace mltool::util
