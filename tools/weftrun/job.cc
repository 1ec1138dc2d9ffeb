// The ranks' life cycle: spawn with torchrun's environment (rendezvous_env.cc), forward signals
// (output: rank_output.cc), reap, and tear the job down (SIGTERM, grace period, SIGKILL) on
// failure, signal or timeout.
//
// Linux only: it relies on signalfd, process groups, PR_SET_CHILD_SUBREAPER and
// PR_SET_PDEATHSIG.
#include "job.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

extern char** environ;

namespace weftrun {
namespace {

constexpr int kExitLaunchError = 1;
constexpr int kExitExecFailed = 127;   // not found, as the shell says
constexpr int kExitNotExecutable = 126;  // found, but no permission or no executable format
// After SIGKILL: how long to wait for what is left (stray group members, or a rank stuck in the
// kernel, which a GPU driver's teardown can keep for seconds) before giving up on it.
constexpr int64_t kGiveUpAfterKillMs = 10000;

int64_t seconds_to_ms(double seconds) { return static_cast<int64_t>(std::ceil(seconds * 1000)); }

std::string signal_name(int sig) {
  static const std::pair<int, const char*> kNames[] = {
      {SIGHUP, "SIGHUP"},   {SIGINT, "SIGINT"},   {SIGQUIT, "SIGQUIT"}, {SIGILL, "SIGILL"},
      {SIGTRAP, "SIGTRAP"}, {SIGABRT, "SIGABRT"}, {SIGBUS, "SIGBUS"},   {SIGFPE, "SIGFPE"},
      {SIGKILL, "SIGKILL"}, {SIGUSR1, "SIGUSR1"}, {SIGSEGV, "SIGSEGV"}, {SIGUSR2, "SIGUSR2"},
      {SIGPIPE, "SIGPIPE"}, {SIGALRM, "SIGALRM"}, {SIGTERM, "SIGTERM"}, {SIGXCPU, "SIGXCPU"},
      {SIGXFSZ, "SIGXFSZ"}, {SIGSYS, "SIGSYS"},   {SIGTSTP, "SIGTSTP"}, {SIGCONT, "SIGCONT"}};
  for (const auto& [number, name] : kNames) {
    if (number == sig) return name;
  }
  return std::to_string(sig);
}

// Descriptors 0-2 must be open, or a pipe created later could land on one of them.
void ensure_standard_fds() {
  int fd;
  while ((fd = open("/dev/null", O_RDWR)) >= 0 && fd <= 2) {
  }
  if (fd > 2) close(fd);
}

}  // namespace

bool Job::setup(std::string& error) {
  launcher_pid_ = getpid();
  ensure_standard_fds();

  if (!choose_rendezvous(error)) return false;

  if (options_.bind_cores) {
    auto cores = core_sets(options_.nproc, error);
    if (!cores) return false;
    rank_cpus_ = std::move(*cores);
  }

  // Two pipe ends per rank can pass the usual soft limit of 1024 descriptors.
  getrlimit(RLIMIT_NOFILE, &original_nofile_);
  rlimit raised = original_nofile_;
  raised.rlim_cur = raised.rlim_max;
  setrlimit(RLIMIT_NOFILE, &raised);

  // Orphaned grandchildren are re-parented to us, so we can reap them and see them go.
  prctl(PR_SET_CHILD_SUBREAPER, 1);
  struct sigaction inherited_pipe {};
  pipe_ignored_ = sigaction(SIGPIPE, nullptr, &inherited_pipe) == 0 && inherited_pipe.sa_handler == SIG_IGN;
  signal(SIGPIPE, SIG_IGN);  // a closed stdout must not kill the launcher
  signal(SIGCHLD, SIG_DFL);  // an inherited SIG_IGN would auto-reap the ranks
  sigset_t handled;
  sigemptyset(&handled);
  sigaddset(&handled, SIGCHLD);
  // A signal the launcher was started ignoring (nohup's SIGHUP, a background job's SIGINT)
  // stays ignored, as it is by the ranks, which inherit that: taken here, it would end the job.
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGTSTP, SIGCONT}) {
    struct sigaction inherited {};
    if (sigaction(sig, nullptr, &inherited) == 0 && inherited.sa_handler == SIG_IGN) continue;
    sigaddset(&handled, sig);
  }
  sigprocmask(SIG_BLOCK, &handled, &original_mask_);
  signal_fd_ = signalfd(-1, &handled, SFD_NONBLOCK | SFD_CLOEXEC);
  if (signal_fd_ < 0) {
    error = std::string("signalfd: ") + std::strerror(errno);
    return false;
  }
  if (options_.timeout_seconds > 0) {
    job_deadline_ms_ = now_ms() + seconds_to_ms(options_.timeout_seconds);
  }
  return true;
}

