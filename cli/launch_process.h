// The process side of `dstrain launch`: start the ranks of this node (fork +
// execvpe), forward signals to them, notice the first one that fails, stop
// the others (SIGTERM, then SIGKILL after the kill timeout) and turn the
// outcome into the launcher's exit code.
//
// Signals are handled synchronously: SIGCHLD, SIGINT, SIGTERM and SIGHUP are
// blocked in the launcher and collected with sigtimedwait(), so there is no
// handler, no race between "a child exited" and "wait for the next event",
// and children get the original signal mask back before exec.
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace dstrain_cli {

// One rank to start: its command line and its complete environment
// ("KEY=value" entries).
struct RankSpec {
  int64_t rank = 0;
  std::vector<std::string> argv;
  std::vector<std::string> env;
};

// A started rank.
struct RankProcess {
  int64_t rank = 0;
  pid_t pid = -1;
  bool running = true;
};

// How a process ended: as the launcher's exit code (128 + N for signal N,
// as shells do) and in words ("exit status 3", "killed by signal 9 (SIGKILL)").
struct ExitDescription {
  int code = 0;
  std::string text;
};
ExitDescription DescribeWaitStatus(int wait_status);

// Why a rank could not be started.
struct SpawnFailure {
  int error = 0;        // errno of the failed exec (or fork)
  std::string message;  // "cannot execute 'prog': No such file or directory"
};

class RankSupervisor {
 public:
  // Blocks the handled signals until destruction.
  explicit RankSupervisor(std::chrono::seconds kill_timeout);
  ~RankSupervisor();
  RankSupervisor(const RankSupervisor &) = delete;
  RankSupervisor &operator=(const RankSupervisor &) = delete;

  // Starts one rank; returns once it has exec'd its program, or why it could
  // not (the exec error comes back from the child through a close-on-exec
  // pipe, so a missing program is reported by name).
  std::optional<SpawnFailure> Spawn(const RankSpec &spec);
  // Waits until every started rank has exited, handling failures and
  // signals on the way. Returns the launcher's exit code: the first failed
  // rank's, else 128 + the first signal the launcher received, else 0.
  int WaitAll();
  // SIGTERM to every running rank, then waits (SIGKILL after the timeout).
  void StopAll();

 private:
  void WaitForEvent();
  void OnSignal(const siginfo_t &info);
  void ReapExited();
  void OnExit(pid_t pid, int wait_status);
  void SignalRunning(int signal);
  void TerminateAll();
  void KillStragglers();
  size_t RunningCount() const;

  std::chrono::seconds kill_timeout_;
  sigset_t handled_;   // blocked while the launcher runs
  sigset_t original_;  // restored in children and on destruction
  pid_t launcher_pid_;
  std::vector<RankProcess> ranks_;
  std::optional<std::chrono::steady_clock::time_point> kill_deadline_;
  // Failures seen in the short window after the first one: when a rank is
  // killed, its peers fail a moment later (their collective broke) and may be
  // reaped first; the window lets the launcher name the rank that died, not
  // the first one it happened to reap.
  struct Failure {
    RankProcess rank;
    ExitDescription exit;
    bool by_signal;
  };
  std::vector<Failure> failures_;
  std::optional<std::chrono::steady_clock::time_point> decide_at_;
  void DecideFirstFailure();
  bool failure_reported_ = false;
  int exit_code_ = 0;
  int first_signal_ = 0;  // first SIGINT/SIGTERM/SIGHUP the launcher received
  int interrupts_ = 0;    // SIGINTs received
};

}  // namespace dstrain_cli
