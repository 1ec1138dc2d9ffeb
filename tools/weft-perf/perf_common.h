// Pieces shared by weft-perf and the peer benchmark drivers under bench/: argument values,
// the size sweep, and nccl-tests-style text rows and JSON output. Nothing here depends on
// Weft itself, so a driver for another library can print exactly the same table.
#pragma once

#include <cstddef>
#include <getopt.h>

#include <cstdio>
#include <functional>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

namespace weftperf {

// Exit codes shared by the benchmark tools.
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;  // a library call or a data check failed
inline constexpr int kExitUsage = 2;    // bad command line

// Parses a byte count: decimal digits with an optional K, M or G suffix (powers of 1024,
// either case). Returns false for anything else, including overflow.
bool parseSize(std::string_view text, size_t* bytes);
// The largest message size the tools take (1 PiB, "1048576G"): buffers are sized from it with
// rounding and guards added, far below SIZE_MAX.
inline constexpr size_t kLargestSize = size_t{1} << 50;

// Parses a decimal integer in [min, max]. Returns false for anything else.
bool parseInt(std::string_view text, long min, long max, long* value);

// The message sizes to run: from minBytes to maxBytes, multiplying by stepFactor when it is
// greater than 1 and otherwise adding stepBytes (the nccl-tests rule).
struct Sweep {
  size_t minBytes = 8;
  size_t maxBytes = size_t{128} << 20;
  size_t stepFactor = 2;
  size_t stepBytes = size_t{1} << 20;

  bool multiplicative() const { return stepFactor > 1; }
  std::vector<size_t> sizes() const;
  // "2(factor)" or "1048576(bytes)", as in the nccl-tests parameter line.
  std::string describeStep() const;
};

// The flags every benchmark here shares, nccl-tests style: the sweep (-b -e -f -i), -n, -w,
// -c and -J. A tool's own Options derive from this.
struct CommonOptions {
  Sweep sweep;
  long iters = 20;
  long warmupIters = 5;
  bool check = true;
  std::string jsonPath;
  bool stepFactorGiven = false;  // -i without -f means additive steps
  bool stepBytesGiven = false;
};

// Parses getopt option `opt` with its argument when it is one of the shared flags. Returns 1
// when handled, 0 when `opt` is not a shared flag, -1 for a bad value (*error says why).
int parseCommonOption(int opt, const std::string& arg, CommonOptions* options, std::string* error);

// After the getopt loop: applies "-i without -f" and checks -b <= -e. False: *error says why.
bool finishCommonOptions(CommonOptions* options, std::string* error);

// getopt_long's table for the shared flags followed by a tool's own, with the terminator, and
// the matching short options ("b:e:f:i:n:w:c:J:" + the tool's own).
std::vector<option> longOptions(std::initializer_list<option> own);
std::string shortOptions(const char* own);

// "tool: <message>" and "Run 'tool -h' for the options." on stderr; returns kExitUsage.
int usageError(const char* tool, const char* format, ...) __attribute__((format(printf, 2, 3)));

// The getopt loop every driver runs over `shortOpts` / `longOpts` (a terminated table): the
// shared flags go to parseCommonOption; -h prints `usage` (on rank 0 only) and ends with
// kExitOk; a missing value or an unknown option is a usage error; every other option goes to
// `own(opt, arg)`, which returns -1 to go on or an exit status. Returns -1 once every option is
// read (optind then names the first operand), else the exit status.
int readOptions(int argc, char** argv, const char* tool, const std::string& shortOpts, const option* longOpts,
                CommonOptions* options, void (*usage)(), const std::function<int(int, const std::string&)>& own);

// One timed variant (out-of-place or in-place) of one row.
struct Measurement {
  double timeUs = 0;  // per iteration, the maximum over ranks
  double algbw = 0;   // GB/s: bytes / time
  double busbw = 0;   // GB/s: algbw x the collective's factor (2(n-1)/n for all-reduce)
  long long wrong = -1;  // mismatching elements summed over ranks; -1: not checked
  bool ran() const { return timeUs > 0; }  // not run: shown as "-", null in JSON
};

// Fills in algbw and busbw = algbw x busFactor for a collective of `bytes` (see collectives.h).
Measurement collectiveMeasurement(size_t bytes, double busFactor, double timeUs, long long wrong);
// The same for an all-reduce of `bytes` on `nranks` ranks (busFactor 2(n-1)/n).
Measurement allReduceMeasurement(size_t bytes, int nranks, double timeUs, long long wrong);

struct Row {
  std::string collective;  // "allreduce"
  size_t bytes = 0;
  size_t count = 0;
  std::string type;   // nccl-tests type name, e.g. "float"
  std::string redop;  // "sum", "prod", ...
  int root = -1;      // -1 for collectives without a root
  int nranks = 0;
  Measurement oop;  // out-of-place
  Measurement ip;   // in-place
};

// The row of a float32 sum all-reduce of `count` elements on `nranks` ranks, before its
// measurements (the peer drivers time only that).
Row floatSumAllReduceRow(size_t count, int nranks);

// The three header lines above the rows (placement banner, column names, units).
void printColumnHeader(std::FILE* out);
void printRow(std::FILE* out, const Row& row);
// "# Out of bounds values : N OK|FAILED" and "# Avg bus bandwidth    : X", as nccl-tests: N
// counts the checks that found wrong elements (as nccl-tests does) and the elements written
// past an output; FAILED unless 0.
void printFooter(std::FILE* out, long long errors, bool checked, double avgBusBw);

// Rank 0's end of a run: the footer, a FAILED line on stderr when `errors` (printFooter), the
// JSON rows when jsonPath is set. Returns the exit status: kExitFailure on errors or a JSON
// that could not be written, else kExitOk.
int finishReport(const char* tool, const std::vector<Row>& rows, long long errors, bool checked,
                 const std::string& jsonPath);

// Mean busbw over every measurement (both placements of every row); 0 when there are none.
double averageBusBw(const std::vector<Row>& rows);

// Writes rows as a JSON array (the schema is described above writeJson in perf_common.cc).
// Returns false and sets *error when the file cannot be written.
bool writeJson(const std::string& path, const std::vector<Row>& rows, std::string* error);

// True when the launcher environment says this process is not rank 0 (RANK,
// OMPI_COMM_WORLD_RANK, PMI_RANK, SLURM_PROCID). Used to print --help once.
bool launcherSaysNotRankZero();

}  // namespace weftperf