bool Job::spawn(Rank& rank, const std::vector<std::string>& base_env) {
  int out_pipe[2] = {-1, -1};
  int err_pipe[2] = {-1, -1};
  if (options_.tag_output &&
      (pipe2(out_pipe, O_CLOEXEC) != 0 || pipe2(err_pipe, O_CLOEXEC) != 0)) {
    int pipe_errno = errno;
    const char* hint = pipe_errno == EMFILE ? " (2 descriptors per rank; see ulimit -n)" : "";
    say("weftrun: cannot create pipes for rank %ld: %s%s\n", rank.global, std::strerror(pipe_errno), hint);
    for (int fd : {out_pipe[0], out_pipe[1]}) {
      if (fd >= 0) close(fd);
    }
    return false;
  }
  std::vector<std::string> env = base_env;
  const std::string global = std::to_string(rank.global);
  env.push_back("RANK=" + global);
  env.push_back("ROLE_RANK=" + global);
  env.push_back("LOCAL_RANK=" + std::to_string(rank.index));
  std::vector<char*> envp;
  for (std::string& entry : env) envp.push_back(entry.data());
  envp.push_back(nullptr);

  pid_t pid = fork();
  if (pid == 0) exec_rank(rank, envp.data(), out_pipe[1], err_pipe[1]);
  int fork_errno = errno;
  if (options_.tag_output) {
    close(out_pipe[1]);
    close(err_pipe[1]);
    rank.out = {out_pipe[0], &out_sink_, {}};
    rank.err = {err_pipe[0], &err_sink_, {}};
    if (pid < 0) {
      close_stream(rank, rank.out);
      close_stream(rank, rank.err);
    } else {
      fcntl(out_pipe[0], F_SETFL, O_NONBLOCK);
      fcntl(err_pipe[0], F_SETFL, O_NONBLOCK);
    }
  }
  if (pid < 0) {
    say("weftrun: cannot fork rank %ld: %s\n", rank.global, std::strerror(fork_errno));
    return false;
  }
  setpgid(pid, pid);  // also done in the child; whichever runs first wins the race
  rank.pid = pid;
  rank.group_alive = true;
  rank_by_pid_[pid] = rank.index;
  return true;
}

// Runs in the forked child: only simple system calls until exec.
void Job::exec_rank(const Rank& rank, char** envp, int out_fd, int err_fd) {
  setpgid(0, 0);
  prctl(PR_SET_PDEATHSIG, SIGKILL);  // if the launcher is SIGKILLed, take the rank with it
  if (getppid() != launcher_pid_) _exit(kExitLaunchError);
  if (!pipe_ignored_) signal(SIGPIPE, SIG_DFL);
  sigprocmask(SIG_SETMASK, &original_mask_, nullptr);
  setrlimit(RLIMIT_NOFILE, &original_nofile_);
  if (!rank_cpus_.empty() &&
      sched_setaffinity(0, sizeof(cpu_set_t), &rank_cpus_[static_cast<size_t>(rank.index)]) != 0) {
    dprintf(STDERR_FILENO, "weftrun: rank %ld: cannot bind to its core: %s\n", rank.global, std::strerror(errno));
    _exit(kExitLaunchError);
  }
  if (out_fd >= 0) {
    dup2(out_fd, STDOUT_FILENO);
    dup2(err_fd, STDERR_FILENO);
  }
  // Each rank runs in a process group of its own, in the background: reading the terminal
  // would stop it with SIGTTIN and hang the job. A rank that reads stdin gets end-of-file.
  if (int null = open("/dev/null", O_RDONLY); null >= 0) {
    dup2(null, STDIN_FILENO);
    if (null != STDIN_FILENO) close(null);
  }
  environ = envp;
  execvp(argv_[0], argv_.data());
  int exec_errno = errno;
  dprintf(STDERR_FILENO, "weftrun: rank %ld: cannot execute '%s': %s\n", rank.global, argv_[0],
          std::strerror(exec_errno));
  _exit(exec_errno == ENOENT || exec_errno == ENOTDIR ? kExitExecFailed : kExitNotExecutable);
}

