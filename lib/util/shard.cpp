#include "mltool/util/shard.hpp"

#include <cstdlib>
#include <optional>
#include <sstream>

#include "mltool/util/error.hpp"

namespace mltool::util {
namespace {

constexpr const char* kNeither =
    "--shard auto: neither SLURM_ARRAY_TASK_ID (a Slurm job array, sbatch --array) nor "
    "JOB_COMPLETION_INDEX (a Kubernetes indexed Job) is set; give --shard I/N";

// The non-negative integer in variable `name`, or nothing when it is unset or empty.
std::optional<std::size_t> env_index(const Environment& env, const char* name) {
  const char* v = env(name);
  if (!v || !*v) return std::nullopt;
  const std::string text(v);
  if (text.find_first_not_of("0123456789") != std::string::npos || text.size() > 9)
    throw UsageError(std::string("--shard auto: environment variable ") + name + "='" + text +
                     "' is not a task index");
  return static_cast<std::size_t>(std::stoul(text));
}

Shard checked(Shard s, const std::string& where) {
  if (s.count == 0 || s.index >= s.count)
    throw UsageError("--shard auto: " + where + " gives index " + std::to_string(s.index) + " of " +
                     std::to_string(s.count) +
                     " shards; number the array tasks 0..N-1, or give --shards N");
  return s;
}

}  // namespace

std::string Shard::text() const { return std::to_string(index) + "/" + std::to_string(count); }

Shard parse_shard(const std::string& text) {
  if (text.empty()) return {};
  Shard shard;
  char slash = 0;
  std::istringstream in(text);
  if (text.find_first_not_of("0123456789/") != std::string::npos ||
      !(in >> shard.index >> slash >> shard.count) || slash != '/' || !in.eof() ||
      shard.count == 0 || shard.index >= shard.count)
    throw UsageError("--shard must be I/N with 0 <= I < N (e.g. 0/4) or auto, not '" + text + "'");
  return shard;
}

const char* process_environment(const char* name) { return std::getenv(name); }

bool shard_syntax_ok(const std::string& text) {
  if (text == "auto") return true;
  try {
    parse_shard(text);
    return true;
  } catch (const UsageError&) {
    return false;
  }
}

Shard resolve_shard(const std::string& text, std::size_t shards, const Environment& env) {
  if (text != "auto") {
    const Shard s = parse_shard(text);
    if (shards != 0 && s.count != shards)
      throw UsageError("--shard " + text + " and --shards " + std::to_string(shards) +
                       " disagree on the number of shards");
    return s;
  }
  if (const auto id = env_index(env, "SLURM_ARRAY_TASK_ID")) {
    if (shards != 0) return checked({*id, shards}, "SLURM_ARRAY_TASK_ID with --shards");
    const auto min = env_index(env, "SLURM_ARRAY_TASK_MIN");
    const auto max = env_index(env, "SLURM_ARRAY_TASK_MAX");
    const std::size_t step = env_index(env, "SLURM_ARRAY_TASK_STEP").value_or(1);
    if (!min || !max || step == 0 || *max < *min || *id < *min || (*id - *min) % step != 0)
      throw UsageError(
          "--shard auto: SLURM_ARRAY_TASK_ID is set but SLURM_ARRAY_TASK_MIN/MAX/STEP do not "
          "describe an array holding it; give --shards N");
    return checked({(*id - *min) / step, (*max - *min) / step + 1},
                   "SLURM_ARRAY_TASK_ID/MIN/MAX/STEP");
  }
  if (const auto index = env_index(env, "JOB_COMPLETION_INDEX")) {
    if (shards == 0)
      throw UsageError(
          "--shard auto: JOB_COMPLETION_INDEX (a Kubernetes indexed Job) gives the "
          "index only; give the Job's completions as --shards N");
    return checked({*index, shards}, "JOB_COMPLETION_INDEX with --shards");
  }
  throw UsageError(kNeither);
}

std::size_t array_index(const std::string& what, const Environment& env) {
  if (const auto id = env_index(env, "SLURM_ARRAY_TASK_ID")) return *id;
  if (const auto index = env_index(env, "JOB_COMPLETION_INDEX")) return *index;
  throw UsageError(what +
                   " auto: neither SLURM_ARRAY_TASK_ID (a Slurm job array, sbatch --array) nor "
                   "JOB_COMPLETION_INDEX (a Kubernetes indexed Job) is set; give a number");
}

namespace {

int env_int(const Environment& env, const char* name, int fallback) {
  const char* v = env(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  const long n = std::strtol(v, &end, 10);
  if (*end != '\0' || n < 0 || n > 1 << 30)
    throw UsageError(std::string("environment variable ") + name + "='" + v +
                     "' is not a non-negative integer");
  return static_cast<int>(n);
}

}  // namespace

std::optional<Rendezvous> launcher_rendezvous(const Environment& env) {
  if (!env("RANK") || !env("WORLD_SIZE")) return std::nullopt;
  Rendezvous r;
  r.rank = env_int(env, "RANK", 0);
  r.world_size = env_int(env, "WORLD_SIZE", 1);
  r.local_rank = env_int(env, "LOCAL_RANK", 0);
  if (const char* a = env("MASTER_ADDR"); a && *a) r.master_addr = a;
  r.master_port = env_int(env, "MASTER_PORT", 0);
  if (r.master_port == 0) throw UsageError("RANK and WORLD_SIZE are set, but MASTER_PORT is not");
  return r;
}

}  // namespace mltool::util
