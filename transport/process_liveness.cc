#include "transport/process_liveness.h"

#include <dirent.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>

namespace weft::transport {

namespace {

enum class TaskState { Running, Going, Gone, Unknown };

// One task's state from its /proc stat file: Going when a zombie or exiting (PF_EXITING), Gone
// when it has no file any more, Unknown when the file cannot be read.
TaskState taskState(const std::string& statPath) {
  FILE* file = std::fopen(statPath.c_str(), "re");
  if (file == nullptr) return errno == ENOENT || errno == ESRCH ? TaskState::Gone : TaskState::Unknown;
  char line[512] = {};
  const size_t got = std::fread(line, 1, sizeof(line) - 1, file);
  std::fclose(file);
  // "pid (comm) state ppid pgrp session tty_nr tpgid flags ...": comm may hold spaces and
  // parentheses, so the fields start after the last ')'.
  const char* close = got > 0 ? std::strrchr(line, ')') : nullptr;
  char state = 0;
  unsigned long flags = 0;
  if (close == nullptr || std::sscanf(close + 1, " %c %*d %*d %*d %*d %*d %lu", &state, &flags) != 2) {
    return TaskState::Unknown;
  }
  constexpr unsigned long kPfExiting = 0x4;  // include/linux/sched.h
  return state == 'Z' || state == 'X' || (flags & kPfExiting) != 0 ? TaskState::Going : TaskState::Running;
}

// Whether /proc shows this process's pid namespace (it may be absent, or the host's).
bool procIsOurs() {
  static const bool ours = [] {
    long pid = 0;
    FILE* file = std::fopen("/proc/self/stat", "re");
    if (file == nullptr) return false;
    const bool read = std::fscanf(file, "%ld", &pid) == 1;
    std::fclose(file);
    return read && pid == ::getpid();
  }();
  return ours;
}

}  // namespace

uint32_t pidNamespaceId() {
  struct stat st{};
  if (::stat("/proc/self/ns/pid", &st) != 0 || st.st_ino > UINT32_MAX) return 0;
  return static_cast<uint32_t>(st.st_ino);
}

bool processGone(long pid) {
  if (::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) return true;
  if (!procIsOurs()) return false;
  const std::string dir = "/proc/" + std::to_string(pid);
  // The leader's state is the process's unless it left early (pthread_exit in main): then the
  // other threads say whether the process lives.
  if (taskState(dir + "/stat") != TaskState::Going) return false;
  DIR* tasks = ::opendir((dir + "/task").c_str());
  if (tasks == nullptr) return errno == ENOENT;
  bool going = true;
  while (const dirent* entry = ::readdir(tasks)) {
    if (entry->d_name[0] == '.') continue;
    const TaskState state = taskState(dir + "/task/" + entry->d_name + "/stat");
    if (state == TaskState::Running || state == TaskState::Unknown) {
      going = false;
      break;
    }
  }
  ::closedir(tasks);
  return going;
}

}  // namespace weft::transport
