#include "launch_process.h"

#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>

namespace dstrain_cli {
namespace {

using Clock = std::chrono::steady_clock;

// How often the wait loop wakes up with nothing to do: a safety net only,
// every real event arrives as a signal.
constexpr std::chrono::milliseconds kIdleWake(1000);
// Ctrl-C this many times and the launcher stops being patient.
constexpr int kInterruptsBeforeKill = 3;

void Report(const std::string &message) {
  std::fflush(stdout);
  std::fprintf(stderr, "dstrain launch: %s\n", message.c_str());
  std::fflush(stderr);
}

std::string SignalName(int signal) {
  const char *abbrev = sigabbrev_np(signal);
  return abbrev == nullptr ? "signal " + std::to_string(signal) : std::string("SIG") + abbrev;
}

std::string RankLabel(const RankProcess &rank) {
  return "rank " + std::to_string(rank.rank) + " (pid " + std::to_string(rank.pid) + ")";
}

std::string Plural(size_t n, const char *word) {
  return std::to_string(n) + " " + word + (n == 1 ? "" : "s");
}

// NULL-terminated char* views of strings, for execvpe.
std::vector<char *> CStrings(const std::vector<std::string> &strings) {
  std::vector<char *> out;
  for (const std::string &s : strings) out.push_back(const_cast<char *>(s.c_str()));
  out.push_back(nullptr);
  return out;
}

// In the forked child: only async-signal-safe calls until exec.
[[noreturn]] void ExecRank(char *const argv[], char *const envp[], const sigset_t &original_mask,
                           pid_t launcher, int error_pipe) {
  // If the launcher is killed outright (kill -9, OOM), take the ranks with
  // it rather than leaving them to wait out a rendezvous timeout.
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != launcher) _exit(127);  // the launcher died before prctl
  sigprocmask(SIG_SETMASK, &original_mask, nullptr);
  execvpe(argv[0], argv, envp);
  const int error = errno;
  ssize_t ignored = write(error_pipe, &error, sizeof(error));
  (void)ignored;
  _exit(127);
}

// Reads the exec errno the child sends on failure; 0 when the pipe closes
// empty (exec succeeded and closed it).
int ReadExecError(int fd) {
  int error = 0;
  size_t got = 0;
  while (got < sizeof(error)) {
    const ssize_t n = read(fd, reinterpret_cast<char *>(&error) + got, sizeof(error) - got);
    if (n > 0) {
      got += static_cast<size_t>(n);
    } else if (n == 0 || errno != EINTR) {
      break;
    }
  }
  return got == sizeof(error) ? error : 0;
}

}  // namespace

ExitDescription DescribeWaitStatus(int wait_status) {
  if (WIFEXITED(wait_status)) {
    const int status = WEXITSTATUS(wait_status);
    return {status, "exit status " + std::to_string(status)};
  }
  if (WIFSIGNALED(wait_status)) {
    const int signal = WTERMSIG(wait_status);
    return {128 + signal,
            "killed by signal " + std::to_string(signal) + " (" + SignalName(signal) + ")"};
  }
  return {1, "ended with wait status " + std::to_string(wait_status)};
}

RankSupervisor::RankSupervisor(std::chrono::seconds kill_timeout)
    : kill_timeout_(kill_timeout), launcher_pid_(getpid()) {
  sigemptyset(&handled_);
  for (int signal : {SIGCHLD, SIGINT, SIGTERM, SIGHUP}) sigaddset(&handled_, signal);
  sigprocmask(SIG_BLOCK, &handled_, &original_);
}

RankSupervisor::~RankSupervisor() {
  sigprocmask(SIG_SETMASK, &original_, nullptr);
}

