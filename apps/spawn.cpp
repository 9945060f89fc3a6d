#include "spawn.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "mltool/util/error.hpp"
#include "mltool/util/log.hpp"
#include "mltool/util/stop.hpp"

namespace mltool::cli {
namespace {

std::vector<std::string> own_arguments() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  const std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::string> args;
  std::string cur;
  for (const char c : all) {
    if (c == '\0') {
      args.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  if (args.empty()) throw ResourceError("--nproc: cannot read /proc/self/cmdline");
  std::vector<std::string> kept;
  for (std::size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--nproc") {
      ++i;
      continue;
    }
    if (args[i].rfind("--nproc=", 0) == 0) continue;
    kept.push_back(args[i]);
  }
  return kept;
}

int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw ResourceError(std::string("--nproc: socket: ") + std::strerror(errno));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof addr;
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0;
  const int err = errno;
  ::close(fd);
  if (!ok) throw ResourceError(std::string("--nproc: no free port: ") + std::strerror(err));
  return ntohs(addr.sin_port);
}

std::string describe(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return "was killed by signal " + std::to_string(WTERMSIG(status));
  return "ended (status " + std::to_string(status) + ")";
}

// In the child: the rank's torchrun-style environment, then this program again.
[[noreturn]] void exec_rank(int rank, int nproc, const std::string& port,
                            const std::vector<std::string>& args) {
  const std::string r = std::to_string(rank), w = std::to_string(nproc);
  ::setenv("RANK", r.c_str(), 1);
  ::setenv("LOCAL_RANK", r.c_str(), 1);
  ::setenv("WORLD_SIZE", w.c_str(), 1);
  ::setenv("LOCAL_WORLD_SIZE", w.c_str(), 1);
  ::setenv("MASTER_ADDR", "127.0.0.1", 1);
  ::setenv("MASTER_PORT", port.c_str(), 1);
  // SIGTERM blocked across exec until the rank's main() installs its handler
  // (util::stop_on_sigterm unblocks it), so a SIGTERM forwarded while it loads waits.
  sigset_t term;
  sigemptyset(&term);
  sigaddset(&term, SIGTERM);
  sigprocmask(SIG_BLOCK, &term, nullptr);
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  ::execv("/proc/self/exe", argv.data());
  std::fprintf(stderr, "mltool: --nproc: cannot run /proc/self/exe: %s\n", std::strerror(errno));
  ::_exit(exit_code::runtime);
}

// The local ranks as they run and end: the first failure stops the others (SIGKILL 5 s
// later if they linger), a SIGTERM to this process goes to every rank.
class Ranks {
 public:
  explicit Ranks(std::vector<pid_t> pids) : pids_(std::move(pids)) { running_ = pids_.size(); }

  // Waits for every rank; returns the first failed rank's exit code, else stopped when a
  // rank stopped on SIGTERM, else ok.
  int wait() {
    auto deadline = std::chrono::steady_clock::time_point::max();
    bool forwarded = false;
    while (running_ > 0) {
      if (util::stop_requested() && !forwarded) {  // a SIGTERM to this process: to every rank
        forwarded = true;
        signal_all(SIGTERM);
      }
      int status = 0;
      // Polled, so a SIGTERM (whose handler restarts a blocking wait) is forwarded at once.
      const pid_t pid = ::waitpid(-1, &status, WNOHANG);
      if (pid < 0) {
        if (errno == EINTR) continue;
        break;
      }
      if (pid > 0) {
        reap(pid, status);
        if (code_ != exit_code::ok && deadline == std::chrono::steady_clock::time_point::max())
          deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
        continue;
      }
      if (std::chrono::steady_clock::now() > deadline) signal_all(SIGKILL);
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return code_ == exit_code::ok && stopped_ ? exit_code::stopped : code_;
  }

 private:
  int rank_of(pid_t pid) const {
    for (std::size_t i = 0; i < pids_.size(); ++i)
      if (pids_[i] == pid) return static_cast<int>(i);
    return -1;
  }

  void signal_all(int sig) const {
    for (const pid_t p : pids_)
      if (p > 0) ::kill(p, sig);
  }

  void reap(pid_t pid, int status) {
    const int rank = rank_of(pid);
    if (rank < 0) return;
    pids_[static_cast<std::size_t>(rank)] = -1;
    --running_;
    if (WIFEXITED(status) && WEXITSTATUS(status) == exit_code::stopped) {
      stopped_ = true;  // SIGTERM: the ranks stop together, rank 0 saving the checkpoint
      return;
    }
    const bool failed = !WIFEXITED(status) || WEXITSTATUS(status) != 0;
    if (!failed || code_ != exit_code::ok) return;
    code_ = WIFEXITED(status) ? WEXITSTATUS(status) : exit_code::runtime;
    log::error("--nproc: rank " + std::to_string(rank) + " (pid " + std::to_string(pid) + ") " +
               describe(status) + "; stopping the other " + std::to_string(running_) + " rank(s)");
    signal_all(SIGTERM);
  }

  std::vector<pid_t> pids_;  // by rank; -1 once reaped
  std::size_t running_ = 0;  // ranks not reaped yet
  int code_ = exit_code::ok;
  bool stopped_ = false;
};

}  // namespace

int spawn_local_ranks(int nproc) {
  const auto args = own_arguments();
  const std::string port = std::to_string(free_port());
  std::vector<pid_t> pids;
  for (int rank = 0; rank < nproc; ++rank) {
    const pid_t pid = ::fork();
    if (pid < 0) {
      for (const pid_t p : pids) ::kill(p, SIGKILL);
      throw ResourceError(std::string("--nproc: fork: ") + std::strerror(errno));
    }
    if (pid == 0) exec_rank(rank, nproc, port, args);
    pids.push_back(pid);
  }
  return Ranks(std::move(pids)).wait();
}

}  // namespace mltool::cli