int Job::run() {
  std::string error;
  if (!setup(error)) {
    say("weftrun: %s\n", error.c_str());
    drain_output();
    return kExitLaunchError;
  }
  ranks_.resize(static_cast<size_t>(options_.nproc));
  std::vector<std::string> base_env = base_environment();
  for (std::string& word : options_.command) argv_.push_back(word.data());
  argv_.push_back(nullptr);
  for (int i = 0; i < options_.nproc; ++i) {
    Rank& rank = ranks_[static_cast<size_t>(i)];
    rank.index = i;
    rank.global = static_cast<long>(options_.node_rank) * options_.nproc + i;
    if (!spawn(rank, base_env)) {
      for (Rank& later : ranks_) later.exited = later.exited || later.pid < 0;
      exit_status_ = kExitLaunchError;
      stop(SIGTERM);
      break;
    }
  }

  while (true) {
    if (all_ranks_exited()) {
      if (!any_group_alive()) break;
      if (phase_ == Phase::Running) stop(SIGTERM);  // clean up leftover background processes
    }
    if (phase_ == Phase::Killing && now_ms() >= give_up_at_ms_) {  // SIGKILL did not end them all
      for (const Rank& rank : ranks_) {
        if (rank.exited) continue;
        say("weftrun: warning: rank %ld (pid %d) did not exit\n", rank.global, rank.pid);
      }
      say("weftrun: warning: some processes of the job did not exit\n");
      break;
    }
    std::vector<pollfd> fds{{signal_fd_, POLLIN, 0}};
    add_sink_fds(fds);
    const size_t first_stream = fds.size();
    std::vector<std::pair<Rank*, OutputStream*>> streams;
    for (Rank& rank : ranks_) {
      for (OutputStream* stream : {&rank.out, &rank.err}) {
        if (stream->fd < 0 || stream->sink->full()) continue;  // a full sink waits for its reader
        fds.push_back({stream->fd, POLLIN, 0});
        streams.emplace_back(&rank, stream);
      }
    }
    int ready = poll(fds.data(), fds.size(), poll_timeout_ms());
    if (ready < 0 && errno != EINTR) {
      say("weftrun: poll: %s; killing all ranks\n", std::strerror(errno));
      kill_and_reap_ranks();
      if (!exit_status_) exit_status_ = kExitLaunchError;
      break;
    }
    if (ready > 0) write_output(fds);
    for (size_t i = first_stream; ready > 0 && i < fds.size(); ++i) {
      const auto& [rank, stream] = streams[i - first_stream];
      if (fds[i].revents != 0) read_stream(*rank, *stream, 1);
    }
    if (ready > 0 && fds[0].revents != 0) handle_signals();
    check_deadlines();
  }

  for (Rank& rank : ranks_) {
    for (OutputStream* stream : {&rank.out, &rank.err}) {
      read_stream(rank, *stream, 256);
      close_stream(rank, *stream);
    }
  }
  drain_output();
  return exit_status_.value_or(0);
}

void Job::handle_signals() {
  signalfd_siginfo info;
  bool child_exited = false;
  while (read(signal_fd_, &info, sizeof info) == static_cast<ssize_t>(sizeof info)) {
    int sig = static_cast<int>(info.ssi_signo);
    if (sig == SIGCHLD) {
      child_exited = true;
      continue;
    }
    if (sig == SIGUSR1 || sig == SIGUSR2) {  // for the ranks themselves (not their data loaders); the job goes on
      for (const Rank& rank : ranks_) {
        if (rank.pid > 0 && !rank.exited) kill(rank.pid, sig);
      }
      continue;
    }
    if (sig == SIGCONT) {  // resumes what Ctrl-Z stopped
      signal_groups(sig);
      continue;
    }
    if (sig == SIGTSTP) {  // Ctrl-Z: the ranks stop, then the launcher (SIGCONT resumes them)
      signal_groups(SIGSTOP);
      kill(getpid(), SIGSTOP);
      continue;
    }
    say("weftrun: received %s; forwarding it to all ranks\n", signal_name(sig).c_str());
    if (!exit_status_) {
      exit_status_ = 128 + sig;
      forwarded_signal_ = sig;
    }
    stop(sig);
  }
  if (child_exited) reap_children();
}