std::optional<SpawnFailure> RankSupervisor::Spawn(const RankSpec &spec) {
  const std::string program = spec.argv.empty() ? "" : spec.argv.front();
  std::vector<char *> argv = CStrings(spec.argv);
  std::vector<char *> envp = CStrings(spec.env);
  int error_pipe[2];
  if (pipe2(error_pipe, O_CLOEXEC) != 0) {
    return SpawnFailure{errno, std::string("cannot create a pipe: ") + std::strerror(errno)};
  }
  std::fflush(nullptr);  // or the child would inherit and repeat buffered output
  const pid_t pid = fork();
  if (pid == 0) ExecRank(argv.data(), envp.data(), original_, launcher_pid_, error_pipe[1]);
  const int fork_error = errno;
  close(error_pipe[1]);
  if (pid < 0) {
    close(error_pipe[0]);
    return SpawnFailure{fork_error, std::string("cannot fork: ") + std::strerror(fork_error)};
  }
  const int exec_error = ReadExecError(error_pipe[0]);
  close(error_pipe[0]);
  if (exec_error != 0) {
    waitpid(pid, nullptr, 0);
    return SpawnFailure{exec_error,
                        "cannot execute '" + program + "': " + std::strerror(exec_error)};
  }
  ranks_.push_back({spec.rank, pid, true});
  return std::nullopt;
}

int RankSupervisor::WaitAll() {
  while (RunningCount() > 0) WaitForEvent();
  DecideFirstFailure();  // failures still inside their window when the last rank exited
  if (failure_reported_) return exit_code_;
  if (first_signal_ != 0) return 128 + first_signal_;
  return 0;
}

void RankSupervisor::StopAll() {
  TerminateAll();
  while (RunningCount() > 0) WaitForEvent();
}

size_t RankSupervisor::RunningCount() const {
  return static_cast<size_t>(
      std::count_if(ranks_.begin(), ranks_.end(), [](const RankProcess &r) { return r.running; }));
}

namespace {
constexpr std::chrono::milliseconds kFailureWindow{1000};
}  // namespace

void RankSupervisor::WaitForEvent() {
  auto wait = std::chrono::duration_cast<std::chrono::nanoseconds>(kIdleWake);
  if (kill_deadline_) {
    wait = std::clamp<std::chrono::nanoseconds>(*kill_deadline_ - Clock::now(),
                                                std::chrono::nanoseconds(0), wait);
  }
  if (decide_at_) {
    wait = std::clamp<std::chrono::nanoseconds>(*decide_at_ - Clock::now(),
                                                std::chrono::nanoseconds(0), wait);
  }
  timespec timeout{static_cast<time_t>(wait.count() / 1000000000),
                   static_cast<long>(wait.count() % 1000000000)};
  siginfo_t info{};
  const int signal = sigtimedwait(&handled_, &info, &timeout);
  if (signal == SIGINT || signal == SIGTERM || signal == SIGHUP) OnSignal(info);
  // SIGCHLDs coalesce, so reap everything that has exited whatever woke us.
  ReapExited();
  if (decide_at_ && (Clock::now() >= *decide_at_ || RunningCount() == 0)) DecideFirstFailure();
  if (kill_deadline_ && Clock::now() >= *kill_deadline_) KillStragglers();
}

void RankSupervisor::OnSignal(const siginfo_t &info) {
  const int signal = info.si_signo;
  if (first_signal_ == 0) first_signal_ = signal;
  if (signal == SIGINT && ++interrupts_ >= kInterruptsBeforeKill) {
    Report("interrupted " + std::to_string(interrupts_) + " times: killing every rank (SIGKILL)");
    SignalRunning(SIGKILL);
    return;
  }
  // Ctrl-C in a terminal (si_code SI_KERNEL) already reached the ranks: they
  // share the launcher's process group. Sending it again would count as a
  // second Ctrl-C, which makes `dstrain train` quit without saving.
  const bool from_terminal = signal == SIGINT && info.si_code == SI_KERNEL;
  if (!from_terminal) SignalRunning(signal);
  std::string what = "received " + SignalName(signal);
  what += from_terminal ? " from the terminal, which sent it to the ranks too"
                        : "; forwarded it to " + Plural(RunningCount(), "running rank");
  if (signal == SIGINT) {
    what += " (interrupt " + std::to_string(kInterruptsBeforeKill - interrupts_) +
            " more time(s) to kill them)";
  }
  Report(what);
  // SIGTERM and SIGHUP mean "stop now": bound the wait. After SIGINT the
  // ranks may be finishing a step and saving a checkpoint, so wait for them.
  if (signal != SIGINT && !kill_deadline_) kill_deadline_ = Clock::now() + kill_timeout_;
}

