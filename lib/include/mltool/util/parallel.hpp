// Simple data parallelism over independent items.
#pragma once

#include <cstddef>
#include <functional>

namespace mltool::util {

/// Calls fn(i) for every i in [0, n) on up to `threads` threads (the caller's included;
/// 0 = one per allowed CPU). Items are taken in turn, so uneven items balance. If calls throw, the
/// remaining items still run and the exception of the lowest such i is rethrown at the end.
void parallel_for(std::size_t n, int threads, const std::function<void(std::size_t)>& fn);

/// The CPUs this process may run on: its affinity mask (sched_getaffinity), which Slurm's
/// --cpus-per-task, cgroup cpusets and taskset set — not the machine's core count.
int allowed_cpus();

/// Threads to use for a request: `requested` if > 0, otherwise allowed_cpus().
int thread_count(int requested);

}  // namespace mltool::util