void Job::reap_children() {
  int status = 0;
  pid_t pid;
  bool orphan_reaped = false;
  while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
    auto found = rank_by_pid_.find(pid);
    if (found != rank_by_pid_.end()) {
      on_rank_exit(ranks_[static_cast<size_t>(found->second)], status);
    } else {
      orphan_reaped = true;  // a rank's background process: maybe the last of its group
    }
  }
  if (orphan_reaped) {
    for (Rank& rank : ranks_) {
      if (rank.exited && rank.group_alive) rank.group_alive = killpg(rank.pid, 0) == 0 || errno == EPERM;
    }
  }
}

// Last resort when the event loop itself fails: SIGKILL, then reap what goes within the
// give-up time (a rank stuck in the kernel may never go).
void Job::kill_and_reap_ranks() {
  signal_groups(SIGKILL);
  phase_ = Phase::Killing;
  const int64_t give_up_at = now_ms() + kGiveUpAfterKillMs;
  for (Rank& rank : ranks_) {
    while (!rank.exited && now_ms() < give_up_at) {
      pid_t got = waitpid(rank.pid, nullptr, WNOHANG);
      if (got == rank.pid || (got < 0 && errno != EINTR)) {
        rank.exited = true;
      } else {
        usleep(10 * 1000);
      }
    }
  }
}

void Job::on_rank_exit(Rank& rank, int status) {
  rank.exited = true;
  // Reaped, its pid may be taken by an unrelated process once its group is empty too: a group
  // found empty now is never signalled again.
  rank.group_alive = killpg(rank.pid, 0) == 0 || errno == EPERM;
  // Forward what the rank wrote before exiting, so it precedes any failure report.
  read_stream(rank, rank.out, 256);
  read_stream(rank, rank.err, 256);
  bool success = WIFEXITED(status) && WEXITSTATUS(status) == 0;
  if (success || phase_ != Phase::Running) return;
  std::string how;
  if (WIFEXITED(status)) {
    exit_status_ = WEXITSTATUS(status);
    how = "exit code " + std::to_string(WEXITSTATUS(status));
  } else {
    exit_status_ = 128 + WTERMSIG(status);
    how = "signal " + signal_name(WTERMSIG(status));
  }
  say("weftrun: rank %ld (pid %d) failed: %s%s\n", rank.global, rank.pid, how.c_str(),
      all_ranks_exited() ? "" : "; terminating the other ranks");
  stop(SIGTERM);
}

// Sends `sig` to every rank's process group, then SIGKILL once the grace period is over.
void Job::stop(int sig) {
  if (phase_ == Phase::Killing) return;
  signal_groups(sig);
  if (phase_ == Phase::Running) {
    phase_ = Phase::Terminating;
    kill_at_ms_ = now_ms() + seconds_to_ms(options_.grace_seconds);
  }
}

void Job::signal_groups(int sig) {
  for (Rank& rank : ranks_) {
    if (rank.pid < 0 || !rank.group_alive) continue;
    if (killpg(rank.pid, sig) != 0 && !rank.exited) kill(rank.pid, sig);
  }
}

bool Job::all_ranks_exited() const {
  return std::all_of(ranks_.begin(), ranks_.end(), [](const Rank& r) { return r.exited; });
}

// Only asked once every rank has been reaped: a group with members left holds
// background processes of a rank. A group is never signalled again once found empty.
bool Job::any_group_alive() {
  bool alive = false;
  for (Rank& rank : ranks_) {
    if (rank.group_alive) rank.group_alive = killpg(rank.pid, 0) == 0 || errno == EPERM;
    alive = alive || rank.group_alive;
  }
  return alive;
}

void Job::check_deadlines() {
  int64_t now = now_ms();
  if (phase_ == Phase::Running && job_deadline_ms_ > 0 && now >= job_deadline_ms_) {
    say("weftrun: timeout after %g s; terminating all ranks\n", options_.timeout_seconds);
    if (!exit_status_) exit_status_ = kExitTimeout;
    stop(SIGTERM);
  }
  if (phase_ == Phase::Terminating && now >= kill_at_ms_) {
    signal_groups(SIGKILL);
    phase_ = Phase::Killing;
    give_up_at_ms_ = now + kGiveUpAfterKillMs;
  }
}

int Job::poll_timeout_ms() const {
  std::optional<int64_t> deadline;
  if (phase_ == Phase::Running && job_deadline_ms_ > 0) deadline = job_deadline_ms_;
  if (phase_ == Phase::Terminating) deadline = kill_at_ms_;
  if (phase_ == Phase::Killing) deadline = give_up_at_ms_;
  if (!deadline) return -1;
  return static_cast<int>(std::clamp<int64_t>(*deadline - now_ms(), 0, INT_MAX));
}

}  // namespace weftrun