void RankSupervisor::ReapExited() {
  for (;;) {
    int wait_status = 0;
    const pid_t pid = waitpid(-1, &wait_status, WNOHANG);
    if (pid <= 0) return;  // 0: the others still run; -1/ECHILD: none left
    OnExit(pid, wait_status);
  }
}

void RankSupervisor::OnExit(pid_t pid, int wait_status) {
  auto rank = std::find_if(ranks_.begin(), ranks_.end(),
                           [pid](const RankProcess &r) { return r.pid == pid; });
  if (rank == ranks_.end()) return;
  rank->running = false;
  const ExitDescription exit = DescribeWaitStatus(wait_status);
  // Ranks exiting because the launcher stopped them, or because of a signal
  // the user sent, are consequences, not the cause.
  if (exit.code == 0 || failure_reported_ || first_signal_ != 0) return;
  failures_.push_back({*rank, exit, WIFSIGNALED(wait_status) != 0});
  if (!decide_at_) decide_at_ = Clock::now() + kFailureWindow;
}

namespace {
// Whether `pid` is stopped (SIGSTOP, SIGTSTP, or a debugger's stop): the
// state letter of /proc/PID/stat is 'T' or 't'.
bool IsStopped(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text;
  std::getline(stat, text);
  const size_t paren = text.rfind(')');  // the command name may hold spaces
  if (paren == std::string::npos || paren + 2 >= text.size()) return false;
  const char state = text[paren + 2];
  return state == 'T' || state == 't';
}
}  // namespace

// The cause is a rank that is stopped while the others fail (they failed
// waiting for it), else the first rank killed by a signal (its peers' errors
// follow from it), else the first failure reaped.
void RankSupervisor::DecideFirstFailure() {
  decide_at_.reset();
  if (failures_.empty() || failure_reported_) return;
  for (const RankProcess &rank : ranks_) {
    if (!rank.running || !IsStopped(rank.pid)) continue;
    failure_reported_ = true;
    exit_code_ = failures_.front().exit.code;
    Report(RankLabel(rank) +
           " is stopped (SIGSTOP or a debugger) and is the cause: the others failed waiting "
           "for it");
    for (const Failure &f : failures_) Report(RankLabel(f.rank) + " failed: " + f.exit.text);
    // A stopped process cannot act on SIGTERM until continued: it is killed.
    Report("killing " + RankLabel(rank) + " (SIGKILL): it is stopped");
    kill(rank.pid, SIGKILL);
    TerminateAll();
    return;
  }
  auto cause = std::find_if(failures_.begin(), failures_.end(),
                            [](const Failure &f) { return f.by_signal; });
  if (cause == failures_.end()) cause = failures_.begin();
  failure_reported_ = true;
  exit_code_ = cause->exit.code;
  Report(RankLabel(cause->rank) + " failed first: " + cause->exit.text);
  for (const Failure &f : failures_)
    if (&f != &*cause) Report(RankLabel(f.rank) + " failed too: " + f.exit.text);
  TerminateAll();
}

void RankSupervisor::SignalRunning(int signal) {
  for (const RankProcess &rank : ranks_) {
    if (rank.running) kill(rank.pid, signal);
  }
}

void RankSupervisor::TerminateAll() {
  const size_t running = RunningCount();
  if (running == 0) return;
  Report("stopping the other " + Plural(running, "rank") + " (SIGTERM, SIGKILL after " +
         std::to_string(kill_timeout_.count()) + " s)");
  SignalRunning(SIGTERM);
  if (!kill_deadline_) kill_deadline_ = Clock::now() + kill_timeout_;
}

void RankSupervisor::KillStragglers() {
  for (const RankProcess &rank : ranks_) {
    if (!rank.running) continue;
    Report(RankLabel(rank) + " did not exit within " + std::to_string(kill_timeout_.count()) +
           " s; sending SIGKILL");
    kill(rank.pid, SIGKILL);
  }
  kill_deadline_.reset();
}

}  // namespace dstrain_cli
