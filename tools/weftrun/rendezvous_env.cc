// Where the ranks meet and what they are told: MASTER_ADDR/MASTER_PORT, the job's id and
// secret (Job::choose_rendezvous), and torchrun's environment for each rank
// (Job::base_environment; the per-rank variables are added in Job::spawn).
#include <netdb.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "job.h"

extern char** environ;

namespace weftrun {
namespace {

// Binds port 0 on `address` and returns the port the kernel chose.
std::optional<std::string> find_free_port(const std::string& address, std::string& error) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* results = nullptr;
  if (int rc = getaddrinfo(address.c_str(), "0", &hints, &results); rc != 0) {
    error = gai_strerror(rc);
    return std::nullopt;
  }
  std::optional<std::string> port;
  error = "no usable address";
  for (addrinfo* ai = results; ai && !port; ai = ai->ai_next) {
    int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) continue;
    sockaddr_storage bound{};
    socklen_t length = sizeof bound;
    char service[NI_MAXSERV];
    if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 &&
        getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &length) == 0 &&
        getnameinfo(reinterpret_cast<sockaddr*>(&bound), length, nullptr, 0, service,
                    sizeof service, NI_NUMERICSERV) == 0) {
      port = service;
    } else {
      error = std::strerror(errno);
    }
    close(fd);
  }
  freeaddrinfo(results);
  return port;
}

// `n` random bytes from the kernel's CSPRNG as 2n hex digits; empty if the kernel has none.
std::string random_hex(size_t n) {
  std::vector<unsigned char> bytes(n);
  if (getrandom(bytes.data(), n, 0) != static_cast<ssize_t>(n)) return {};
  std::string id;
  for (unsigned char byte : bytes) {
    const char* digits = "0123456789abcdef";
    id += digits[byte >> 4];
    id += digits[byte & 15];
  }
  return id;
}

}  // namespace

bool Job::choose_rendezvous(std::string& error) {
  const char* env_addr = std::getenv("MASTER_ADDR");
  const char* env_port = std::getenv("MASTER_PORT");
  master_addr_ = !options_.master_addr.empty() ? options_.master_addr
                 : env_addr && *env_addr       ? env_addr
                                               : "127.0.0.1";
  if (!options_.master_port.empty()) {
    master_port_ = options_.master_port;
  } else if (env_port && *env_port) {
    master_port_ = env_port;
  } else if (options_.nnodes > 1) {
    master_port_ = "29500";  // torchrun's default: every host must name the same port
  } else {
    std::string port_error;
    std::optional<std::string> port = find_free_port(master_addr_, port_error);
    if (!port) {
      error = "cannot find a free port on MASTER_ADDR '" + master_addr_ + "': " + port_error;
      return false;
    }
    master_port_ = *port;
  }
  // The job's id and the ranks' bootstrap secret (WEFT_SECRET), unless the caller chose them.
  // Across hosts both must be the same everywhere, which no weftrun can choose alone: the id
  // is --rdzv-id or torchrun's "none", and the secret the caller's or none (Weft then derives
  // one from the id and port, and warns).
  const char* env_secret = std::getenv("WEFT_SECRET");
  const bool one_host = options_.nnodes == 1;
  run_id_ = !options_.run_id.empty() ? options_.run_id : one_host ? random_hex(8) : "none";
  secret_ = env_secret && *env_secret ? env_secret : one_host ? random_hex(32) : "";
  if (run_id_.empty() || (one_host && secret_.empty())) {
    error = std::string("getrandom: ") + std::strerror(errno);
    return false;
  }
  return true;
}

std::vector<std::string> Job::base_environment() {
  static const char* const kLauncherKeys[] = {
      "MASTER_ADDR", "MASTER_PORT", "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE",
      "GROUP_RANK", "GROUP_WORLD_SIZE", "ROLE_RANK", "ROLE_WORLD_SIZE", "ROLE_NAME",
      "TORCHELASTIC_RUN_ID", "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS",
      // Set by a torchrun this weftrun runs under: they name its agent's store and files, which
      // this job's ranks must not use (with the agent store, no rank would host one).
      "TORCHELASTIC_USE_AGENT_STORE", "TORCHELASTIC_ERROR_FILE", "TORCHELASTIC_TIMER_FILE",
      "TORCHELASTIC_ENABLE_FILE_TIMER", "WEFT_LAUNCHER", "WEFT_SECRET",
  };
  std::vector<std::string> env;
  bool threads_set = false;
  for (char** entry = environ; *entry; ++entry) {
    std::string_view text(*entry);
    std::string_view key = text.substr(0, text.find('='));
    bool ours = std::any_of(std::begin(kLauncherKeys), std::end(kLauncherKeys),
                            [&](const char* k) { return key == k; });
    if (!ours) env.emplace_back(text);
    threads_set = threads_set || key == "OMP_NUM_THREADS";
  }
  // As torchrun: several ranks that each start a thread per CPU (OpenMP, BLAS) would crowd
  // the machine, so each gets one unless the user says otherwise.
  if (!threads_set && options_.nproc > 1) env.emplace_back("OMP_NUM_THREADS=1");
  const std::string world = std::to_string(static_cast<long>(options_.nnodes) * options_.nproc);
  for (const std::string& setting :
       {"MASTER_ADDR=" + master_addr_, "MASTER_PORT=" + master_port_, "WORLD_SIZE=" + world,
        "LOCAL_WORLD_SIZE=" + std::to_string(options_.nproc), "ROLE_WORLD_SIZE=" + world,
        "GROUP_RANK=" + std::to_string(options_.node_rank), "GROUP_WORLD_SIZE=" + std::to_string(options_.nnodes),
        std::string("ROLE_NAME=default"), "TORCHELASTIC_RUN_ID=" + run_id_,
        std::string("TORCHELASTIC_RESTART_COUNT=0"), std::string("TORCHELASTIC_MAX_RESTARTS=0"),
        std::string("WEFT_LAUNCHER=weftrun")}) {
    env.push_back(setting);
  }
  if (!secret_.empty()) env.push_back("WEFT_SECRET=" + secret_);
  return env;
}

}  // namespace weftrun
