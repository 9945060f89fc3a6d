// mltool train --nproc N: this program again, N times, as the ranks of a data parallel group
// on this machine (docs/train.md#data-parallel).
#pragma once

namespace mltool::cli {

/// Runs /proc/self/exe with this process's arguments minus `--nproc N` in `nproc` child
/// processes, with RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR=127.0.0.1 and
/// MASTER_PORT (a free port) in their environment. Waits for all; when one fails, stops the
/// others (SIGTERM, SIGKILL after 5 s) and logs which rank failed. Returns 0 or the failed
/// rank's exit code (exit_code::runtime if a signal ended it).
int spawn_local_ranks(int nproc);

}  // namespace mltool::cli
