// Tests for the weftrun launcher: they run the real binary (WEFTRUN_PATH) with /bin/sh ranks.
#include <sched.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "job.h"  // weftrun's own view of the cores (tools/weftrun/core_binding.cc)
#include "weftrun_launch.h"

using namespace weftrun_test;

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

TEST_CASE("weftrun: OMP_NUM_THREADS is 1 unless set, a torchrun agent's settings are not passed on", "[weftrun]") {
  TempDir dir;
  Launch launch(dir, {"-n", "2", "/bin/sh", "-c", "env > \"$TEST_DIR/env.$RANK\""},
                {{"OMP_NUM_THREADS", std::nullopt},
                 {"TORCHELASTIC_USE_AGENT_STORE", "True"},  // as under torchrun: no rank would host the store
                 {"TORCHELASTIC_ERROR_FILE", "/tmp/agent-error.json"}});
  REQUIRE(launch.wait().status == 0);
  auto env = read_env_file(dir.path / "env.1");
  CHECK(env["OMP_NUM_THREADS"] == "1");
  CHECK(env.count("TORCHELASTIC_USE_AGENT_STORE") == 0);
  CHECK(env.count("TORCHELASTIC_ERROR_FILE") == 0);

  TempDir own;
  Launch kept(own, {"-n", "2", "/bin/sh", "-c", "env > \"$TEST_DIR/env.$RANK\""}, {{"OMP_NUM_THREADS", "3"}});
  REQUIRE(kept.wait().status == 0);
  CHECK(read_env_file(own.path / "env.0")["OMP_NUM_THREADS"] == "3");
}

TEST_CASE("weftrun: one launcher per host numbers the ranks across hosts, as torchrun --nnodes", "[weftrun]") {
  // Two "hosts" on this one: the environment of 2 x 2 ranks, and the same id, port and secret
  // everywhere (the secret from the caller: no launcher can choose it for the others).
  TempDir shared, first, second;
  const std::string script = "env > \"$OUT/env.$RANK\"";
  const std::string secret(64, 'a');
  std::vector<std::unique_ptr<Launch>> hosts;
  for (int node = 0; node < 2; ++node) {
    hosts.push_back(std::make_unique<Launch>(
        node == 0 ? first : second,
        std::vector<std::string>{"--nnodes", "2", "--node_rank=" + std::to_string(node), "--master-addr", "127.0.0.1",
                                 "--master-port", "+29777", "--rdzv-id", "job7", "-n", "2", "/bin/sh", "-c", script},
        std::map<std::string, std::optional<std::string>>{{"OUT", shared.path.string()}, {"WEFT_SECRET", secret}}));
  }
  for (auto& host : hosts) REQUIRE(host->wait().status == 0);
  for (int rank = 0; rank < 4; ++rank) {
    INFO("rank " << rank);
    auto env = read_env_file(shared.path / ("env." + std::to_string(rank)));
    CHECK(env["RANK"] == std::to_string(rank));
    CHECK(env["ROLE_RANK"] == std::to_string(rank));
    CHECK(env["LOCAL_RANK"] == std::to_string(rank % 2));
    CHECK(env["GROUP_RANK"] == std::to_string(rank / 2));
    CHECK(env["WORLD_SIZE"] == "4");
    CHECK(env["LOCAL_WORLD_SIZE"] == "2");
    CHECK(env["GROUP_WORLD_SIZE"] == "2");
    CHECK(env["MASTER_ADDR"] == "127.0.0.1");
    CHECK(env["MASTER_PORT"] == "29777");
    CHECK(env["TORCHELASTIC_RUN_ID"] == "job7");
    CHECK(env["WEFT_SECRET"] == secret);
  }
}

