// Runs the real weftrun binary (WEFTRUN_PATH) for the launcher's tests: a scratch directory,
// one launch with its own environment and standard streams, and its result.
#pragma once

#include <fcntl.h>
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
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#ifndef WEFTRUN_PATH
#error "WEFTRUN_PATH must name the weftrun binary"
#endif

namespace weftrun_test {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

inline bool wait_until(const std::function<bool()>& condition, double timeout_seconds) {
  auto start = Clock::now();
  while (!condition()) {
    if (seconds_since(start) > timeout_seconds) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

inline std::string read_file(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// True once `pid` has exited. A zombie counts as gone: reaping it is its parent's business
// (init, for orphans), which the test does not control.
inline bool process_gone(pid_t pid) {
  if (kill(pid, 0) != 0 && errno == ESRCH) return true;
  std::string stat = read_file("/proc/" + std::to_string(pid) + "/stat");
  size_t paren = stat.rfind(')');
  return paren != std::string::npos && paren + 2 < stat.size() && stat[paren + 2] == 'Z';
}

inline pid_t read_pid(const fs::path& path) { return static_cast<pid_t>(std::stol(read_file(path))); }

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

inline Result run_weftrun(const std::vector<std::string>& args,
                   const std::map<std::string, std::optional<std::string>>& env = {}) {
  TempDir dir;
  Launch launch(dir, args, env);
  return launch.wait();
}

inline std::map<std::string, std::string> read_env_file(const fs::path& path) {
  std::map<std::string, std::string> env;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    size_t eq = line.find('=');
    if (eq != std::string::npos) env[line.substr(0, eq)] = line.substr(eq + 1);
  }
  return env;
}

}  // namespace weftrun_test
