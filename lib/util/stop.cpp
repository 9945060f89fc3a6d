#include "mltool/util/stop.hpp"

#include <pthread.h>
#include <signal.h>

#include <csignal>
#include <cstring>

#include "mltool/util/error.hpp"

namespace mltool::util {
namespace {

volatile std::sig_atomic_t g_stop = 0;

extern "C" void on_sigterm(int) { g_stop = 1; }

}  // namespace

void stop_on_sigterm() {
  struct sigaction action;
  std::memset(&action, 0, sizeof action);
  action.sa_handler = on_sigterm;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;  // reads and writes in flight go on; the loops look at the flag
  sigaction(SIGTERM, &action, nullptr);
  // A rank that train --nproc started has SIGTERM blocked until here (spawn.cpp), so one that
  // arrived while it was loading is not lost: it is delivered to the handler now.
  sigset_t term;
  sigemptyset(&term);
  sigaddset(&term, SIGTERM);
  pthread_sigmask(SIG_UNBLOCK, &term, nullptr);
}

bool stop_requested() { return g_stop != 0; }

void request_stop() { g_stop = 1; }

void stop_if_requested(const std::string& what) {
  if (stop_requested())
    throw StoppedError("stopped by SIGTERM after " + what +
                       "; run the same command again to resume (exit 75)");
}

}  // namespace mltool::util
