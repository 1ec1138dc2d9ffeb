// Tests for the weftrun launcher: they run the real binary (WEFTRUN_PATH) with /bin/sh ranks.
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "job.h"  // weftrun's own view of the cores (tools/weftrun/core_binding.cc)

#ifndef WEFTRUN_PATH
#error "WEFTRUN_PATH must name the weftrun binary"
#endif

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

bool wait_until(const std::function<bool()>& condition, double timeout_seconds) {
  auto start = Clock::now();
  while (!condition()) {
    if (seconds_since(start) > timeout_seconds) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

std::string read_file(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// True once `pid` has exited. A zombie counts as gone: reaping it is its parent's business
// (init, for orphans), which the test does not control.
bool process_gone(pid_t pid) {
  if (kill(pid, 0) != 0 && errno == ESRCH) return true;
  std::string stat = read_file("/proc/" + std::to_string(pid) + "/stat");
  size_t paren = stat.rfind(')');
  return paren != std::string::npos && paren + 2 < stat.size() && stat[paren + 2] == 'Z';
}

pid_t read_pid(const fs::path& path) { return static_cast<pid_t>(std::stol(read_file(path))); }

struct TempDir {
  fs::path path;
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "weftrun-test-XXXXXX").string();
    REQUIRE(mkdtemp(pattern.data()) != nullptr);
    path = pattern;
  }
  ~TempDir() {
    std::error_code ignored;
    fs::remove_all(path, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
};

struct Result {
  int status = -1;  // exit code, or 128+signal if weftrun itself died by a signal
  int signal = 0;   // the signal weftrun died by, if it did
  std::string out, err;
  double seconds = 0;
};

// Which of weftrun's outputs goes to a pipe that nobody reads (a reader that stalls).
enum class Stall { None, Stdout, Stderr };

// One weftrun process. Its stdout/stderr go to files in `dir` (or one of them to a stalled
// pipe); TEST_DIR=dir is in its environment, plus `env` (a value of std::nullopt unsets the
// variable).
class Launch {
 public:
  // With openStdin, weftrun's stdin is a pipe nobody writes to and that stays open (as a
  // terminal does) until the Launch goes; otherwise /dev/null.
  Launch(const TempDir& dir, const std::vector<std::string>& args,
         const std::map<std::string, std::optional<std::string>>& env = {}, bool openStdin = false,
         Stall stall = Stall::None)
      : out_path_(dir.path / "weftrun.out"), err_path_(dir.path / "weftrun.err") {
    int stdinPipe[2] = {-1, -1};
    if (openStdin) REQUIRE(pipe(stdinPipe) == 0);
    int stalledPipe[2] = {-1, -1};
    if (stall != Stall::None) REQUIRE(pipe(stalledPipe) == 0);
    std::vector<std::string> words{WEFTRUN_PATH};
    words.insert(words.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (std::string& word : words) argv.push_back(word.data());
    argv.push_back(nullptr);
    start_ = Clock::now();
    pid_ = fork();
    REQUIRE(pid_ >= 0);
    if (pid_ == 0) {
      setenv("TEST_DIR", dir.path.c_str(), 1);
      const rlimit noCore{0, 0};  // a launcher that dies by SIGQUIT leaves no core file
      setrlimit(RLIMIT_CORE, &noCore);
      for (const auto& [key, value] : env) {
        if (value) {
          setenv(key.c_str(), value->c_str(), 1);
        } else {
          unsetenv(key.c_str());
        }
      }
      int in = openStdin ? stdinPipe[0] : open("/dev/null", O_RDONLY);
      int out = open(out_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      int err = open(err_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (stall == Stall::Stdout) out = stalledPipe[1];
      if (stall == Stall::Stderr) err = stalledPipe[1];
      dup2(in, 0);
      dup2(out, 1);
      dup2(err, 2);
      execv(argv[0], argv.data());
      _exit(250);
    }
    if (openStdin) {
      close(stdinPipe[0]);
      stdinWriter_ = stdinPipe[1];
    }
    if (stall != Stall::None) {
      close(stalledPipe[1]);
      stalledReader_ = stalledPipe[0];
    }
  }
  ~Launch() {
    if (stdinWriter_ >= 0) close(stdinWriter_);
    if (stalledReader_ >= 0) close(stalledReader_);
    if (pid_ > 0) {  // a failed check left it running
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  Launch(const Launch&) = delete;
  Launch& operator=(const Launch&) = delete;

  pid_t pid() const { return pid_; }

  Result wait(double timeout_seconds = 4.5) {
    Result result;
    int status = 0;
    bool done =
        wait_until([&] { return waitpid(pid_, &status, WNOHANG) == pid_; }, timeout_seconds);
    result.seconds = seconds_since(start_);
    if (!done) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    pid_ = -1;
    REQUIRE(done);
    result.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    result.signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
    result.out = read_file(out_path_);
    result.err = read_file(err_path_);
    return result;
  }

 private:
  fs::path out_path_, err_path_;
  pid_t pid_ = -1;
  int stdinWriter_ = -1;
  int stalledReader_ = -1;  // open and never read
  Clock::time_point start_;
};

Result run_weftrun(const std::vector<std::string>& args,
                   const std::map<std::string, std::optional<std::string>>& env = {}) {
  TempDir dir;
  Launch launch(dir, args, env);
  return launch.wait();
}

std::map<std::string, std::string> read_env_file(const fs::path& path) {
  std::map<std::string, std::string> env;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    size_t eq = line.find('=');
    if (eq != std::string::npos) env[line.substr(0, eq)] = line.substr(eq + 1);
  }
  return env;
}

}  // namespace

TEST_CASE("weftrun: all ranks succeed", "[weftrun]") {
  Result result = run_weftrun({"-n", "4", "/bin/sh", "-c", "exit 0"});
  CHECK(result.status == 0);
  CHECK(result.err.empty());
}

TEST_CASE("weftrun: each rank gets torchrun's environment", "[weftrun]") {
  TempDir dir;
  Launch launch(dir, {"-n", "3", "--", "/bin/sh", "-c", "env > \"$TEST_DIR/env.$RANK\""},
                {{"MASTER_ADDR", std::nullopt},
                 {"MASTER_PORT", std::nullopt},
                 {"RANK", "99"},  // a stale value in the launcher's environment is replaced
                 {"TORCHELASTIC_RUN_ID", "stale"}});
  REQUIRE(launch.wait().status == 0);

  std::string port, run_id;
  for (int rank = 0; rank < 3; ++rank) {
    INFO("rank " << rank);
    auto env = read_env_file(dir.path / ("env." + std::to_string(rank)));
    CHECK(env["RANK"] == std::to_string(rank));
    CHECK(env["LOCAL_RANK"] == std::to_string(rank));
    CHECK(env["ROLE_RANK"] == std::to_string(rank));
    CHECK(env["WORLD_SIZE"] == "3");
    CHECK(env["LOCAL_WORLD_SIZE"] == "3");
    CHECK(env["ROLE_WORLD_SIZE"] == "3");
    CHECK(env["GROUP_RANK"] == "0");
    CHECK(env["MASTER_ADDR"] == "127.0.0.1");
    CHECK(env["WEFT_LAUNCHER"] == "weftrun");
    CHECK(env["TEST_DIR"] == dir.path.string());  // the rest of the environment is inherited
    CHECK_FALSE(env["TORCHELASTIC_RUN_ID"].empty());
    CHECK(env["TORCHELASTIC_RUN_ID"] != "stale");
    int port_number = std::stoi(env["MASTER_PORT"]);
    CHECK(port_number > 0);
    CHECK(port_number < 65536);
    if (rank == 0) {
      port = env["MASTER_PORT"];
      run_id = env["TORCHELASTIC_RUN_ID"];
    }
    CHECK(env["MASTER_PORT"] == port);
    CHECK(env["TORCHELASTIC_RUN_ID"] == run_id);
  }
}

TEST_CASE("weftrun: MASTER_ADDR and MASTER_PORT from the environment are kept", "[weftrun]") {
  TempDir dir;
  Launch launch(dir, {"-n", "2", "/bin/sh", "-c", "env > \"$TEST_DIR/env.$RANK\""},
                {{"MASTER_ADDR", "10.11.12.13"}, {"MASTER_PORT", "29123"}});
  REQUIRE(launch.wait().status == 0);
  for (int rank = 0; rank < 2; ++rank) {
    auto env = read_env_file(dir.path / ("env." + std::to_string(rank)));
    CHECK(env["MASTER_ADDR"] == "10.11.12.13");
    CHECK(env["MASTER_PORT"] == "29123");
  }
}

TEST_CASE("weftrun: torchrun's spellings of the rank count", "[weftrun]") {
  const char* check = "test \"$WORLD_SIZE\" = 3 && test \"$LOCAL_WORLD_SIZE\" = 3";
  for (auto args : std::vector<std::vector<std::string>>{{"--nproc_per_node=3"},
                                                        {"--nproc_per_node", "3"},
                                                        {"--nproc-per-node=3"},
                                                        {"--nproc-per-node", "3"},
                                                        {"-n3"}}) {
    INFO(args[0]);
    args.insert(args.end(), {"/bin/sh", "-c", check});
    CHECK(run_weftrun(args).status == 0);
  }
}

TEST_CASE("weftrun: a failing rank stops the job with its exit code", "[weftrun]") {
  TempDir dir;
  const char* script =
      "if [ \"$RANK\" = 1 ]; then\n"
      "  while [ ! -f \"$TEST_DIR/ready\" ]; do sleep 0.01; done\n"
      "  exit 3\n"
      "fi\n"
      "echo $$ > \"$TEST_DIR/rank0.pid\"\n"
      "sleep 60 & echo $! > \"$TEST_DIR/sleep.pid\"\n"
      "touch \"$TEST_DIR/ready\"\n"
      "wait\n";
  Launch launch(dir, {"-n", "2", "/bin/sh", "-c", script});
  Result result = launch.wait();
  CHECK(result.status == 3);
  CHECK(result.seconds < 3);
  CHECK(result.err.find("rank 1") != std::string::npos);
  CHECK(result.err.find("exit code 3") != std::string::npos);
  // Rank 0 and its background child (same process group) are gone.
  pid_t rank0 = read_pid(dir.path / "rank0.pid");
  pid_t grandchild = read_pid(dir.path / "sleep.pid");
  CHECK(wait_until([&] { return process_gone(rank0); }, 1.0));
  CHECK(wait_until([&] { return process_gone(grandchild); }, 1.0));
}

TEST_CASE("weftrun: ranks read end-of-file from stdin and never the launcher's", "[weftrun]") {
  // Ranks run in background process groups: reading a terminal would stop them (SIGTTIN) and
  // hang the job; reading an open stdin would block. They get /dev/null instead.
  TempDir dir;
  Launch launch(dir, {"-n", "2", "--timeout", "20", "/bin/sh", "-c", "read line || echo \"eof $RANK\""}, {}, true);
  Result result = launch.wait();
  CHECK(result.status == 0);
  CHECK(result.out.find("eof 0") != std::string::npos);
  CHECK(result.out.find("eof 1") != std::string::npos);
  CHECK(result.seconds < 10);
}

TEST_CASE("weftrun: a rank killed by a signal gives 128+signal", "[weftrun]") {
  Result result = run_weftrun(
      {"-n", "2", "/bin/sh", "-c", "if [ \"$RANK\" = 1 ]; then kill -KILL $$; fi; sleep 30"});
  CHECK(result.status == 137);
  CHECK(result.seconds < 3);
  CHECK(result.err.find("rank 1") != std::string::npos);
  CHECK(result.err.find("SIGKILL") != std::string::npos);
}

// Sends `sig` (SIG`name`) to a 2-rank job whose ranks trap it: both ranks must get it, and
// weftrun must report it and then die by it (so that a shell loop around it stops too).
static void expectForwarded(int sig, const std::string& name) {
  TempDir dir;
  const std::string script = "trap 'touch \"$TEST_DIR/got.$RANK\"; exit 0' " + name +
                             "\n"
                             "sleep 30 &\n"
                             "touch \"$TEST_DIR/ready.$RANK\"\n"
                             "wait\n";
  Launch launch(dir, {"--grace", "2", "-n", "2", "/bin/sh", "-c", script});
  REQUIRE(wait_until(
      [&] { return fs::exists(dir.path / "ready.0") && fs::exists(dir.path / "ready.1"); }, 3.0));
  REQUIRE(kill(launch.pid(), sig) == 0);
  Result result = launch.wait();
  CHECK(result.status == 128 + sig);
  CHECK(result.signal == sig);
  CHECK(fs::exists(dir.path / "got.0"));
  CHECK(fs::exists(dir.path / "got.1"));
  CHECK(result.err.find("SIG" + name) != std::string::npos);
}

TEST_CASE("weftrun: SIGTERM is forwarded to the ranks", "[weftrun]") { expectForwarded(SIGTERM, "TERM"); }

TEST_CASE("weftrun: SIGINT is forwarded and gives 130", "[weftrun]") {
  TempDir dir;
  Launch launch(dir, {"--grace", "1", "-n", "2", "/bin/sh", "-c",
                      "touch \"$TEST_DIR/ready.$RANK\"; sleep 30"});
  REQUIRE(wait_until(
      [&] { return fs::exists(dir.path / "ready.0") && fs::exists(dir.path / "ready.1"); }, 3.0));
  REQUIRE(kill(launch.pid(), SIGINT) == 0);
  Result result = launch.wait();
  CHECK(result.status == 130);
  CHECK(result.signal == SIGINT);
}

TEST_CASE("weftrun: SIGQUIT is forwarded too", "[weftrun]") { expectForwarded(SIGQUIT, "QUIT"); }

TEST_CASE("weftrun: --tag-output prefixes each line with the rank", "[weftrun]") {
  Result result = run_weftrun({"--tag-output", "-n", "2", "/bin/sh", "-c",
                               "printf 'a%s\\nb%s\\n' $RANK $RANK; echo err$RANK >&2; "
                               "printf partial$RANK"});
  REQUIRE(result.status == 0);
  for (std::string rank : {"0", "1"}) {
    CHECK(result.out.find("[" + rank + "]: a" + rank + "\n[" + rank + "]: b" + rank + "\n") !=
          std::string::npos);
    CHECK(result.out.find("[" + rank + "]: partial" + rank + "\n") != std::string::npos);
    CHECK(result.err.find("[" + rank + "]: err" + rank + "\n") != std::string::npos);
  }
  CHECK(result.out.find("err") == std::string::npos);
  CHECK(result.err.find("partial") == std::string::npos);

  Result short_flag = run_weftrun({"-t", "-n", "1", "/bin/sh", "-c", "echo hello"});
  CHECK(short_flag.out == "[0]: hello\n");
}

// A reader that stops reading must not stop the launcher: it still keeps --timeout, forwards
// signals and exits, though the ranks' output (and its own messages) wait on a full pipe.
TEST_CASE("weftrun: --timeout holds while stdout's reader stalls", "[weftrun]") {
  TempDir dir;
  Launch launch(dir, {"--tag-output", "--timeout", "0.5", "--grace", "0.5", "-n", "2", "/bin/sh", "-c",
                      "yes 'line of output' | head -n 300000; sleep 30"},
                {}, false, Stall::Stdout);
  Result result = launch.wait();
  CHECK(result.status == 124);
  CHECK(result.seconds < 3);
  CHECK(result.err.find("timeout") != std::string::npos);
}

TEST_CASE("weftrun: a signal is forwarded while stderr's reader stalls", "[weftrun]") {
  TempDir dir;
  Launch launch(dir, {"--grace", "1", "-n", "2", "/bin/sh", "-c",
                      "touch \"$TEST_DIR/ready.$RANK\"; head -c 1000000 /dev/zero >&2; sleep 30"},
                {}, false, Stall::Stderr);
  REQUIRE(wait_until(
      [&] { return fs::exists(dir.path / "ready.0") && fs::exists(dir.path / "ready.1"); }, 3.0));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the ranks fill the pipe
  REQUIRE(kill(launch.pid(), SIGTERM) == 0);
  Result result = launch.wait();
  CHECK(result.signal == SIGTERM);
  CHECK(result.seconds < 4);
}

TEST_CASE("weftrun: output the reader never takes ends the job at --timeout, as a failure", "[weftrun]") {
  TempDir dir;
  Launch launch(dir, {"--tag-output", "--timeout", "0.5", "-n", "1", "/bin/sh", "-c",
                      "yes 'line of output' | head -n 20000"},
                {}, false, Stall::Stdout);
  Result result = launch.wait();
  CHECK(result.status == 124);
  CHECK(result.seconds < 2);
  CHECK(result.err.find("output not taken by its reader is dropped") != std::string::npos);
}

// The CPUs in a /proc/<pid>/status Cpus_allowed_list ("0-3,8,10-11").
std::set<int> parse_cpu_list(const std::string& list) {
  std::set<int> cpus;
  std::istringstream in(list);
  for (std::string range; std::getline(in, range, ',');) {
    const size_t dash = range.find('-');
    const int first = std::stoi(range.substr(0, dash));
    const int last = dash == std::string::npos ? first : std::stoi(range.substr(dash + 1));
    for (int cpu = first; cpu <= last; ++cpu) cpus.insert(cpu);
  }
  return cpus;
}

TEST_CASE("weftrun: --bind-to core gives each rank a core of its own", "[weftrun]") {
  std::string error;
  auto cores = weftrun::usable_cores(error);  // what the launcher sees, from this process
  REQUIRE(cores);
  const std::string show = "grep Cpus_allowed_list /proc/self/status";
  if (cores->size() < 2) {
    Result refused = run_weftrun({"-n", "2", "--bind-to", "core", "/bin/sh", "-c", "echo ran"});
    CHECK(refused.status != 0);
    CHECK(refused.out.find("ran") == std::string::npos);
    WARN("one core here: checked only that binding 2 ranks is refused");
    return;
  }
  Result bound = run_weftrun({"--tag-output", "-n", "2", "--bind-to", "core", "/bin/sh", "-c", show});
  REQUIRE(bound.status == 0);
  std::map<int, std::set<int>> cpusOf;  // rank -> the CPUs it may run on
  std::istringstream lines(bound.out);
  for (std::string line; std::getline(lines, line);) {
    cpusOf[std::stoi(line.substr(1))] = parse_cpu_list(line.substr(line.find('\t') + 1));
  }
  REQUIRE(cpusOf.size() == 2);
  for (int rank : {0, 1}) {
    std::set<int> core;
    for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
      if (CPU_ISSET(cpu, &(*cores)[static_cast<size_t>(rank)])) core.insert(cpu);
    }
    INFO("rank " << rank);
    CHECK(cpusOf[rank] == core);  // exactly the hardware threads of the rank's own core
  }

  // More ranks than cores: refused with the reason, before any rank starts.
  Result over = run_weftrun({"-n", std::to_string(cores->size() + 1), "--bind-to", "core", "/bin/sh", "-c", "echo ran"});
  CHECK(over.status != 0);
  CHECK(over.err.find("needs a core per rank") != std::string::npos);
  CHECK(over.out.find("ran") == std::string::npos);
}

TEST_CASE("weftrun: bad arguments exit 2 with usage", "[weftrun]") {
  for (const auto& args : std::vector<std::vector<std::string>>{
           {},
           {"-n"},
           {"-n", "0", "true"},
           {"-n", "1025", "true"},
           {"-n", "abc", "true"},
           {"-n", "1.5", "true"},
           {"-n", "2"},
           {"-n", "2", "--"},
           {"--bogus", "true"},
           {"--timeout", "-1", "true"},
           {"--timeout", "0", "true"},
           {"--timeout", "soon", "true"},
           {"--grace", "x", "true"},
           {"--bind-to", "socket", "true"},
           {"--tag-output=yes", "true"}}) {
    std::string joined;
    for (const auto& arg : args) joined += arg + " ";
    INFO("args: " << joined);
    Result result = run_weftrun(args);
    CHECK(result.status == 2);
    CHECK(result.err.find("Usage: weftrun") != std::string::npos);
  }
}

TEST_CASE("weftrun: --help and --version", "[weftrun]") {
  Result help = run_weftrun({"--help"});
  CHECK(help.status == 0);
  CHECK(help.out.find("Usage: weftrun") != std::string::npos);
  Result version = run_weftrun({"--version"});
  CHECK(version.status == 0);
  CHECK(version.out.find("weftrun") != std::string::npos);
}

TEST_CASE("weftrun: a program that cannot be executed exits 127", "[weftrun]") {
  Result result = run_weftrun({"-n", "2", "/nonexistent/weft-program"});
  CHECK(result.status == 127);
  CHECK(result.err.find("/nonexistent/weft-program") != std::string::npos);
}

TEST_CASE("weftrun: --timeout terminates the job with 124", "[weftrun]") {
  Result result = run_weftrun({"--timeout", "0.3", "-n", "2", "/bin/sh", "-c", "sleep 30"});
  CHECK(result.status == 124);
  CHECK(result.seconds < 2);
  CHECK(result.err.find("timeout") != std::string::npos);
}

TEST_CASE("weftrun: ranks that ignore SIGTERM are killed after the grace period", "[weftrun]") {
  TempDir dir;
  Launch launch(dir, {"--timeout", "0.3", "--grace", "0.3", "-n", "2", "/bin/sh", "-c",
                      "trap '' TERM; sleep 30"});
  Result result = launch.wait();
  CHECK(result.status == 124);
  CHECK(result.seconds >= 0.55);
  CHECK(result.seconds < 2.5);
}

TEST_CASE("weftrun: background processes left by ranks are cleaned up", "[weftrun]") {
  TempDir dir;
  Launch launch(dir, {"-n", "2", "/bin/sh", "-c", "sleep 30 & echo $! > \"$TEST_DIR/bg.$RANK\""});
  Result result = launch.wait();
  CHECK(result.status == 0);
  CHECK(result.seconds < 3);
  for (int rank = 0; rank < 2; ++rank) {
    pid_t background = read_pid(dir.path / ("bg." + std::to_string(rank)));
    CHECK(wait_until([&] { return process_gone(background); }, 1.0));
  }
}

TEST_CASE("weftrun: ranks die with a SIGKILLed launcher", "[weftrun]") {
  TempDir dir;
  Launch launch(dir, {"-n", "2", "/bin/sh", "-c",
                      "echo $$ > \"$TEST_DIR/tmp.$RANK\"; mv \"$TEST_DIR/tmp.$RANK\" "
                      "\"$TEST_DIR/pid.$RANK\"; exec sleep 30"});
  auto pid_file = [&](int rank) { return dir.path / ("pid." + std::to_string(rank)); };
  REQUIRE(wait_until([&] { return fs::exists(pid_file(0)) && fs::exists(pid_file(1)); }, 3.0));
  REQUIRE(kill(launch.pid(), SIGKILL) == 0);
  CHECK(launch.wait().status == 137);
  for (int rank = 0; rank < 2; ++rank) {
    pid_t pid = read_pid(pid_file(rank));
    CHECK(wait_until([&] { return process_gone(pid); }, 2.0));
  }
}
