// Stopping on request. Slurm (scancel, preemption, the time limit with --signal) and
// Kubernetes send SIGTERM, then SIGKILL a grace period later. With the handler installed a
// SIGTERM only raises a flag; the long loops (tile's slides, extract's batches, predict's
// slides, train's steps) look at it between pieces, commit the piece in hand and throw
// StoppedError, which the command line turns into exit 75 — so a requeued task resumes with
// nothing committed lost. Without the handler (library use) the flag never rises.
#pragma once

#include <string>

namespace mltool::util {

/// Installs the SIGTERM handler (once; the command line does, before running a command).
void stop_on_sigterm();

/// Whether a SIGTERM has arrived.
bool stop_requested();

/// Throws StoppedError "stopped by SIGTERM after WHAT; run the same command again to resume"
/// when a SIGTERM has arrived.
void stop_if_requested(const std::string& what);

/// Raises the flag as a SIGTERM would (tests; and a rank told by another that it stops).
void request_stop();

}  // namespace mltool::util
