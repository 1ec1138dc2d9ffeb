// weftrun: launches N local ranks of a program with torchrun's environment, forwards their
// output and signals, and tears the whole job down when any rank fails.
// This file parses the command line; job.cc does the rest. No dependency on the Weft library.
#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>

#include "job.h"

#ifndef WEFTRUN_VERSION
#define WEFTRUN_VERSION "0.1.0"
#endif

namespace weftrun {
namespace {

constexpr int kMaxRanks = 1024;       // on one host
constexpr int kMaxHosts = 1 << 20;
constexpr long kMaxWorld = 1L << 20;  // Weft's largest communicator
constexpr int kExitUsage = 2;

const char kUsage[] =
    "Usage: weftrun -n N [options] [--] program [args...]\n"
    "\n"
    "Launches N local ranks of program with torchrun's environment (MASTER_ADDR,\n"
    "MASTER_PORT, RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, ...).\n"
    "\n"
    "Options:\n"
    "  -n, --nproc-per-node N  number of ranks on this host, 1..1024 (default 1)\n"
    "      --nnodes H          hosts in the job, one weftrun on each (default 1)\n"
    "      --node-rank I       this host's place, 0..H-1: its ranks are I*N .. I*N+N-1\n"
    "      --master-addr ADDR  where rank 0 (on host 0) listens; needed with --nnodes > 1\n"
    "      --master-port PORT  its port (with --nnodes > 1, default 29500)\n"
    "      --rdzv-id ID        the job's id, the same on every host (TORCHELASTIC_RUN_ID)\n"
    "      --standalone        one host with a free port (the default; as torchrun's)\n"
    "  -m, --module            run program as a Python module: python3 -m program\n"
    "      --no-python         run program as it is, even if it ends in .py\n"
    "  -t, --tag-output        prefix every output line with \"[rank]: \"\n"
    "      --timeout SECONDS   terminate the job after SECONDS and exit 124\n"
    "      --grace SECONDS     wait between SIGTERM and SIGKILL (default 5)\n"
    "      --bind-to core|none bind rank i to the i-th core this launcher may use, as\n"
    "                          mpirun --bind-to core (an error with more ranks than\n"
    "                          cores); none (default): the OS places the ranks\n"
    "  -h, --help              show this help and exit\n"
    "      --version           show the version and exit\n"
    "\n"
    "On one host MASTER_ADDR defaults to 127.0.0.1 and MASTER_PORT to a free port on it. If\n"
    "MASTER_PORT is set, MASTER_ADDR and MASTER_PORT are passed through unchanged (options\n"
    "first, then the environment). torchrun's spellings (--nproc_per_node, --node_rank,\n"
    "--master_addr, --master_port, --rdzv_id, --no_python) work too, and as under torchrun a\n"
    "program ending in .py runs with python3 -u (from PATH). Across hosts, export the same\n"
    "WEFT_SECRET (64 hex digits) on every host: Weft's ranks otherwise derive it from the job's\n"
    "id and port, which others may know.\n"
    "If a rank fails, the others get SIGTERM; the exit status is the failing rank's exit\n"
    "code, or 128+N if it died by signal N. SIGINT/SIGTERM/SIGHUP/SIGQUIT are forwarded to all\n"
    "ranks, and weftrun then dies by the same signal; SIGUSR1/SIGUSR2 are passed on to the ranks\n"
    "(not their children) and the job goes on; Ctrl-Z (SIGTSTP) stops the ranks and weftrun,\n"
    "SIGCONT resumes them. A signal weftrun was started ignoring (nohup's SIGHUP) stays ignored.\n"
    "With several ranks, each gets OMP_NUM_THREADS=1 unless it is set, as under torchrun. A\n"
    "program not found exits 127, one that cannot be executed 126.\n";

[[noreturn]] void usage_error(const std::string& message) {
  std::fprintf(stderr, "weftrun: error: %s\n\n%s", message.c_str(), kUsage);
  std::exit(kExitUsage);
}

std::optional<long> parse_integer(const std::string& text) {
  if (text.empty()) return std::nullopt;
  errno = 0;
  char* end = nullptr;
  long value = std::strtol(text.c_str(), &end, 10);
  if (errno != 0 || *end != '\0') return std::nullopt;
  return value;
}

std::optional<double> parse_seconds(const std::string& text) {
  if (text.empty()) return std::nullopt;
  errno = 0;
  char* end = nullptr;
  double value = std::strtod(text.c_str(), &end);
  if (errno != 0 || *end != '\0' || !std::isfinite(value) || value < 0 || value > 1e9) {
    return std::nullopt;
  }
  return value;
}

Options parse_options(int argc, char** argv) {
  Options options;
  bool standalone = false;
  bool module = false, no_python = false;
  int index = 1;
  for (; index < argc; ++index) {
    std::string arg = argv[index];
    if (arg == "--") {
      ++index;
      break;
    }
    if (arg.size() < 2 || arg[0] != '-') break;  // first word of the program

    std::string name = arg;
    std::optional<std::string> inline_value;
    if (arg.starts_with("--")) {
      if (size_t eq = arg.find('='); eq != std::string::npos) {
        name = arg.substr(0, eq);
        inline_value = arg.substr(eq + 1);
      }
    } else if (arg.starts_with("-n") && arg.size() > 2) {
      name = "-n";
      inline_value = arg.substr(2);
    }
    auto value = [&]() -> std::string {
      if (inline_value) return *inline_value;
      if (index + 1 >= argc) usage_error("option " + name + " needs a value");
      return argv[++index];
    };
    auto no_value = [&] {
      if (inline_value) usage_error("option " + name + " takes no value");
    };

    if (name == "-n" || name == "--nproc-per-node" || name == "--nproc_per_node") {
      std::string text = value();
      std::optional<long> count = parse_integer(text);
      if (!count || *count < 1 || *count > kMaxRanks) {
        usage_error("the number of ranks must be an integer from 1 to " +
                    std::to_string(kMaxRanks) + ", got '" + text + "'");
      }
      options.nproc = static_cast<int>(*count);
    } else if (name == "--nnodes") {
      std::string text = value();
      if (text.find(':') != std::string::npos) {
        usage_error("--nnodes: elastic ranges (MIN:MAX) are not supported, got '" + text + "'");
      }
      std::optional<long> count = parse_integer(text);
      if (!count || *count < 1 || *count > kMaxHosts) {
        usage_error("--nnodes must be an integer from 1 to " + std::to_string(kMaxHosts) + ", got '" + text + "'");
      }
      options.nnodes = static_cast<int>(*count);
    } else if (name == "--node-rank" || name == "--node_rank") {
      std::string text = value();
      std::optional<long> place = parse_integer(text);
      if (!place || *place < 0 || *place >= kMaxHosts) {
        usage_error("--node-rank must be an integer from 0 to " + std::to_string(kMaxHosts - 1) + ", got '" + text +
                    "'");
      }
      options.node_rank = static_cast<int>(*place);
    } else if (name == "--master-addr" || name == "--master_addr") {
      options.master_addr = value();
      // [::1] as in a URL: the ranks (and torch's store) take the address without brackets.
      if (options.master_addr.size() > 2 && options.master_addr.front() == '[' && options.master_addr.back() == ']') {
        options.master_addr = options.master_addr.substr(1, options.master_addr.size() - 2);
      }
      if (options.master_addr.empty()) usage_error("--master-addr needs an address");
    } else if (name == "--master-port" || name == "--master_port") {
      std::string text = value();
      std::optional<long> port = parse_integer(text);
      if (!port || *port < 1 || *port > 65535) {
        usage_error("--master-port must be a port from 1 to 65535, got '" + text + "'");
      }
      options.master_port = std::to_string(*port);  // as a number: "+29501" is no port to the ranks
    } else if (name == "--rdzv-id" || name == "--rdzv_id") {
      options.run_id = value();
      if (options.run_id.empty()) usage_error("--rdzv-id needs an id");
    } else if (name == "-m" || name == "--module") {
      no_value();
      module = true;
    } else if (name == "--no-python" || name == "--no_python") {
      no_value();
      no_python = true;
    } else if (name == "--standalone") {
      no_value();
      standalone = true;
    } else if (name == "-t" || name == "--tag-output") {
      no_value();
      options.tag_output = true;
    } else if (name == "--timeout") {
      std::string text = value();
      std::optional<double> seconds = parse_seconds(text);
      if (!seconds || *seconds <= 0) {
        usage_error("--timeout must be a positive number of seconds, got '" + text + "'");
      }
      options.timeout_seconds = *seconds;
    } else if (name == "--grace") {
      std::string text = value();
      std::optional<double> seconds = parse_seconds(text);
      if (!seconds) usage_error("--grace must be a number of seconds >= 0, got '" + text + "'");
      options.grace_seconds = *seconds;
    } else if (name == "--bind-to") {
      std::string text = value();
      if (text != "core" && text != "none") usage_error("--bind-to must be core or none, got '" + text + "'");
      options.bind_cores = text == "core";
    } else if (name == "-h" || name == "--help") {
      no_value();
      std::fputs(kUsage, stdout);
      std::exit(0);
    } else if (name == "--version") {
      no_value();
      std::printf("weftrun (Weft) %s\n", WEFTRUN_VERSION);
      std::exit(0);
    } else {
      usage_error("unknown option '" + arg + "'");
    }
  }
  if (options.node_rank >= options.nnodes) {
    usage_error("--node-rank " + std::to_string(options.node_rank) + " is not below --nnodes " +
                std::to_string(options.nnodes));
  }
  if (standalone && options.nnodes > 1) usage_error("--standalone is one host: it does not go with --nnodes > 1");
  if (static_cast<long>(options.nnodes) * options.nproc > kMaxWorld) {
    usage_error(std::to_string(options.nnodes) + " hosts x " + std::to_string(options.nproc) + " ranks: more than " +
                std::to_string(kMaxWorld) + " ranks");
  }
  if (options.nnodes > 1 && options.master_addr.empty()) {
    const char* env_addr = std::getenv("MASTER_ADDR");
    if (env_addr == nullptr || *env_addr == '\0') {
      usage_error("--nnodes > 1 needs --master-addr (or MASTER_ADDR): where rank 0's host can be reached");
    }
  }
  if (index >= argc) usage_error("no program given");
  if (module && no_python) usage_error("--module runs python3 -m: it does not go with --no-python");
  options.command.assign(argv + index, argv + argc);
  // As torchrun: a script runs with the interpreter, a module with -m, both unbuffered (-u),
  // so that what a rank printed is out before a failing peer has it terminated.
  const std::string program = options.command.front();
  if (module) {
    options.command.insert(options.command.begin(), {"python3", "-u", "-m"});
  } else if (!no_python && program.size() > 3 && program.ends_with(".py")) {
    options.command.insert(options.command.begin(), {"python3", "-u"});
  }
  return options;
}

}  // namespace
}  // namespace weftrun

int main(int argc, char** argv) {
  weftrun::Job job(weftrun::parse_options(argc, argv));
  const int status = job.run();
  if (const int sig = job.forwarded_signal()) {  // die by it, as the shell expects of a Ctrl-C'd child
    std::fflush(nullptr);
    std::signal(sig, SIG_DFL);
    sigset_t only;
    sigemptyset(&only);
    sigaddset(&only, sig);
    sigprocmask(SIG_UNBLOCK, &only, nullptr);
    std::raise(sig);
  }
  return status;
}
