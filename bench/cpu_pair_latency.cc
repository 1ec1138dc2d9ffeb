// cpu-pair-latency: the round trip of one cache line between two CPUs, sampled over time.
//
// Two threads, pinned to two CPUs, pass a counter back and forth through one shared cache line;
// every sample (a quarter of a second by default) prints the mean round trip in nanoseconds.
// Every hop of a shared-memory collective pays this, so where it moves, the collectives' small-
// and medium-size times move with it: on the 2-vCPU development VMs it switches between about
// 100 and 500 ns every few seconds (the hypervisor moving the vCPUs between nearby and distant
// cores), which no fixed cost model can follow. bench/tuner_accuracy.py records it beside its
// measurements.
//
//   cpu-pair-latency [--seconds S] [--sample-ms M] [--cpus A,B]
//
// Prints one line: the samples in ns, then "min MIN median MED max MAX".
#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

namespace {

struct alignas(64) Line {
  std::atomic<long> ball{0};  // even: the first thread's turn; odd: the second's
};

bool pin(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return pthread_setaffinity_np(pthread_self(), sizeof set, &set) == 0;
}

// The first two CPUs this process may run on.
bool defaultCpus(int* a, int* b) {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) != 0) return false;
  int found = 0;
  for (int cpu = 0; cpu < CPU_SETSIZE && found < 2; ++cpu) {
    if (CPU_ISSET(cpu, &set)) (found++ == 0 ? *a : *b) = cpu;
  }
  return found == 2;
}

int usage() {
  std::fprintf(stderr, "usage: cpu-pair-latency [--seconds S] [--sample-ms M] [--cpus A,B]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  double seconds = 2;
  int sampleMs = 250;
  int cpuA = -1, cpuB = -1;
  for (int i = 1; i < argc; ++i) {
    if (i + 1 >= argc) return usage();
    if (!std::strcmp(argv[i], "--seconds")) {
      seconds = std::atof(argv[++i]);
    } else if (!std::strcmp(argv[i], "--sample-ms")) {
      sampleMs = std::atoi(argv[++i]);
    } else if (!std::strcmp(argv[i], "--cpus")) {
      if (std::sscanf(argv[++i], "%d,%d", &cpuA, &cpuB) != 2) return usage();
    } else {
      return usage();
    }
  }
  if (seconds <= 0 || sampleMs <= 0) return usage();
  if (cpuA < 0 && !defaultCpus(&cpuA, &cpuB)) {
    std::fprintf(stderr, "cpu-pair-latency: this process may run on fewer than two CPUs\n");
    return 1;
  }

  Line line;
  std::atomic<bool> stop{false};
  std::atomic<bool> pinned{true};
  std::thread partner([&] {
    if (!pin(cpuB)) pinned = false;
    for (long expected = 1;; expected += 2) {
      while (line.ball.load(std::memory_order_acquire) != expected) {
        if (stop.load(std::memory_order_relaxed)) return;
      }
      line.ball.store(expected + 1, std::memory_order_release);
    }
  });
  if (!pin(cpuA)) pinned = false;

  using Clock = std::chrono::steady_clock;
  std::vector<double> samples;
  long ball = 0;
  const int count = std::max(1, static_cast<int>(seconds * 1000 / sampleMs));
  for (int s = 0; s < count && pinned; ++s) {
    const auto start = Clock::now();
    const auto end = start + std::chrono::milliseconds(sampleMs);
    long trips = 0;
    while (Clock::now() < end) {
      for (int i = 0; i < 1000; ++i, ++trips) {
        line.ball.store(++ball, std::memory_order_release);  // odd: the partner's turn
        while (line.ball.load(std::memory_order_acquire) != ball + 1) {
        }
        ++ball;
      }
    }
    samples.push_back(std::chrono::duration<double, std::nano>(Clock::now() - start).count() / trips);
  }
  stop = true;
  partner.join();
  if (!pinned) {
    std::fprintf(stderr, "cpu-pair-latency: cannot pin threads to CPUs %d and %d\n", cpuA, cpuB);
    return 1;
  }

  for (double ns : samples) std::printf("%.0f ", ns);
  std::vector<double> sorted = samples;
  std::sort(sorted.begin(), sorted.end());
  std::printf("min %.0f median %.0f max %.0f\n", sorted.front(), sorted[sorted.size() / 2], sorted.back());
  return 0;
}