TEST_CASE("weftrun: across hosts, no made-up secret, torchrun's default port, and layouts that cannot be", "[weftrun]") {
  TempDir dir;
  Launch launch(dir, {"--nnodes", "3", "--node-rank", "2", "--master-addr", "[::1]", "-n", "1", "/bin/sh", "-c",
                      "env > \"$TEST_DIR/env\""},
                {{"MASTER_PORT", std::nullopt}, {"WEFT_SECRET", std::nullopt}});
  REQUIRE(launch.wait().status == 0);
  auto env = read_env_file(dir.path / "env");
  CHECK(env["MASTER_ADDR"] == "::1");  // as torchrun: no brackets for the ranks and torch's store
  CHECK(env["RANK"] == "2");
  CHECK(env["MASTER_PORT"] == "29500");
  CHECK(env["TORCHELASTIC_RUN_ID"] == "none");
  CHECK(env.count("WEFT_SECRET") == 0);  // Weft's ranks derive one from the id, and warn
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"--nnodes", "2", "-n", "1", "true"},  // where is rank 0?
           {"--nnodes", "2", "--node-rank", "2", "--master-addr", "h", "true"},
           {"--nnodes", "1:4", "true"},
           {"--nnodes", "2", "--standalone", "--master-addr", "h", "true"},
           {"--master-port", "70000", "true"},
           {"-m", "--no-python", "x"}}) {
    Result result = run_weftrun(args, {{"MASTER_ADDR", std::nullopt}});
    INFO(args[0] << " " << args[1] << ": " << result.err);
    CHECK(result.status == 2);
  }
}

TEST_CASE("weftrun: a .py program runs with python3 -u, -m runs a module, as torchrun", "[weftrun]") {
  TempDir dir;
  const fs::path script = dir.path / "hello.py";
  // One string a print: unbuffered, print writes each of its arguments apart, and ranks that
  // share stdout (no --tag-output) may interleave between them.
  std::ofstream(script) << "import os\nprint(f\"script rank {os.environ['RANK']}\")\n";
  Result result = run_weftrun({"-n", "2", script.string()});
  INFO("out: " << result.out << "\nerr: " << result.err);
  CHECK(result.status == 0);
  CHECK(result.out.find("script rank 1") != std::string::npos);
  // Unbuffered: rank 0's line is out before rank 1's failure has it terminated (rank 1 fails
  // once rank 0 has printed, which rank 0 marks with a file).
  const fs::path failing = dir.path / "failing.py";
  std::ofstream(failing) << "import os, sys, time\n"
                            "rank, mark = os.environ['RANK'], os.environ['TEST_DIR'] + '/printed'\n"
                            "print(f'printed by {rank}')\n"
                            "if rank == '0':\n    open(mark, 'w').close()\n    time.sleep(30)\n"
                            "for _ in range(2000):\n    if os.path.exists(mark): break\n    time.sleep(0.01)\n"
                            "sys.exit(3)\n";
  Result failed = run_weftrun({"-n", "2", failing.string()}, {{"PYTHONUNBUFFERED", std::nullopt}});
  INFO("out: " << failed.out << "\nerr: " << failed.err);
  CHECK(failed.status == 3);
  CHECK(failed.out.find("printed by 0") != std::string::npos);
  Result module = run_weftrun({"-n", "1", "-m", "json.tool", "--help"});
  CHECK(module.status == 0);
  CHECK(module.out.find("usage") != std::string::npos);
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

TEST_CASE("weftrun: a program not found exits 127, one that cannot be executed 126", "[weftrun]") {
  Result result = run_weftrun({"-n", "2", "/nonexistent/weft-program"});
  CHECK(result.status == 127);
  CHECK(result.err.find("/nonexistent/weft-program") != std::string::npos);
  TempDir dir;
  const fs::path script = dir.path / "not-executable.sh";
  std::ofstream(script) << "#!/bin/sh\nexit 0\n";
  fs::permissions(script, fs::perms::owner_read | fs::perms::owner_write);
  // As root, execve still needs an execute bit somewhere: no bit, no exec.
  for (const std::string& program : {script.string(), dir.path.string()}) {
    INFO(program);
    Result refused = run_weftrun({"-n", "2", program});
    CHECK(refused.status == 126);
    CHECK(refused.err.find("cannot execute") != std::string::npos);
  }
}

TEST_CASE("weftrun: --timeout terminates the job with 124", "[weftrun]") {
  Result result = run_weftrun({"--timeout", "0.3", "-n", "2", "/bin/sh", "-c", "sleep 30"});
  CHECK(result.status == 124);
  CHECK(result.seconds < 2);
  CHECK(result.err.find("timeout") != std::string::npos);
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
