#include "perf_common.h"

#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdarg>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>

namespace weftperf {

bool parseSize(std::string_view text, size_t* bytes) {
  if (text.empty()) return false;
  size_t shift = 0;
  switch (text.back()) {
    case 'K': case 'k': shift = 10; break;
    case 'M': case 'm': shift = 20; break;
    case 'G': case 'g': shift = 30; break;
    default: break;
  }
  if (shift != 0) text.remove_suffix(1);
  if (text.empty()) return false;
  unsigned long long value = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (ec != std::errc() || ptr != end) return false;
  if (value > (std::numeric_limits<size_t>::max() >> shift)) return false;
  *bytes = static_cast<size_t>(value) << shift;
  return true;
}

bool parseInt(std::string_view text, long min, long max, long* value) {
  long parsed = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, parsed);
  if (text.empty() || ec != std::errc() || ptr != end) return false;
  if (parsed < min || parsed > max) return false;
  *value = parsed;
  return true;
}

std::vector<size_t> Sweep::sizes() const {
  std::vector<size_t> result;
  const size_t limit = std::numeric_limits<size_t>::max();
  for (size_t size = minBytes; size <= maxBytes;) {
    result.push_back(size);
    if (multiplicative()) {
      if (size > limit / stepFactor) break;
      size *= stepFactor;
    } else {
      if (size > limit - stepBytes) break;
      size += stepBytes;
    }
  }
  return result;
}

std::string Sweep::describeStep() const {
  return multiplicative() ? std::to_string(stepFactor) + "(factor)"
                          : std::to_string(stepBytes) + "(bytes)";
}

int parseCommonOption(int opt, const std::string& arg, CommonOptions* options, std::string* error) {
  Sweep& sweep = options->sweep;
  long value = 0;
  auto bad = [&](const char* what) {
    *error = std::string("-") + static_cast<char>(opt) + ": '" + arg + "' is not " + what;
    return -1;
  };
  auto size = [&](size_t* bytes) { return parseSize(arg, bytes) && *bytes >= 1 && *bytes <= kLargestSize; };
  switch (opt) {
    case 'b':
      if (!size(&sweep.minBytes)) return bad("a size from 1 byte to 1048576G");
      return 1;
    case 'e':
      if (!size(&sweep.maxBytes)) return bad("a size from 1 byte to 1048576G");
      return 1;
    case 'f':
      if (!parseInt(arg, 0, 1 << 20, &value)) return bad("a step factor (an integer from 0 to 1048576)");
      sweep.stepFactor = static_cast<size_t>(value);
      options->stepFactorGiven = true;
      return 1;
    case 'i':
      if (!parseSize(arg, &sweep.stepBytes) || sweep.stepBytes == 0) return bad("a size of at least 1 byte");
      options->stepBytesGiven = true;
      return 1;
    case 'n':
      if (!parseInt(arg, 1, 1000000000, &options->iters)) return bad("an iteration count from 1 to 1000000000");
      return 1;
    case 'w':
      if (!parseInt(arg, 0, 1000000000, &options->warmupIters)) return bad("an iteration count from 0 to 1000000000");
      return 1;
    case 'c':
      if (!parseInt(arg, 0, 1, &value)) return bad("0 or 1");
      options->check = value == 1;
      return 1;
    case 'J':
      if (arg.empty()) return bad("a file name");
      options->jsonPath = arg;
      return 1;
    default:
      return 0;
  }
}

