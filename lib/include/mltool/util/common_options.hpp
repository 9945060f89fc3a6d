// The options several commands share, each declared once with one help text and one meaning
// (as --math-threads in math_env.hpp, --shards in shard.hpp, --profile in profile.hpp): a
// command's table names the member it binds, never the option's text.
#pragma once

#include <string>

#include "mltool/util/options.hpp"

namespace mltool::util {

/// --overwrite: start over. What the output holds (a finished or a partial result, of these
/// settings or others) is replaced; without it a partial result of the same settings is
/// resumed and anything else is refused, naming this option.
template <class Job>
Option<Job> overwrite_option(bool Job::*member) {
  return flag("--overwrite", member,
              "Start over: replace what the output holds (finished or partial, of any "
              "settings) instead of resuming it or refusing it");
}

/// --keep-going: an input that cannot be read (a slide, a tile, a file) is named in the log
/// and the output's manifest, and the command goes on; it exits 4 if any failed.
template <class Job>
Option<Job> keep_going_option(bool Job::*member) {
  return flag("--keep-going", member,
              "Continue past inputs that cannot be read (a slide, a tile, a file), each named "
              "in the log and the output's manifest; exit 4 if any failed");
}

/// --no-oom-retry: an out-of-memory error ends the run (docs/memory-modes.md).
template <class Job>
Option<Job> no_oom_retry_option(bool Job::*member) {
  return flag("--no-oom-retry", member,
              "An out-of-memory error ends the run instead of splitting the batch and retrying");
}

/// --device: where the model runs (resolved by util::resolve_devices, device.hpp). `auto`
/// and `cuda` mean every visible GPU to a command that spreads batches over GPUs (extract)
/// and one GPU to a command that runs one model copy (train: its rank's, predict and extract's
/// slide encoders: the first). docs/cli.md#options-several-commands-share says the same.
template <class Job>
Option<Job> device_option(std::string Job::*member) {
  return option("--device", member,
                "auto (the GPUs, else the CPU), cpu, cuda (the GPUs) or cuda:N. The GPUs: "
                "every visible one for extract (a slide encoder: the first); one for train "
                "(its rank's under --nproc, else the first), predict and a segmenter "
                "(--tissue MODEL.pt: the first)");
}

/// --group-table and --group-column: slides joined into groups (patients) by a table.
template <class Job>
Option<Job> group_table_option(std::string Job::*member) {
  return option("--group-table", member,
                "A CSV/TSV/JSONL table with columns slide and --group-column: each group "
                "(e.g. a patient) is one unit of all its slides' tiles (one bag, one "
                "embedding), as pack --bag-by makes them");
}
template <class Job>
Option<Job> group_column_option(std::string Job::*member) {
  return option("--group-column", member,
                "With --group-table: the column that names each slide's group");
}

}  // namespace mltool::util
