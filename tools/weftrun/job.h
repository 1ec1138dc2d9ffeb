// Declarations shared by weftrun's sources: weftrun.cc parses the command line, job.cc runs
// the ranks, rank_output.cc forwards their output (and drains it at the end) and output_sink.cc
// writes it out.
#ifndef WEFT_TOOLS_WEFTRUN_JOB_H_
#define WEFT_TOOLS_WEFTRUN_JOB_H_

#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "output_sink.h"

namespace weftrun {

inline constexpr int kExitTimeout = 124;  // --timeout passed, as timeout(1) exits

// Milliseconds on the monotonic clock.
inline int64_t now_ms() {
  using namespace std::chrono;
  return duration_cast<milliseconds>(steady_clock::now().time_since_epoch()).count();
}

struct Options {
  int nproc = 1;
  bool tag_output = false;
  double timeout_seconds = 0;  // 0: no timeout
  double grace_seconds = 5;
  bool bind_cores = false;  // --bind-to core
  // Several hosts, as torchrun --nnodes/--node-rank: one weftrun per host, each starting its
  // nproc ranks as ranks node_rank * nproc ... of nnodes * nproc.
  int nnodes = 1;
  int node_rank = 0;
  std::string master_addr, master_port;  // --master-addr/--master-port (else MASTER_ADDR/PORT)
  std::string run_id;                    // --rdzv-id: the job's id, the same on every host
  std::vector<std::string> command;
};

// The CPUs of each core the launcher may run on, in the order of their first CPU.
std::optional<std::vector<cpu_set_t>> usable_cores(std::string& error);
// The first `nproc` of them (--bind-to core); none, with `error` set, when there are fewer
// cores than ranks.
std::optional<std::vector<cpu_set_t>> core_sets(int nproc, std::string& error);

struct OutputStream {
  int fd = -1;                  // read end of the rank's pipe; -1 once closed
  OutputSink* sink = nullptr;   // where its lines go: the launcher's stdout or stderr
  std::string partial_line;
};

struct Rank {
  int index = 0;   // on this host (LOCAL_RANK)
  long global = 0; // in the job (RANK): index, offset by --node-rank; what messages name
  pid_t pid = -1;  // also the id of the rank's process group
  bool exited = false;
  bool group_alive = false;  // the process group may still have members
  OutputStream out, err;
};

// Launches the ranks and supervises them until all are gone; run() returns the exit status.
class Job {
 public:
  explicit Job(Options options) : options_(std::move(options)) {}
  int run();
  // The signal (SIGINT, SIGTERM, SIGHUP, SIGQUIT) that ended the job, forwarded to its ranks;
  // 0 if none did. The launcher then dies by it too, so that a shell loop or make stops.
  int forwarded_signal() const { return forwarded_signal_; }

 private:
  enum class Phase { Running, Terminating, Killing };

  bool setup(std::string& error);
  // MASTER_ADDR/MASTER_PORT, the run id and the secret (rendezvous_env.cc).
  bool choose_rendezvous(std::string& error);
  std::vector<std::string> base_environment();
  bool spawn(Rank& rank, const std::vector<std::string>& base_env);
  [[noreturn]] void exec_rank(const Rank& rank, char** envp, int out_fd, int err_fd);
  void handle_signals();
  void reap_children();
  void kill_and_reap_ranks();
  void on_rank_exit(Rank& rank, int status);
  void stop(int sig);
  void signal_groups(int sig);
  bool all_ranks_exited() const;
  bool any_group_alive();
  void check_deadlines();
  int poll_timeout_ms() const;
  // The launcher's own messages, queued on its stderr like the ranks' lines.
  [[gnu::format(printf, 2, 3)]] void say(const char* format, ...);
  void add_sink_fds(std::vector<pollfd>& fds) const;
  void write_output(const std::vector<pollfd>& fds);
  void drain_output();
  void read_stream(Rank& rank, OutputStream& stream, int max_reads);
  void forward_output(const Rank& rank, OutputStream& stream, std::string_view data);
  void close_stream(const Rank& rank, OutputStream& stream);

  Options options_;
  OutputSink out_sink_{1}, err_sink_{2};
  std::vector<Rank> ranks_;
  std::unordered_map<pid_t, int> rank_by_pid_;
  std::vector<char*> argv_;  // the program and its arguments, null-terminated
  std::vector<cpu_set_t> rank_cpus_;  // by rank, with --bind-to core
  std::string master_addr_, master_port_, run_id_, secret_;
  int signal_fd_ = -1;
  sigset_t original_mask_{};
  rlimit original_nofile_{};
  pid_t launcher_pid_ = 0;
  bool pipe_ignored_ = false;  // SIGPIPE was ignored when weftrun started: the ranks keep that
  Phase phase_ = Phase::Running;
  std::optional<int> exit_status_;  // set by the first failure, signal or timeout
  int forwarded_signal_ = 0;
  int64_t job_deadline_ms_ = 0;
  int64_t kill_at_ms_ = 0;
  int64_t give_up_at_ms_ = 0;
};

}  // namespace weftrun

#endif  // WEFT_TOOLS_WEFTRUN_JOB_H_