bool finishCommonOptions(CommonOptions* options, std::string* error) {
  Sweep& sweep = options->sweep;
  if (options->stepBytesGiven && !options->stepFactorGiven) sweep.stepFactor = 0;
  if (sweep.minBytes > sweep.maxBytes) {
    *error = "-b (" + std::to_string(sweep.minBytes) + " bytes) is larger than -e (" +
             std::to_string(sweep.maxBytes) + " bytes)";
    return false;
  }
  // Found out now rather than after a sweep that may run for hours.
  if (!options->jsonPath.empty()) {
    const std::filesystem::path path(options->jsonPath);
    const std::filesystem::path folder = path.has_parent_path() ? path.parent_path() : ".";
    const bool exists = ::access(path.c_str(), F_OK) == 0;
    if (exists ? ::access(path.c_str(), W_OK) != 0 : ::access(folder.c_str(), W_OK | X_OK) != 0) {
      *error = "-J " + options->jsonPath + ": cannot write " + (exists ? "the file" : "in " + folder.string()) +
               ": " + std::strerror(errno);
      return false;
    }
  }
  return true;
}

std::vector<option> longOptions(std::initializer_list<option> own) {
  std::vector<option> table = {
      {"minbytes", required_argument, nullptr, 'b'},  {"maxbytes", required_argument, nullptr, 'e'},
      {"stepfactor", required_argument, nullptr, 'f'}, {"stepbytes", required_argument, nullptr, 'i'},
      {"iters", required_argument, nullptr, 'n'},      {"warmup_iters", required_argument, nullptr, 'w'},
      {"check", required_argument, nullptr, 'c'},      {"json", required_argument, nullptr, 'J'},
  };
  table.insert(table.end(), own.begin(), own.end());
  table.push_back({nullptr, 0, nullptr, 0});
  return table;
}

std::string shortOptions(const char* own) { return std::string(":b:e:f:i:n:w:c:J:") + own; }

int usageError(const char* tool, const char* format, ...) {
  // Every rank finds the same mistake: rank 0 alone says so, else the lines interleave.
  if (launcherSaysNotRankZero()) return kExitUsage;
  std::fprintf(stderr, "%s: ", tool);
  va_list args;
  va_start(args, format);
  std::vfprintf(stderr, format, args);
  va_end(args);
  std::fprintf(stderr, "\nRun '%s -h' for the options.\n", tool);
  return kExitUsage;
}

int readOptions(int argc, char** argv, const char* tool, const std::string& shortOpts, const option* longOpts,
                CommonOptions* options, void (*usage)(), const std::function<int(int, const std::string&)>& own) {
  opterr = 0;  // the messages are ours
  int c;
  while ((c = getopt_long(argc, argv, shortOpts.c_str(), longOpts, nullptr)) != -1) {
    const std::string arg = optarg != nullptr ? optarg : "";
    std::string error;
    const int common = parseCommonOption(c, arg, options, &error);
    if (common < 0) return usageError(tool, "%s", error.c_str());
    if (common > 0) continue;
    switch (c) {
      case 'h':
        if (!launcherSaysNotRankZero()) usage();
        return kExitOk;
      case ':':
        return usageError(tool, "option %s needs a value", argv[optind - 1]);
      case '?':
        if (optopt != 0) return usageError(tool, "unknown option -%c", optopt);
        return usageError(tool, "unknown option %s", argv[optind - 1]);
      default:
        if (const int status = own(c, arg); status >= 0) return status;
    }
  }
  return -1;
}

Measurement collectiveMeasurement(size_t bytes, double busFactor, double timeUs, long long wrong) {
  Measurement m;
  m.timeUs = timeUs;
  m.wrong = wrong;
  if (timeUs > 0) {
    m.algbw = static_cast<double>(bytes) / timeUs / 1.0e3;  // bytes/us -> GB/s (1e9 B/s)
    m.busbw = m.algbw * busFactor;
  }
  return m;
}

Measurement allReduceMeasurement(size_t bytes, int nranks, double timeUs, long long wrong) {
  return collectiveMeasurement(bytes, 2.0 * (nranks - 1) / nranks, timeUs, wrong);
}

Row floatSumAllReduceRow(size_t count, int nranks) {
  Row row;
  row.collective = "allreduce";
  row.bytes = count * sizeof(float);
  row.count = count;
  row.type = "float";
  row.redop = "sum";
  row.nranks = nranks;
  return row;
}

