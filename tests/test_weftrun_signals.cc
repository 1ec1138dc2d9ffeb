// weftrun and signals: those it forwards and then dies by, those it passes on while the job
// goes on (SIGUSR1/2), job control (Ctrl-Z, SIGCONT), signals it was started ignoring (nohup),
// and the end of its ranks when it is killed.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <fstream>
#include <string>
#include <thread>

#include "weftrun_launch.h"

using namespace weftrun_test;

namespace {

// Sends `sig` (SIG`name`) to a 2-rank job whose ranks trap it: both ranks must get it, and
// weftrun must report it and then die by it (so that a shell loop around it stops too).
void expectForwarded(int sig, const std::string& name) {
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

}  // namespace

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

TEST_CASE("weftrun: ranks that ignore SIGTERM are killed after the grace period", "[weftrun]") {
  TempDir dir;
  Launch launch(dir, {"--timeout", "0.3", "--grace", "0.3", "-n", "2", "/bin/sh", "-c",
                      "trap '' TERM; sleep 30"});
  Result result = launch.wait();
  CHECK(result.status == 124);
  CHECK(result.seconds >= 0.55);
  CHECK(result.seconds < 2.5);
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

namespace {

// Both ranks have written ready.<rank>.
bool ranksReady(const TempDir& dir) {
  return fs::exists(dir.path / "ready.0") && fs::exists(dir.path / "ready.1");
}

// The state letter of `pid` in /proc (R, S, T, Z, ...), or 0.
char processState(pid_t pid) {
  std::string stat = read_file("/proc/" + std::to_string(pid) + "/stat");
  size_t paren = stat.rfind(')');
  return paren != std::string::npos && paren + 2 < stat.size() ? stat[paren + 2] : 0;
}

}  // namespace

TEST_CASE("weftrun: SIGUSR1 and SIGUSR2 reach the ranks and the job goes on", "[weftrun]") {
  TempDir dir;
  const std::string script =
      "trap 'touch \"$TEST_DIR/usr1.$RANK\"' USR1\n"
      "trap 'touch \"$TEST_DIR/usr2.$RANK\"' USR2\n"
      "touch \"$TEST_DIR/ready.$RANK\"\n"
      "while [ ! -e \"$TEST_DIR/usr2.$RANK\" ]; do sleep 0.05; done\n"
      "exit 0\n";  // the group's sleep died by the signal: not the rank's status
  Launch launch(dir, {"-n", "2", "/bin/sh", "-c", script});
  REQUIRE(wait_until([&] { return ranksReady(dir); }, 3.0));
  REQUIRE(kill(launch.pid(), SIGUSR1) == 0);
  REQUIRE(wait_until([&] { return fs::exists(dir.path / "usr1.0") && fs::exists(dir.path / "usr1.1"); }, 3.0));
  REQUIRE(kill(launch.pid(), SIGUSR2) == 0);
  Result result = launch.wait();
  CHECK(result.status == 0);  // the ranks finished on their own
  CHECK(result.err.find("weftrun") == std::string::npos);  // (sh names the signal its sleep died by)
}

TEST_CASE("weftrun: a signal it was started ignoring stays ignored (nohup)", "[weftrun]") {
  TempDir dir;
  struct sigaction ignore {}, previous {};
  ignore.sa_handler = SIG_IGN;
  REQUIRE(sigaction(SIGHUP, &ignore, &previous) == 0);  // weftrun inherits it, as under nohup
  Launch launch(dir, {"-n", "2", "/bin/sh", "-c", "touch \"$TEST_DIR/ready.$RANK\"; sleep 1"});
  sigaction(SIGHUP, &previous, nullptr);
  REQUIRE(wait_until([&] { return ranksReady(dir); }, 3.0));
  REQUIRE(kill(launch.pid(), SIGHUP) == 0);
  Result result = launch.wait();
  CHECK(result.status == 0);
  CHECK(result.err.find("SIGHUP") == std::string::npos);
}

TEST_CASE("weftrun: Ctrl-Z stops the ranks with the launcher, SIGCONT resumes them", "[weftrun]") {
  // Each rank counts into a file. Stopped, the counts stand still (a rank may show state D
  // rather than T: dash waits in vfork for a child stopped before its exec); resumed, they move.
  TempDir dir;
  const std::string script = "i=0; touch \"$TEST_DIR/ready.$RANK\"\n"
                             "while [ ! -e \"$TEST_DIR/go\" ]; do i=$((i+1)); echo $i > \"$TEST_DIR/count.$RANK\"; "
                             "sleep 0.02; done\n";
  Launch launch(dir, {"-n", "2", "/bin/sh", "-c", script});
  REQUIRE(wait_until([&] { return ranksReady(dir); }, 3.0));
  auto counts = [&] { return read_file(dir.path / "count.0") + "/" + read_file(dir.path / "count.1"); };
  REQUIRE(kill(launch.pid(), SIGTSTP) == 0);
  CHECK(wait_until([&] { return processState(launch.pid()) == 'T'; }, 3.0));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const std::string stopped = counts();
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  CHECK(counts() == stopped);
  REQUIRE(kill(launch.pid(), SIGCONT) == 0);
  CHECK(wait_until([&] { return counts() != stopped; }, 3.0));
  std::ofstream(dir.path / "go").close();
  Result result = launch.wait();
  CHECK(result.status == 0);
}
