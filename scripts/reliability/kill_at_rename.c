/* Kill points at renames: an LD_PRELOAD shim for the crash-consistency probes.
 *   cc -shared -fPIC -O2 -o kill_at_rename.so kill_at_rename.c -ldl
 *   KILL_AT_RENAME=N [KILL_RENAME_MATCH=substring] LD_PRELOAD=./kill_at_rename.so mltool ...
 * SIGKILLs the process just before its N-th rename() (counting only renames whose target
 * contains KILL_RENAME_MATCH, if set): the moment every write-aside-then-rename publication is
 * most exposed — the temporary file is whole and the final name not yet there.
 * KILL_RENAME_LOG=1 prints each counted rename to stderr (to enumerate the kill points).
 * KILL_SIGNAL=STOP sends SIGSTOP instead: the process stops there (holding whatever it holds)
 * until a SIGCONT lets the rename go on — the tests' way to pause a writer mid-run. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static atomic_int counted;

static void maybe_kill(const char* from, const char* to) {
  const char* match = getenv("KILL_RENAME_MATCH");
  if (match && !strstr(to, match)) return;
  const int n = atomic_fetch_add(&counted, 1) + 1;
  if (getenv("KILL_RENAME_LOG")) fprintf(stderr, "rename %d: %s -> %s\n", n, from, to);
  const char* at = getenv("KILL_AT_RENAME");
  if (at && atoi(at) == n) {
    const char* sig = getenv("KILL_SIGNAL");
    kill(getpid(), sig && strcmp(sig, "STOP") == 0 ? SIGSTOP : SIGKILL);
  }
}

int rename(const char* from, const char* to) {
  static int (*real)(const char*, const char*);
  if (!real) real = (int (*)(const char*, const char*))dlsym(RTLD_NEXT, "rename");
  maybe_kill(from, to);
  return real(from, to);
}

int renameat(int fromfd, const char* from, int tofd, const char* to) {
  static int (*real)(int, const char*, int, const char*);
  if (!real) real = (int (*)(int, const char*, int, const char*))dlsym(RTLD_NEXT, "renameat");
  maybe_kill(from, to);
  return real(fromfd, from, tofd, to);
}