namespace {

// Each placement block: "  %7s  %6s  %6s %6s" = 32 characters.
constexpr int kBlockWidth = 32;
// The row prefix: "%12s  %12s  %8s  %6s  %6s" = 12 + 14 + 10 + 8 + 8 characters.
constexpr int kPrefixWidth = 52;

std::string centered(const char* text, int width) {
  const int len = static_cast<int>(std::strlen(text));
  const int left = (width - len) / 2;
  return std::string(static_cast<size_t>(left), ' ') + text +
         std::string(static_cast<size_t>(width - len - left), ' ');
}

std::string formatTime(double us) {
  char buf[32];
  if (us >= 10000.0) {
    std::snprintf(buf, sizeof buf, "%7.0f", us);
  } else if (us >= 100.0) {
    std::snprintf(buf, sizeof buf, "%7.1f", us);
  } else {
    std::snprintf(buf, sizeof buf, "%7.2f", us);
  }
  return buf;
}

void printMeasurement(std::FILE* out, const Measurement& m) {
  if (!m.ran()) {  // send/recv has no in-place run
    std::fprintf(out, "  %7s  %6s  %6s  %5s", "-", "-", "-", "-");
    return;
  }
  char wrong[32];
  if (m.wrong < 0) {
    std::snprintf(wrong, sizeof wrong, "%s", "N/A");
  } else {
    std::snprintf(wrong, sizeof wrong, "%lld", m.wrong);
  }
  std::fprintf(out, "  %7s  %6.2f  %6.2f  %5s", formatTime(m.timeUs).c_str(), m.algbw, m.busbw,
               wrong);
}

// JSON numbers must be finite; anything else is written as null.
void jsonNumber(std::FILE* out, double value, const char* format) {
  if (std::isfinite(value)) {
    std::fprintf(out, format, value);
  } else {
    std::fputs("null", out);
  }
}

// Names in rows are fixed identifiers ("float", "sum"), but escape anyway.
void jsonString(std::FILE* out, const std::string& s) {
  std::fputc('"', out);
  for (char c : s) {
    if (c == '"' || c == '\\') {
      std::fputc('\\', out);
      std::fputc(c, out);
    } else if (static_cast<unsigned char>(c) < 0x20) {
      std::fprintf(out, "\\u%04x", static_cast<unsigned>(static_cast<unsigned char>(c)));
    } else {
      std::fputc(c, out);
    }
  }
  std::fputc('"', out);
}

void jsonMeasurement(std::FILE* out, const Measurement& m) {
  if (!m.ran()) {
    std::fputs("null", out);
    return;
  }
  std::fputs("{\"time_us\":", out);
  jsonNumber(out, m.timeUs, "%.3f");
  std::fputs(",\"algbw\":", out);
  jsonNumber(out, m.algbw, "%.6g");
  std::fputs(",\"busbw\":", out);
  jsonNumber(out, m.busbw, "%.6g");
  if (m.wrong < 0) {
    std::fputs(",\"wrong\":null}", out);
  } else {
    std::fprintf(out, ",\"wrong\":%lld}", m.wrong);
  }
}

}  // namespace

void printColumnHeader(std::FILE* out) {
  std::fprintf(out, "#%s%s%s\n", std::string(kPrefixWidth - 1, ' ').c_str(),
               centered("out-of-place", kBlockWidth).c_str(),
               centered("in-place", kBlockWidth).c_str());
  std::fprintf(out, "# %10s  %12s  %8s  %6s  %6s", "size", "count", "type", "redop", "root");
  for (int block = 0; block < 2; ++block) {
    std::fprintf(out, "  %7s  %6s  %6s %6s", "time", "algbw", "busbw", "#wrong");
  }
  std::fprintf(out, "\n# %10s  %12s  %8s  %6s  %6s", "(B)", "(elements)", "", "", "");
  for (int block = 0; block < 2; ++block) {
    std::fprintf(out, "  %7s  %6s  %6s %6s", "(us)", "(GB/s)", "(GB/s)", "");
  }
  std::fputc('\n', out);
}

void printRow(std::FILE* out, const Row& row) {
  std::fprintf(out, "%12zu  %12zu  %8s  %6s  %6d", row.bytes, row.count, row.type.c_str(),
               row.redop.c_str(), row.root);
  printMeasurement(out, row.oop);
  printMeasurement(out, row.ip);
  std::fputc('\n', out);
  std::fflush(out);
}

void printFooter(std::FILE* out, long long errors, bool checked, double avgBusBw) {
  std::fprintf(out, "# Out of bounds values : %lld %s%s\n", errors, errors == 0 ? "OK" : "FAILED",
               checked ? "" : " (not checked: -c 0)");
  std::fprintf(out, "# Avg bus bandwidth    : %g\n", avgBusBw);
  std::fflush(out);
}

int finishReport(const char* tool, const std::vector<Row>& rows, long long errors, bool checked,
                 const std::string& jsonPath) {
  printFooter(stdout, errors, checked, averageBusBw(rows));
  int status = kExitOk;
  if (errors != 0) {
    std::fprintf(stderr, "%s: data check FAILED (see the #wrong columns and the out-of-bounds count)\n", tool);
    status = kExitFailure;
  }
  std::string error;
  if (!jsonPath.empty() && !writeJson(jsonPath, rows, &error)) {
    std::fprintf(stderr, "%s: %s\n", tool, error.c_str());
    status = kExitFailure;
  }
  return status;
}

double averageBusBw(const std::vector<Row>& rows) {
  double total = 0.0;
  size_t measured = 0;
  for (const Row& row : rows) {
    for (const Measurement* m : {&row.oop, &row.ip}) {
      if (!m->ran()) continue;  // send/recv has no in-place run
      total += m->busbw;
      ++measured;
    }
  }
  return measured == 0 ? 0.0 : total / static_cast<double>(measured);
}

// Schema: a JSON array with one object per row:
//   {"collective":"allreduce","size":B,"count":N,"type":"float","redop":"sum","root":-1,
//    "nranks":n,"oop":{"time_us":t,"algbw":x,"busbw":y,"wrong":w},"ip":{...}}
// time_us is per iteration (max over ranks), bandwidths are GB/s (1e9 bytes/s), wrong is the
// number of mismatching elements summed over ranks, or null when checking was off.
bool writeJson(const std::string& path, const std::vector<Row>& rows, std::string* error) {
  std::FILE* out = std::fopen(path.c_str(), "w");
  if (out == nullptr) {
    *error = "cannot open " + path + ": " + std::strerror(errno);
    return false;
  }
  std::fputs("[\n", out);
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row& row = rows[i];
    std::fputs("  {\"collective\":", out);
    jsonString(out, row.collective);
    std::fprintf(out, ",\"size\":%zu,\"count\":%zu,\"type\":", row.bytes, row.count);
    jsonString(out, row.type);
    std::fputs(",\"redop\":", out);
    jsonString(out, row.redop);
    std::fprintf(out, ",\"root\":%d,\"nranks\":%d,\"oop\":", row.root, row.nranks);
    jsonMeasurement(out, row.oop);
    std::fputs(",\"ip\":", out);
    jsonMeasurement(out, row.ip);
    std::fputs(i + 1 < rows.size() ? "},\n" : "}\n", out);
  }
  std::fputs("]\n", out);
  const bool writeFailed = std::ferror(out) != 0;
  if (std::fclose(out) != 0 || writeFailed) {
    *error = "cannot write " + path + ": " + std::strerror(errno);
    return false;
  }
  return true;
}

bool launcherSaysNotRankZero() {
  for (const char* name : {"RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"}) {
    const char* value = std::getenv(name);
    if (value != nullptr && *value != '\0') return std::strcmp(value, "0") != 0;
  }
  return false;
}

}  // namespace weftperf
